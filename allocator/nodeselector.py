"""core/v1 NodeSelector matching, as kube-scheduler's ``nodeaffinity`` package does it.

Used for slice relevance (a slice's or device's ``nodeSelector``) and for already-allocated claims
(their ``status.allocation.nodeSelector`` must match the node).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from allocator.api import NodeRef, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm

__all__ = ["node_selector_matches", "node_selector_to_obj", "term_matches"]

_NAME_FIELD = "metadata.name"
_INT_TEXT = re.compile(r"[+-]?[0-9]+")


def _expression_matches(req: NodeSelectorRequirement, labels: Mapping[str, str]) -> bool:
    value = labels.get(req.key)
    op = req.operator
    if op == "In":
        return value is not None and value in req.values
    if op == "NotIn":
        return value is None or value not in req.values
    if op == "Exists":
        return value is not None and not req.values
    if op == "DoesNotExist":
        return value is None and not req.values
    if op in ("Gt", "Lt"):
        # One integer value; a label that is not an integer never matches.
        if value is None or len(req.values) != 1:
            return False
        # strconv.ParseInt syntax: Python's int() would also read "1_0" (a valid label value) as 10.
        if _INT_TEXT.fullmatch(value) is None or _INT_TEXT.fullmatch(req.values[0]) is None:
            return False
        have, want = int(value), int(req.values[0])
        return have > want if op == "Gt" else have < want
    return False  # an unknown operator makes the term invalid: it matches nothing


def _field_matches(req: NodeSelectorRequirement, name: str) -> bool:
    if req.key != _NAME_FIELD:
        return False  # only metadata.name is a supported field
    if req.operator == "In":
        return name in req.values
    if req.operator == "NotIn":
        return name not in req.values
    return False


def term_matches(term: NodeSelectorTerm, node: NodeRef) -> bool:
    """All requirements of the term hold; a term without requirements matches no node."""
    if not term.match_expressions and not term.match_fields:
        return False
    labels = node.labels
    for req in term.match_expressions:
        if not _expression_matches(req, labels):
            return False
    return all(_field_matches(req, node.name) for req in term.match_fields)


def node_selector_matches(selector: NodeSelector | None, node: NodeRef) -> bool:
    """v1 NodeSelector semantics: any term matches. ``None`` (no selector) matches every node."""
    if selector is None:
        return True
    return any(term_matches(term, node) for term in selector.terms)


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
