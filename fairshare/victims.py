"""What the queues make of kube-scheduler's victims on one node: keep them, replace them by the
fair-sharing choice, or drop the node. Kueue's choice is here; KAI's reclaim rules are in
``fairshare.kai_usage`` (they read its per-queue allocation)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from fairshare.config import QueueConfig
from fairshare.preemption import Candidate, fair_preemption
from fairshare.quota import TreeUsage, Usage

__all__ = ["PreemptChoice", "kueue_victims"]


@dataclass(frozen=True, slots=True)
class PreemptChoice:
    """``keep``: quota is not what blocks the pod, judge the scheduler's victims by node fit only.
    ``replace``: these victims (UIDs, highest priority first). ``drop``: no valid set on this node."""

    action: Literal["keep", "replace", "drop"]
    victims: tuple[str, ...] = ()
    reason: str = ""
    detail: tuple[dict[str, Any], ...] = ()


def kueue_victims(
    config: QueueConfig,
    snapshot: TreeUsage,
    cluster_queue: str,
    request: Usage,
    candidates: Sequence[Candidate],
    priority: int,
) -> PreemptChoice:
    """Kueue's fair-sharing victims among the node's admitted workloads, highest priority first."""
    victims = fair_preemption(
        snapshot,
        cluster_queue,
        request,
        candidates,
        priority=priority,
        weights=config.weight,
        strategies=config.preemption_strategies,
    )
    if not victims:
        return PreemptChoice("drop", reason=f"no fair-sharing victims on this node for ClusterQueue {cluster_queue}")
    order = sorted(range(len(victims)), key=lambda i: (-victims[i].candidate.priority, i))
    chosen = [victims[i] for i in order]
    detail = tuple(
        {"uid": v.candidate.uid, "clusterQueue": v.candidate.cluster_queue, "reason": v.reason} for v in chosen
    )
    return PreemptChoice("replace", tuple(v.candidate.uid for v in chosen), detail=detail)
