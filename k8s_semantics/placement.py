"""Which nodes a pod may use by its spec: nodeSelector, required node affinity and tolerations,
against a node's labels and taints (kube-scheduler's NodeAffinity and TaintToleration filters)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from k8s_semantics.nodeselector import NodeSelectorRequirement, requirement_matches
from k8s_semantics.taints import Taint, Toleration, tolerates

__all__ = ["FILTERED_EFFECTS", "PodPlacement", "node_matches_placement", "tolerates_taints"]

FILTERED_EFFECTS = frozenset({"NoSchedule", "NoExecute"})  # what TaintToleration filters on


@dataclass(frozen=True, slots=True)
class PodPlacement:
    """The parts of a pod spec that decide which nodes (and flavors) it may use."""

    node_selector: Mapping[str, str] = field(default_factory=dict)
    # Required node affinity: terms are ORed, requirements inside a term ANDed.
    affinity_terms: tuple[tuple[NodeSelectorRequirement, ...], ...] = ()
    tolerations: tuple[Toleration, ...] = ()


def node_matches_placement(node_labels: Mapping[str, str], pod: PodPlacement) -> bool:
    """The pod's nodeSelector and required node affinity against a node's own labels."""
    if any(node_labels.get(k) != v for k, v in pod.node_selector.items()):
        return False
    terms = pod.affinity_terms
    return not terms or any(all(requirement_matches(r, node_labels) for r in term) for term in terms)


def tolerates_taints(tolerations: Iterable[Toleration], taints: Iterable[Taint]) -> bool:
    """Whether every NoSchedule / NoExecute taint of a node is tolerated."""
    held = tuple(tolerations)
    return all(any(tolerates(t, taint) for t in held) for taint in taints if taint.effect in FILTERED_EFFECTS)
