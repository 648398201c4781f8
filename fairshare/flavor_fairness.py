"""FlavorFairness score: prefer the queue's earlier flavors, non-borrowing placements, and among
borrowing ones the lowest weighted DRS after admission (Kueue flavor fungibility + KEP-8902)."""

from __future__ import annotations

import math
from collections.abc import Mapping

from fairshare.drs import ResourceWeights, dominant_resource_share
from fairshare.quota import FlavorResource, TreeUsage, cq_key

__all__ = ["MAX_NODE_SCORE", "NAME", "flavor_fairness_score"]

NAME = "FlavorFairness"
MAX_NODE_SCORE = 100


def flavor_fairness_score(
    snapshot: TreeUsage,
    cluster_queue: str,
    request: Mapping[FlavorResource, float],
    flavor_index: int,
    flavor_count: int,
    weights: ResourceWeights,
) -> int:
    """0..MAX_NODE_SCORE. Non-borrowing: 50..100 by flavor order. Borrowing: 0..49, lower DRS higher."""
    key = cq_key(cluster_queue)
    quota = snapshot.tree.nodes[key].subtree_quota
    used = snapshot.usage[key]
    borrowing = any(used.get(fr, 0.0) + v > quota.get(fr, 0.0) for fr, v in request.items() if v > 0)
    if not borrowing:
        step = 50 // max(1, flavor_count)
        return MAX_NODE_SCORE - step * min(flavor_index, max(0, flavor_count - 1))
    share = dominant_resource_share(snapshot, key, weights, workload=request).share
    if math.isinf(share):
        return 0
    # share is per-mille of the lendable resources; 0 -> 49, >= 1000 -> 0.
    return max(0, 49 - int(min(share, 1000.0) * 49 // 1000))
