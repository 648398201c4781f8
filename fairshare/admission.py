"""Quota verdict for placing one pod of a ClusterQueue on a node of a given flavor (filter).

Per (flavor, resource): request > potentialAvailable can never fit -> unresolvable
(``ExceedsMaxQuota``, preemption cannot help); request <= available fits (borrowing when usage +
request > nominal); otherwise preemption may free quota -> resolvable.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from fairshare.quota import FlavorResource, TreeUsage, cq_key

__all__ = ["QuotaVerdict", "Verdict", "check_quota"]


class Verdict(enum.Enum):
    FITS = "Fits"
    RESOLVABLE = "Resolvable"
    UNRESOLVABLE = "Unresolvable"


@dataclass(frozen=True, slots=True)
class QuotaVerdict:
    verdict: Verdict
    borrowing: bool = False
    reason: str = ""


def check_quota(snapshot: TreeUsage, cluster_queue: str, request: Mapping[FlavorResource, float]) -> QuotaVerdict:
    tree = snapshot.tree
    key = cq_key(cluster_queue)
    node = tree.nodes[key]
    used = snapshot.usage[key]
    borrowing = False
    resolvable: str | None = None
    for fr, amount in sorted(request.items()):
        if amount <= 0:
            continue
        flavor, resource = fr
        if amount > tree.potential_available(key, fr):
            return QuotaVerdict(
                Verdict.UNRESOLVABLE,
                reason=f"ExceedsMaxQuota: {resource} {amount:g} in flavor {flavor} exceeds what "
                f"{cluster_queue} could ever use ({tree.potential_available(key, fr):g})",
            )
        if amount > snapshot.available(key, fr):
            resolvable = resolvable or (
                f"insufficient quota for {resource} in flavor {flavor}: {amount:g} requested, "
                f"{snapshot.available(key, fr):g} available to {cluster_queue}"
            )
        elif used.get(fr, 0.0) + amount > node.subtree_quota.get(fr, 0.0):
            borrowing = True
    if resolvable is not None:
        return QuotaVerdict(Verdict.RESOLVABLE, borrowing, resolvable)
    return QuotaVerdict(Verdict.FITS, borrowing)
