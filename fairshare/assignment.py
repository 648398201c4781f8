"""Flavor assignment: a pod's queue, the flavor each requested resource takes on a node, and the
queue's verdict there (Kueue's flavorassigner, one node-label signature at a time).

For each resource the ClusterQueue covers, the first flavor of its resource group that the node
belongs to and the pod may use (taints, nodeSelector, required affinity) is the one the pod gets.
The same function decides admission (filter, bind) and what a counted pod adds to usage, and a
counted pod keeps the flavors it was first counted under, so accounting and admission agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from allocator.types import ResourceClaim
from fairshare.admission import Verdict, check_quota
from fairshare.config import KAI_QUEUE_LABEL, KUEUE_QUEUE_LABEL, QueueConfig
from fairshare.flavor import PodPlacement, flavor_fits_pod, node_matches_flavor
from fairshare.quota import FlavorResource, TreeUsage, Usage
from fairshare.requests import kueue_amounts, queue_requests
from scoring.framework import PodInfo

__all__ = [
    "FlavorAssignment",
    "FlavorVerdict",
    "QueuedPod",
    "assign_flavors",
    "counted_usage",
    "judge",
    "queued_pod",
]


@dataclass(frozen=True, slots=True)
class QueuedPod:
    """A pod's queue, resolved once per request. ``missing`` says why its queue cannot be used."""

    kind: Literal["kueue", "kai"]
    queue: str
    requests: Mapping[str, float]  # Kueue: in Kueue units (cpu in cores); KAI: base units (milli-CPU, bytes)
    covered: tuple[str, ...] = ()  # Kueue: the requested resources the ClusterQueue covers
    missing: str = ""


def queued_pod(
    config: QueueConfig, pod: PodInfo, claims: Mapping[str, ResourceClaim], *, kai: bool = True
) -> QueuedPod | None:
    """The pod's queue (Kueue label first, then KAI when ``kai``), or None: pods without one are not
    subject to quota."""
    labels = dict(pod.queue_labels)
    if KUEUE_QUEUE_LABEL in labels:
        name = labels[KUEUE_QUEUE_LABEL]
        cq = config.cluster_queue_for(pod.namespace, labels)
        if cq is None:
            return QueuedPod("kueue", name, {}, missing=config.why_not_admitting(pod.namespace, labels))
        raw, why = queue_requests(pod, config, claims)
        requests = kueue_amounts(raw)
        covered = tuple(r for r in requests if config.tree.cluster_queues[cq].flavors_for(r))
        return QueuedPod("kueue", cq, requests, covered, missing=why)
    if kai and KAI_QUEUE_LABEL in labels and config.kai_queues:
        raw, why = queue_requests(pod, config, claims)
        return QueuedPod("kai", labels[KAI_QUEUE_LABEL], {r: float(a) for r, a in raw.items()}, missing=why)
    return None


@dataclass(frozen=True, slots=True)
class FlavorAssignment:
    """Per resource the flavor taken on a node; ``reason`` names the first resource left without one.
    ``flavor_index``/``flavor_count``: the latest position taken in a resource group, and its size."""

    flavors: Mapping[str, str]
    reason: str = ""
    flavor_index: int = 0
    flavor_count: int = 1


def assign_flavors(
    config: QueueConfig,
    cluster_queue: str,
    resources: tuple[str, ...],
    node_labels: Mapping[str, str],
    placement: PodPlacement | None,
) -> FlavorAssignment:
    """The flavor each resource takes on a node with these labels. ``placement`` None (a pod not seen
    by filter) skips the pod's own flavor rules."""
    spec = config.tree.cluster_queues[cluster_queue]
    flavors: dict[str, str] = {}
    index, count, reason = 0, 1, ""
    for resource in resources:
        candidates = spec.flavors_for(resource)
        why = ""
        for position, name in enumerate(candidates):
            flavor = config.flavors.get(name)
            if flavor is None or not node_matches_flavor(node_labels, flavor):
                continue
            why = (flavor_fits_pod(flavor, placement) or "") if placement is not None else ""
            if not why:
                flavors[resource] = name
                if position >= index:
                    index, count = position, len(candidates)
                break
        if resource not in flavors and not reason:
            reason = why or f"node's flavor is not allowed for ClusterQueue {cluster_queue} ({resource})"
    return FlavorAssignment(flavors, reason, index, count)


@dataclass(frozen=True, slots=True)
class FlavorVerdict:
    """The queue's verdict on one node-label signature (hence on every node carrying it)."""

    flavors: Mapping[str, str]  # resource -> flavor; empty when the node's flavor is not allowed
    request: Mapping[FlavorResource, float]
    verdict: Verdict
    reason: str = ""
    borrowing: bool = False
    flavor_index: int = 0
    flavor_count: int = 1


def judge(
    config: QueueConfig,
    queued: QueuedPod,
    placement: PodPlacement | None,
    node_labels: Mapping[str, str],
    snapshot: TreeUsage,
) -> FlavorVerdict:
    """Flavors for every covered resource, then the quota check of the request under them."""
    assigned = assign_flavors(config, queued.queue, queued.covered, node_labels, placement)
    if assigned.reason:
        return FlavorVerdict({}, {}, Verdict.UNRESOLVABLE, assigned.reason)
    request = {(assigned.flavors[r], r): queued.requests[r] for r in queued.covered}
    verdict = check_quota(snapshot, queued.queue, request)
    return FlavorVerdict(
        assigned.flavors,
        request,
        verdict.verdict,
        verdict.reason,
        verdict.borrowing,
        assigned.flavor_index,
        assigned.flavor_count,
    )


def counted_usage(
    config: QueueConfig,
    cluster_queue: str,
    requests: Mapping[str, float],
    node_labels: Mapping[str, str],
    placement: PodPlacement | None,
    recorded: tuple[str, Usage] | None = None,
) -> dict[FlavorResource, float]:
    """What a counted pod adds to its ClusterQueue, per (flavor, resource), requests in Kueue units.

    A resource keeps the flavor ``recorded`` when the pod was first counted while the ClusterQueue
    still offers it (a node relabelled later does not move admitted usage); otherwise it takes the
    flavor assigned on the node now. Resources the queue does not cover add nothing."""
    kept: dict[str, str] = {}
    if recorded is not None and recorded[0] == cluster_queue:
        offered = config.tree.cluster_queues[cluster_queue]
        kept = {r: f for f, r in recorded[1] if f in offered.flavors_for(r)}
    new = tuple(r for r in requests if r not in kept)
    assigned = assign_flavors(config, cluster_queue, new, node_labels, placement).flavors if new else {}
    flavors = {**assigned, **kept}
    return {(flavors[r], r): amount for r, amount in requests.items() if r in flavors and amount}
