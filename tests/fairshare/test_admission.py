"""Filter verdicts and FlavorFairness scores on the Story 1 example (examples/fairshare.yaml).
Tree worked by hand: team-b lends 12 of 16 a10, so the cohort holds a10 12 and h100 8; team-a has
h100 nominal 4, a10 nominal 0 with borrowingLimit 16 -> potentialAvailable a10 = min(12, 0 + 16) = 12."""

from __future__ import annotations

from pathlib import Path

import yaml

from fairshare.admission import Verdict, check_quota
from fairshare.flavor import parse_resource_flavor
from fairshare.flavor_fairness import flavor_fairness_score
from fairshare.quota import QuotaTree, build_tree, parse_cluster_queue, parse_cohort

GPU = "nvidia.com/gpu"
A10, H100 = ("a10-spot", GPU), ("h100-reserved", GPU)
RAW = yaml.safe_load((Path(__file__).resolve().parents[2] / "examples" / "fairshare.yaml").read_text())
FLAVORS = {f.name: f for f in (parse_resource_flavor(r, "f") for r in RAW["resourceFlavors"])}


def weights(flavor: str, resource: str) -> float:
    return FLAVORS[flavor].weight(resource)


def tree() -> QuotaTree:
    return build_tree(
        [parse_cluster_queue(r, "cq") for r in RAW["clusterQueues"]], [parse_cohort(r, "c") for r in RAW["cohorts"]]
    )


def test_verdicts() -> None:
    idle = tree().tree_usage({})
    assert check_quota(idle, "team-a", {H100: 4}).verdict is Verdict.FITS
    assert not check_quota(idle, "team-a", {H100: 4}).borrowing
    over = check_quota(idle, "team-a", {H100: 9})  # 9 > potentialAvailable 8
    assert over.verdict is Verdict.UNRESOLVABLE and over.reason.startswith("ExceedsMaxQuota")
    spot = check_quota(idle, "team-a", {A10: 4})
    assert spot.verdict is Verdict.FITS and spot.borrowing
    assert check_quota(idle, "team-a", {A10: 13}).verdict is Verdict.UNRESOLVABLE  # > 12
    # team-b borrows all of team-a's h100: team-a's nominal 4 is reclaimable by preemption.
    busy = tree().tree_usage({"team-b": {H100: 8.0}})
    assert check_quota(busy, "team-a", {H100: 4}).verdict is Verdict.RESOLVABLE


def test_flavor_fairness_prefers_nominal_then_cheap_borrowing() -> None:
    t = tree()
    idle = t.tree_usage({})
    # Non-borrowing: 100 for the first flavor, 75 for the second (two flavors, 25 per step).
    assert flavor_fairness_score(idle, "team-a", {H100: 4}, 0, 2, weights) == 100
    assert flavor_fairness_score(idle, "team-b", {A10: 4}, 1, 2, weights) == 75
    # team-a already uses its 4 h100. Borrowing 4 a10: DRS 4/76*1000 = 52.6 -> 49 - 2 = 47.
    # Borrowing 1 h100 instead: 8/76*1000 = 105.3 -> 49 - 5 = 44. Cheap spot wins.
    full = t.tree_usage({"team-a": {H100: 4.0}})
    assert flavor_fairness_score(full, "team-a", {A10: 4}, 1, 2, weights) == 47
    assert flavor_fairness_score(full, "team-a", {H100: 1}, 0, 2, weights) == 44
