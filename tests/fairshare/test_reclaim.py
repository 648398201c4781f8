"""Reclaim victim choice (fairshare/reclaim.py): Kueue fair sharing cluster-wide or on one node, KAI's
reclaim rules, gangs, fill-back, ties. Expected victims are worked by hand in each docstring; the
properties hold for any borrower layout."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fairshare.kai import KaiQueue, QueueResource
from fairshare.preemption import IN_COHORT_FAIR_SHARING, IN_COHORT_RECLAMATION
from fairshare.quota import ClusterQueue, Cohort, FlavorQuotas, ResourceGroup, ResourceQuota, build_tree
from fairshare.reclaim import (
    MAINTAIN_FAIR_SHARE,
    KaiView,
    NodeRoom,
    RunningPod,
    Workload,
    Workloads,
    kai_reclaim,
    kueue_reclaim,
)

GPU = "nvidia.com/gpu"
FLAVORS = ("a100", "l4")


def groups(nominal: dict[str, float]) -> tuple[ResourceGroup, ...]:
    return (
        ResourceGroup(
            (GPU,), tuple(FlavorQuotas(f, {GPU: ResourceQuota(nominal.get(f, 0.0))}) for f in FLAVORS if f in nominal)
        ),
    )


def tree(queues: dict[str, dict[str, float]], weights: dict[str, float] | None = None) -> Any:
    return build_tree(
        [
            ClusterQueue(
                name,
                cohort="c",
                resource_groups=groups(nominal),
                reclaim_within_cohort="Any",
                weight=(weights or {}).get(name, 1.0),
            )
            for name, nominal in queues.items()
        ],
        [Cohort("c")],
    )


def workload(
    key: str, queue: str, gpus: int, node: str = "n1", *, at: float = 0.0, flavor: str = "a100", pods: int = 1
) -> Workload:
    per = gpus // pods
    return Workload(
        key,
        queue,
        0,
        at,
        {(flavor, GPU): float(gpus)},
        tuple(RunningPod(f"{key}-{i}" if pods > 1 else key, node, {GPU: per}) for i in range(pods)),
    )


def snapshot(t: Any, running: list[Workload]) -> Any:
    usage: dict[str, dict[Any, float]] = {}
    for w in running:
        for fr, v in w.usage.items():
            usage.setdefault(w.queue, {})[fr] = usage.setdefault(w.queue, {}).get(fr, 0.0) + v
    return t.tree_usage(usage)


def room(name: str, free: int, gpus: int, flavor: str = "a100") -> NodeRoom:
    return NodeRoom(name, {GPU: free}, {(flavor, GPU): float(gpus)})


def keys(choice: Any) -> list[str]:
    return [w.key for w, _ in choice.victims]


# ----------------------------------------------------------------------------------- Kueue
def test_within_nominal_takes_the_most_recently_admitted_borrower_pods_and_no_more() -> None:
    """lender 4 / borrower 4 nominal; the borrower runs 8 x 1 on n1 (full). The lender asks 2, within its
    nominal: InCohortReclamation, most recently admitted first (b7, b6), exactly 2."""
    t = tree({"lender": {"a100": 4}, "borrower": {"a100": 4}})
    running = [workload(f"b{i}", "borrower", 1, at=float(i)) for i in range(8)]
    choice = kueue_reclaim(snapshot(t, running), "lender", 0, {GPU: 2}, [room("n1", 0, 2)], Workloads(running))
    assert choice is not None and choice.node == "n1"
    assert keys(choice) == ["b7", "b6"]
    assert {r for _, r in choice.victims} == {IN_COHORT_RECLAMATION}


def test_quota_alone_blocks_victims_may_be_anywhere() -> None:
    """n2 has 2 free GPUs but the lender's quota is lent out: the borrower's most recent pod (b3, on n1)
    is taken, although the pod will run on n2."""
    t = tree({"lender": {"a100": 2}, "borrower": {"a100": 2}})
    running = [workload(f"b{i}", "borrower", 1, "n1", at=float(i)) for i in range(4)]
    rooms = [room("n1", 0, 1), room("n2", 2, 1)]
    choice = kueue_reclaim(snapshot(t, running), "lender", 0, {GPU: 1}, rooms, Workloads(running))
    assert choice is not None and keys(choice) == ["b3"] and choice.node == ""


def test_nothing_to_reclaim_when_the_pod_fits_or_nobody_borrows() -> None:
    t = tree({"lender": {"a100": 4}, "borrower": {"a100": 4}})
    running = [workload(f"b{i}", "borrower", 1, at=float(i)) for i in range(4)]  # within its own 4
    snap = snapshot(t, running)
    assert kueue_reclaim(snap, "lender", 0, {GPU: 2}, [room("n1", 4, 2)], Workloads(running)) is None  # fits
    assert kueue_reclaim(snap, "lender", 0, {GPU: 2}, [room("n1", 0, 2)], Workloads(running)) is None  # no borrower


def test_fair_sharing_strategies_with_flavor_weights() -> None:
    """Nominal 0 but for "owner" (12 a100 + 12 l4, running 7 a100: the cohort's a100 is all used). x borrows
    4 a100; y borrows 1 a100 + 6 l4. With a100 weighted 3 the lendable GPU is 12*3 + 12 = 48: x's share
    is 12/48 = 250, y's 9/48 = 187.5, so x is the target; p (1 a100: 3/48 = 62.5 after admission) passes
    LessThanOrEqualToFinalShare against x after removal (9/48 = 187.5): x's most recent pod x3 goes.
    Unweighted (lendable 24): x 4/24 = 166.7, y 7/24 = 291.7, so y is the target and its a100 pod goes."""
    t = tree(
        {
            "owner": {"a100": 12, "l4": 12},
            "x": {"a100": 0, "l4": 0},
            "y": {"a100": 0, "l4": 0},
            "p": {"a100": 0, "l4": 0},
        }
    )
    owner = [workload("o", "owner", 7, "n0")]
    x = [workload(f"x{i}", "x", 1, at=float(i)) for i in range(4)]
    y = [workload("y-a", "y", 1, at=10.0)] + [workload(f"y-l{i}", "y", 1, at=11.0 + i, flavor="l4") for i in range(6)]
    running = owner + x + y
    snap = snapshot(t, running)

    def weights(flavor: str, _resource: str) -> float:
        return 3.0 if flavor == "a100" else 1.0

    rooms = [room("n1", 0, 1, "a100")]
    choice = kueue_reclaim(snap, "p", 0, {GPU: 1}, rooms, Workloads(running), weights=weights)
    assert choice is not None and keys(choice) == ["x3"]
    assert choice.victims[0][1] == IN_COHORT_FAIR_SHARING
    plain = kueue_reclaim(snap, "p", 0, {GPU: 1}, rooms, Workloads(running))
    assert plain is not None and keys(plain) == ["y-a"]


def test_ties_go_by_uid() -> None:
    t = tree({"lender": {"a100": 4}, "borrower": {"a100": 4}})
    running = [workload(k, "borrower", 1, at=5.0) for k in ("d", "b", "c", "a", "h", "f", "e", "g")]
    choice = kueue_reclaim(snapshot(t, running), "lender", 0, {GPU: 2}, [room("n1", 0, 2)], Workloads(running))
    assert choice is not None and keys(choice) == ["a", "b"]


def test_a_gang_is_one_workload_evicted_whole() -> None:
    """g (2 pods x 1 GPU, the most recently admitted) is the first candidate: the lender's 1 GPU takes the
    whole gang; fill-back cannot split it."""
    t = tree({"lender": {"a100": 4}, "borrower": {"a100": 4}})
    running = [workload(f"b{i}", "borrower", 1, at=float(i)) for i in range(6)] + [
        workload("g", "borrower", 2, at=99.0, pods=2)
    ]
    choice = kueue_reclaim(snapshot(t, running), "lender", 0, {GPU: 1}, [room("n1", 0, 1)], Workloads(running))
    assert choice is not None and keys(choice) == ["g"] and [p.uid for p in choice.pods] == ["g-0", "g-1"]


def test_node_choice_fewest_victims() -> None:
    """n1 would need two 1-GPU victims, n2 one 2-GPU victim: n2."""
    t = tree({"lender": {"a100": 4}, "borrower": {"a100": 4}})
    running = [workload(f"s{i}", "borrower", 1, "n1", at=float(i)) for i in range(4)] + [
        workload(f"d{i}", "borrower", 2, "n2", at=float(i)) for i in range(2)
    ]
    rooms = [room("n1", 0, 2), room("n2", 0, 2)]
    choice = kueue_reclaim(snapshot(t, running), "lender", 0, {GPU: 2}, rooms, Workloads(running))
    assert choice is not None and choice.node == "n2" and len(choice.victims) == 1


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 3), min_size=1, max_size=10),
    times=st.lists(st.integers(0, 5), min_size=10, max_size=10),
    ask=st.integers(1, 4),
    shuffle=st.randoms(use_true_random=False),
)
def test_property_enough_minimal_from_borrowers_and_order_independent(
    sizes: list[int], times: list[int], ask: int, shuffle: Any
) -> None:
    """For any borrower layout on one full node: the victims free at least what the lender asks; no victim
    can be given back (fill-back); they all belong to the borrower; the same set whatever the input order."""
    total = sum(sizes)
    t = tree({"lender": {"a100": 4}, "borrower": {"a100": max(0, total - 4)}})
    running = [workload(f"w{i:02d}", "borrower", s, at=float(times[i])) for i, s in enumerate(sizes)]
    free = max(0, 4 - total) if total < 4 else 0
    rooms = [room("n1", free, ask)]
    choice = kueue_reclaim(snapshot(t, running), "lender", 0, {GPU: ask}, rooms, Workloads(running))
    shuffled = list(running)
    shuffle.shuffle(shuffled)
    again = kueue_reclaim(snapshot(t, shuffled), "lender", 0, {GPU: ask}, rooms, Workloads(shuffled))
    assert (None if choice is None else sorted(keys(choice))) == (None if again is None else sorted(keys(again)))
    if choice is None:
        # Nothing taken only when the lender's ask fits already or cannot be freed from the borrower's excess.
        return
    freed = sum(int(w.usage[("a100", GPU)]) for w, _ in choice.victims)
    assert all(w.queue == "borrower" for w, _ in choice.victims)
    assert free + freed >= ask
    for w, _ in choice.victims[:-1]:  # fill-back: none of the others could stay
        assert free + freed - int(w.usage[("a100", GPU)]) < ask or len(choice.victims) == 1


# ------------------------------------------------------------------------------------- KAI
def kai_queue(name: str, deserved: float, limit: float = -1) -> KaiQueue:
    return KaiQueue(name, resources={"gpu": QueueResource(deserved, limit)})


def test_kai_reclaims_from_a_queue_above_its_share_while_the_reclaimer_stays_within_its_own() -> None:
    """a (fair share 4, 0 allocated) asks 2; b holds 8 with fair share 4: b stays above its share through
    two victims (8 > 4, 7 > 4), its two most recent pods go (MaintainFairShare)."""
    running = [workload(f"b{i}", "b", 1, at=float(i), flavor="") for i in range(8)]
    running = [Workload(w.key, w.queue, 0, w.admitted_at, {"gpu": 1.0}, w.pods) for w in running]
    view = KaiView(
        {"b": {"gpu": 8.0}}, {"a": {"gpu": 4.0}, "b": {"gpu": 4.0}}, {"a": kai_queue("a", 4), "b": kai_queue("b", 4)}
    )
    rooms = [NodeRoom("n1", {GPU: 0})]
    choice = kai_reclaim(view, "a", {"gpu": 2.0}, {GPU: 2}, rooms, Workloads(running))
    assert choice is not None and keys(choice) == ["b7", "b6"]
    assert {r for _, r in choice.victims} == {MAINTAIN_FAIR_SHARE}


def test_kai_no_reclaim_above_the_reclaimers_share_or_from_a_queue_at_its_share() -> None:
    running = [
        Workload(f"b{i}", "b", 0, float(i), {"gpu": 1.0}, (RunningPod(f"b{i}", "n1", {GPU: 1}),)) for i in range(4)
    ]
    queues = {"a": kai_queue("a", 4), "b": kai_queue("b", 4)}
    rooms = [NodeRoom("n1", {GPU: 0})]
    over = KaiView({"a": {"gpu": 3.0}, "b": {"gpu": 4.0}}, {"a": {"gpu": 4.0}, "b": {"gpu": 4.0}}, queues)
    assert kai_reclaim(over, "a", {"gpu": 2.0}, {GPU: 2}, rooms, Workloads(running)) is None  # 3 + 2 > 4
    at_share = KaiView({"b": {"gpu": 4.0}}, {"a": {"gpu": 4.0}, "b": {"gpu": 4.0}}, queues)
    assert kai_reclaim(at_share, "a", {"gpu": 1.0}, {GPU: 1}, rooms, Workloads(running)) is None  # b not above


def _index_view(workloads: Workloads, nodes: list[str]) -> tuple[Any, ...]:
    keys = {w.key for w in workloads.all}
    return (
        {w.key: w for w in workloads.all},
        {n: sorted(w.key for w in workloads.on_node(n)) for n in nodes},
        {(k, n): workloads.freed_on.get((k, n)) for k in keys for n in nodes},
    )


@settings(max_examples=100, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(("w1", "w2", "w3", "w4")),
            st.one_of(st.none(), st.lists(st.sampled_from(("n1", "n2", "n3")), min_size=1, max_size=3)),
            st.integers(1, 4),
        ),
        max_size=20,
    ),
    left_out=st.sets(st.sampled_from(("w1", "w2", "w3", "w4"))),
)
def test_workloads_kept_with_add_and_discard_equal_workloads_built_at_once(
    steps: list[tuple[str, list[str] | None, int]], left_out: set[str]
) -> None:
    """``add`` (replacing a key) and ``discard`` in any order leave the same index as building the final
    set at once, and ``without`` the same as building it without those keys; a view does not change
    the index it shares."""
    kept = Workloads()
    final: dict[str, Workload] = {}
    for key, nodes, gpus in steps:
        if nodes is None:
            kept.discard(key)
            final.pop(key, None)
        else:
            pods = tuple(RunningPod(f"{key}-{i}", n, {GPU: gpus}) for i, n in enumerate(nodes))
            final[key] = Workload(key, "q", 0, 0.0, {("a100", GPU): gpus * len(nodes)}, pods)
            kept.add(final[key])
    nodes = ["n1", "n2", "n3"]
    assert _index_view(kept, nodes) == _index_view(Workloads(final.values()), nodes)
    view = kept.without(left_out)
    expected = Workloads(w for k, w in final.items() if k not in left_out)
    assert {w.key for w in view.all} == {w.key for w in expected.all}
    assert all(sorted(w.key for w in view.on_node(n)) == sorted(w.key for w in expected.on_node(n)) for n in nodes)
    assert _index_view(kept, nodes) == _index_view(Workloads(final.values()), nodes)
