"""Fair-sharing preemption choices. Expected outcomes are the Kueue integration example in the
reference (section 5.2: cohort 9 cpu, cq-p1 running 4x2, incoming 5 -> 2 victims, 6 -> none, 4 -> 2),
with the shares worked by hand in the comments."""

from __future__ import annotations

import pytest

from fairshare.preemption import (
    IN_CLUSTER_QUEUE,
    IN_COHORT_FAIR_SHARING,
    IN_COHORT_RECLAMATION,
    LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,
    Candidate,
    fair_preemption,
)
from fairshare.quota import ClusterQueue, Cohort, FlavorQuotas, ResourceGroup, ResourceQuota, build_tree

FR = ("default", "cpu")


def group(nominal: float) -> tuple[ResourceGroup, ...]:
    return (ResourceGroup(("cpu",), (FlavorQuotas("default", {"cpu": ResourceQuota(nominal)}),)),)


def setup(p1_nominal: float = 0, p2_nominal: float = 0, shared: float = 9, within: str = "Never"):  # type: ignore[no-untyped-def]
    tree = build_tree(
        [
            ClusterQueue("cq-p1", cohort="c", resource_groups=group(p1_nominal), reclaim_within_cohort="Any"),
            ClusterQueue(
                "cq-p2",
                cohort="c",
                resource_groups=group(p2_nominal),
                reclaim_within_cohort="Any",
                within_cluster_queue=within,
            ),
        ],
        [Cohort("c", resource_groups=group(shared))],
    )
    running = [Candidate(f"w{i}", "cq-p1", 0, float(i), {FR: 2.0}) for i in range(4)]
    return tree.tree_usage({"cq-p1": {FR: 8.0}}), running


@pytest.mark.parametrize(
    ("incoming", "victims"),
    [
        # 5: p2 share 5/9 = 555.6; p1 after one removal 6/9 = 666.7 -> S2-a; after a second 4/9 = 444.4 fails S2-a,
        # S2-b 555.6 < 666.7 passes -> 2 victims (the newest first: w3, w2).
        (5, ["w3", "w2"]),
        # 6: 666.7 <= 666.7 passes once, then 444.4 fails and S2-b 666.7 < 666.7 fails -> nothing.
        (6, []),
        # 4: 444.4 <= 666.7, then 444.4 <= 444.4 -> 2 victims, both by S2-a.
        (4, ["w3", "w2"]),
    ],
)
def test_reference_worked_example(incoming: float, victims: list[str]) -> None:
    snap, running = setup()
    got = fair_preemption(snap, "cq-p2", {FR: incoming}, running, priority=0)
    assert [v.candidate.uid for v in got] == victims
    assert all(v.reason == IN_COHORT_FAIR_SHARING for v in got)


def test_only_final_share_strategy_stops_at_first_pass() -> None:
    # Incoming 5 needs S2-b for the second victim; without it nothing is preempted.
    snap, running = setup()
    got = fair_preemption(
        snap, "cq-p2", {FR: 5.0}, running, priority=0, strategies=(LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,)
    )
    assert got == []


def test_within_nominal_reclaim_skips_share_rules() -> None:
    # p2 nominal 6 (cohort 3 + p1 0): p1 borrows 8 of the 9. Incoming 6 keeps p2 within nominal, so victims are
    # taken unconditionally until 6 fits: available = 9 - 8 = 1 -> 3 victims free 6 -> 7 available.
    snap, running = setup(p2_nominal=6, shared=3)
    got = fair_preemption(snap, "cq-p2", {FR: 6.0}, running, priority=0)
    assert [v.candidate.uid for v in got] == ["w3", "w2", "w1"]
    assert {v.reason for v in got} == {IN_COHORT_RECLAMATION}


def test_lower_priority_policy_and_own_queue() -> None:
    tree = build_tree(
        [ClusterQueue("solo", resource_groups=group(4), within_cluster_queue="LowerPriority")],
        [],
    )
    snap = tree.tree_usage({"solo": {FR: 4.0}})
    running = [
        Candidate("high", "solo", 10, 1.0, {FR: 2.0}),
        Candidate("low-old", "solo", 1, 1.0, {FR: 2.0}),
        Candidate("low-new", "solo", 1, 2.0, {FR: 1.0}),
    ]
    # Need 2: lower priority first, newest first among equals: low-new (frees 1) then low-old (frees 2) -> 3 free,
    # fits. Fill-back skips the last taken and restores low-new (2 free still fits) -> only low-old stays.
    got = fair_preemption(snap, "solo", {FR: 2.0}, running, priority=5)
    assert [(v.candidate.uid, v.reason) for v in got] == [("low-old", IN_CLUSTER_QUEUE)]
    # Equal-or-higher priority workloads are never candidates: need 4 -> no valid set.
    assert fair_preemption(snap, "solo", {FR: 4.0}, running, priority=5) == []


def test_non_borrowing_queue_is_not_a_target() -> None:
    # p1 nominal 8 uses 8 (not borrowing): it is never a fair-sharing target.
    snap, running = setup(p1_nominal=8, shared=1)
    assert fair_preemption(snap, "cq-p2", {FR: 3.0}, running, priority=0) == []
