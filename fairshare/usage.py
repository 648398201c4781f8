"""Per-ClusterQueue usage in (flavor, resource) units: a ledger of what each counted pod adds.

The adapter feeding it calls ``account`` once per pod event, so the hot paths only read: the tree
snapshot and the dominant resource shares are rebuilt only after a change. What a pod counts,
flavors included, is recorded when it is first counted (``fairshare.assignment.counted_usage``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from fairshare.config import QueueConfig
from fairshare.drs import DominantResourceShare, dominant_resource_share
from fairshare.quota import FlavorResource, TreeUsage, Usage, cq_key

__all__ = ["Contribution", "QueueUsage", "add_amounts", "queues_view"]

_EPSILON = 1e-9
K = TypeVar("K")


def add_amounts(target: dict[K, float], amounts: Mapping[K, float], sign: float = 1.0) -> None:
    """``target += sign * amounts`` per key; a sum that reaches zero (within rounding) is dropped."""
    for key, value in amounts.items():
        total = target.get(key, 0.0) + sign * value
        if abs(total) > _EPSILON:
            target[key] = total
        else:
            target.pop(key, None)


# What one pod adds: its ClusterQueue and amounts per (flavor, resource); (None, None) for nothing.
Contribution = tuple[str | None, Mapping[FlavorResource, float] | None]


@dataclass(slots=True)
class QueueUsage:
    """Per-ClusterQueue usage of bound non-terminal and assumed pods."""

    config: QueueConfig
    usage: dict[str, dict[FlavorResource, float]] = field(default_factory=dict)
    _counted: dict[str, tuple[str, dict[FlavorResource, float]]] = field(default_factory=dict)
    _version: int = 0  # bumped on every usage change; the tree snapshot is rebuilt only after one
    _snapshot: tuple[int, TreeUsage] | None = None

    def recount(self, contributions: Iterable[tuple[str, Contribution]]) -> None:
        """Rebuild all usage (start-up, or after the queue configuration changed)."""
        self.usage.clear()
        self._counted.clear()
        self._version += 1
        for uid, (cluster_queue, amounts) in contributions:
            self.account(uid, cluster_queue, amounts)

    def reconfigure(self, config: QueueConfig) -> None:
        """Swap in a new queue configuration (config reload, watched Kueue objects); ``recount`` next."""
        self.config = config
        self._snapshot = None

    def account(self, uid: str, cluster_queue: str | None, amounts: Mapping[FlavorResource, float] | None) -> None:
        """Set what pod ``uid`` adds (None: nothing); takes out its previous contribution first."""
        old = self._counted.pop(uid, None)
        if old is not None:
            self._add(old[0], old[1], -1.0)
        if cluster_queue is not None and amounts:
            contribution = dict(amounts)
            self._counted[uid] = (cluster_queue, contribution)
            self._add(cluster_queue, contribution, 1.0)

    def counted(self, uid: str) -> tuple[str, Usage] | None:
        """The ClusterQueue and (flavor, resource) amounts pod ``uid`` counts, if any."""
        return self._counted.get(uid)

    def _add(self, cq: str, amounts: Mapping[FlavorResource, float], sign: float) -> None:
        self._version += 1
        add_amounts(self.usage.setdefault(cq, {}), amounts, sign)

    def snapshot(self) -> TreeUsage:
        """Usage of every node of the tree; immutable, so it is shared until the usage changes."""
        if self._snapshot is None or self._snapshot[0] != self._version:
            self._snapshot = (self._version, self.config.tree.tree_usage(self.usage))
        return self._snapshot[1]

    def snapshot_without(self, uid: str) -> TreeUsage:
        """The snapshot without pod ``uid``: a retried pod must not compete with its own assumption."""
        snap = self.snapshot()
        own = self._counted.get(uid)
        return snap if own is None else snap.with_delta(own[0], own[1], -1.0)

    def shares(self, weighted: bool = True) -> dict[str, DominantResourceShare]:
        snap = self.snapshot()
        weights = self.config.weight if weighted else (lambda _f, _r: 1.0)
        return {key: dominant_resource_share(snap, key, weights) for key in self.config.tree.nodes}

    def share_of(self, cluster_queue: str) -> DominantResourceShare:
        return dominant_resource_share(self.snapshot(), cq_key(cluster_queue), self.config.weight)


def queues_view(config: QueueConfig | None, usage: QueueUsage | None = None) -> dict[str, Any]:
    """JSON for /debug/queues: per node of the tree and (flavor, resource), the quota numbers and
    weighted/unweighted DRS. Usage is empty until the cache feeds ``QueueUsage``."""
    if config is None:
        return {"enabled": False}
    snap = (usage or QueueUsage(config)).snapshot()
    tree = config.tree
    nodes: dict[str, Any] = {}
    for key in tree.post_order:
        node = tree.nodes[key]
        weighted = dominant_resource_share(snap, key, config.weight)
        plain = dominant_resource_share(snap, key)
        used = snap.usage[key]
        resources = []
        for fr in sorted(set(node.subtree_quota) | set(used)):
            quota, u = node.subtree_quota.get(fr, 0.0), used.get(fr, 0.0)
            resources.append(
                {
                    "flavor": fr[0],
                    "resource": fr[1],
                    "subtreeQuota": quota,
                    "localQuota": node.local_quota.get(fr, 0.0),
                    "borrowingLimit": node.borrowing_limit.get(fr),
                    "usage": u,
                    "borrowed": max(0.0, u - quota),
                    "potentialAvailable": tree.potential_available(key, fr),
                    "available": snap.available(key, fr),
                    "weight": config.weight(*fr),
                }
            )
        nodes[key] = {
            "parent": node.parent,
            "fairSharingWeight": node.weight,
            "weightedShare": weighted.share,
            "weightedShareRounded": weighted.rounded,  # what Kueue writes to status.fairSharing.weightedShare
            "unweightedShare": plain.share,
            "borrowedResources": [{"flavor": f, "resource": r} for f, r in sorted(weighted.borrowed_frs)],
            "dominantResource": weighted.dominant_resource,
            "unweightedDominantResource": plain.dominant_resource,
            "borrowing": weighted.borrowing,
            "resources": resources,
        }
    return {
        "enabled": True,
        "preemptionStrategies": list(config.preemption_strategies),
        "priorityBasedFairShare": config.priority_based_fair_share,
        "inactive": dict(config.inactive),
        "deviceClassMappings": dict(config.device_classes),
        # Defaults in effect where a field is omitted (KAI's differ from its CRD's zeros on purpose).
        "defaults": {
            "fairSharingWeight": 1.0,
            "resourceWeight": 1.0,
            "kai": {"limit": -1, "overQuotaWeight": 1.0, "priority": 100},
        },
        "nodes": nodes,
    }
