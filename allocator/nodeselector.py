"""core/v1 NodeSelector for the allocator: matching (k8s_semantics.nodeselector) on a ``NodeRef``, and
the JSON the API server writes for an allocation's ``nodeSelector``.

Used for slice relevance (a slice's or device's ``nodeSelector``) and for already-allocated claims
(their ``status.allocation.nodeSelector`` must match the node).
"""

from __future__ import annotations

from allocator.types import NodeRef, NodeSelector, NodeSelectorRequirement
from k8s_semantics import nodeselector

__all__ = ["node_selector_matches", "node_selector_to_obj"]


def node_selector_matches(selector: NodeSelector | None, node: NodeRef) -> bool:
    """v1 NodeSelector semantics: any term matches. ``None`` (no selector) matches every node."""
    return nodeselector.node_selector_matches(selector, node.name, node.labels)


def _requirement_to_obj(req: NodeSelectorRequirement) -> dict[str, object]:
    out: dict[str, object] = {"key": req.key, "operator": req.operator}
    if req.values:
        out["values"] = list(req.values)
    return out


def node_selector_to_obj(selector: NodeSelector) -> dict[str, object]:
    """The JSON of a NodeSelector as the API server writes it (empty lists omitted)."""
    terms = []
    for term in selector.terms:
        obj: dict[str, object] = {}
        if term.match_expressions:
            obj["matchExpressions"] = [_requirement_to_obj(r) for r in term.match_expressions]
        if term.match_fields:
            obj["matchFields"] = [_requirement_to_obj(r) for r in term.match_fields]
        terms.append(obj)
    return {"nodeSelectorTerms": terms}
