"""Dominant resource share (Kueue fair sharing), with KEP-8902 flavor weights.

Per resource r: borrowed(r) = Σ_f max(0, usage + wl - SubtreeQuota) · w(f, r) and
lendable(r) = Σ_f potentialAvailable(parent, f, r) · w(f, r), over every (f, r) of the root.
ratio = borrowed · 1000 / lendable (per-mille float, Kueue ≥ v0.14), only where lendable > 0;
dominant = max ratio, alphabetically smaller name on ties; share = ratio / fairSharing.weight,
+Inf for weight 0 while borrowing. With no weights configured every w is 1.0 and the numbers are
Kueue's exactly. Weights compose with the queue weight without interacting.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from fairshare.quota import FlavorResource, TreeUsage, Usage

__all__ = ["DominantResourceShare", "ResourceWeights", "compare_drs", "dominant_resource_share", "unweighted"]

ResourceWeights = Callable[[str, str], float]
"""w(flavor, resource)."""


def unweighted(_flavor: str, _resource: str) -> float:
    return 1.0


@dataclass(frozen=True, slots=True)
class DominantResourceShare:
    share: float  # per-mille, divided by the node's weight; +Inf for weight 0 while borrowing
    ratio: float  # per-mille before the node's weight
    dominant_resource: str
    borrowing: bool
    borrowed_frs: frozenset[FlavorResource]
    zero_weight: bool

    @property
    def rounded(self) -> int:
        """What Kueue writes to status.fairSharing.weightedShare."""
        return 9223372036854775807 if math.isinf(self.share) else math.ceil(self.share)


_ZERO = DominantResourceShare(0.0, 0.0, "", False, frozenset(), False)


def dominant_resource_share(
    snapshot: TreeUsage, key: str, weights: ResourceWeights = unweighted, workload: Usage | None = None
) -> DominantResourceShare:
    """DRS of tree node ``key`` (``cq/<name>`` or ``cohort/<name>``), optionally with ``workload`` added."""
    tree = snapshot.tree
    node = tree.nodes[key]
    if node.parent is None:
        return _ZERO
    usage = snapshot.usage[key]
    wl = workload or {}
    borrowed: dict[str, float] = {}
    frs: set[FlavorResource] = set()
    for fr, quota in node.subtree_quota.items():
        b = wl.get(fr, 0.0) + usage.get(fr, 0.0) - quota
        if b > 0:
            frs.add(fr)
            borrowed[fr[1]] = borrowed.get(fr[1], 0.0) + b * weights(*fr)
    if not frs:
        return _ZERO
    parent_potential = tree.potential[node.parent]
    lendable: dict[str, float] = {}
    for fr, pot in parent_potential.items():
        if fr[1] in borrowed:
            lendable[fr[1]] = lendable.get(fr[1], 0.0) + pot * weights(*fr)
    ratio, dominant = 0.0, ""
    for resource in sorted(borrowed):
        if lendable.get(resource, 0.0) > 0:
            r = borrowed[resource] * 1000.0 / lendable[resource]
            if r > ratio:
                ratio, dominant = r, resource
    if ratio == 0:
        share = 0.0
    elif node.weight == 0:
        share = math.inf
    else:
        share = ratio / node.weight
    return DominantResourceShare(share, ratio, dominant, True, frozenset(frs), node.weight == 0 and ratio > 0)


def compare_drs(a: DominantResourceShare, b: DominantResourceShare) -> int:
    """Kueue's CompareDRS: -1, 0, 1. Two zero-weight borrowers compare by unweighted ratio."""
    if a.zero_weight and b.zero_weight:
        x, y = a.ratio, b.ratio
    elif a.zero_weight != b.zero_weight:
        return 1 if a.zero_weight else -1
    else:
        x, y = a.share, b.share
    return (x > y) - (x < y)
