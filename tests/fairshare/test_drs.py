"""DRS tests. Every expected value is worked out by hand from the KEP-8902 seed tables and the
Kueue examples in the fair-sharing reference (section 3), not taken from the code."""

from __future__ import annotations

import math

import pytest

from fairshare.drs import compare_drs, dominant_resource_share, unweighted
from fairshare.flavor import ResourceFlavor
from fairshare.quota import ClusterQueue, Cohort, FlavorQuotas, ResourceGroup, ResourceQuota, build_tree

GPU = "nvidia.com/gpu"


def rg(resources: tuple[str, ...], *flavors: tuple[str, dict[str, ResourceQuota]]) -> ResourceGroup:
    return ResourceGroup(resources, tuple(FlavorQuotas(n, r) for n, r in flavors))


def q(nominal: float, borrowing: float | None = None, lending: float | None = None) -> ResourceQuota:
    return ResourceQuota(nominal, borrowing, lending)


def weights_of(*flavors: ResourceFlavor):  # type: ignore[no-untyped-def]
    by_name = {f.name: f for f in flavors}
    return lambda flavor, resource: by_name[flavor].weight(resource) if flavor in by_name else 1.0


def seed_tree(cpu_flavors: dict[str, float], gpu_lendable: dict[str, float]):  # type: ignore[no-untyped-def]
    """Team-A with nominal 0 under a cohort owning all quota: lendable(f, r) = the cohort's quota."""
    cohort = Cohort(
        "org",
        resource_groups=(
            rg(("cpu",), *((f, {"cpu": q(v)}) for f, v in cpu_flavors.items())),
            rg((GPU,), *((f, {GPU: q(v)}) for f, v in gpu_lendable.items())),
        ),
    )
    team = ClusterQueue(
        "team-a",
        cohort="org",
        resource_groups=(
            rg(("cpu",), *((f, {"cpu": q(0)}) for f in cpu_flavors)),
            rg((GPU,), *((f, {GPU: q(0)}) for f in gpu_lendable)),
        ),
    )
    return build_tree([team], [cohort])


H100 = ResourceFlavor("h100-reserved", resource_weights={GPU: 8.0})
A10 = ResourceFlavor("a10-spot", resource_weights={GPU: 1.0})


@pytest.mark.parametrize(
    ("h100", "a10", "weighted_gpu", "unweighted_gpu", "dom_w", "dom_u"),
    [
        # Example A: gpu weighted (100*8+0)/(100*8+1000) = 0.444.., unweighted 100/1100 = 0.0909..
        (100, 0, 800 / 1800, 100 / 1100, GPU, "cpu"),
        # Example A2: weighted (10*8+400)/1800 = 0.2667, unweighted 410/1100 = 0.3727
        (10, 400, 480 / 1800, 410 / 1100, "cpu", GPU),
    ],
)
def test_seed_examples_a_and_a2(
    h100: float, a10: float, weighted_gpu: float, unweighted_gpu: float, dom_w: str, dom_u: str
) -> None:
    tree = seed_tree({"standard-cpu": 1000}, {"h100-reserved": 100, "a10-spot": 1000})
    usage = {"team-a": {("standard-cpu", "cpu"): 300.0, ("h100-reserved", GPU): h100, ("a10-spot", GPU): a10}}
    snap = tree.tree_usage(usage)
    w = dominant_resource_share(snap, "cq/team-a", weights_of(H100, A10))
    u = dominant_resource_share(snap, "cq/team-a")
    # cpu ratio is 300/1000 either way.
    assert w.dominant_resource == dom_w
    assert w.share == pytest.approx(max(300.0, weighted_gpu * 1000), rel=1e-9)
    assert u.dominant_resource == dom_u
    assert u.share == pytest.approx(max(300.0, unweighted_gpu * 1000), rel=1e-9)


def test_seed_example_b_cpu_weights_make_cpu_dominant() -> None:
    # cpu weighted (250*3 + 50*1)/(300*3 + 700*1) = 800/1600 = 0.5 > gpu 0.444; unweighted cpu 300/1000.
    tree = seed_tree({"cpu-premium": 300, "cpu-standard": 700}, {"h100-reserved": 100, "a10-spot": 1000})
    usage = {
        "team-a": {
            ("cpu-premium", "cpu"): 250.0,
            ("cpu-standard", "cpu"): 50.0,
            ("h100-reserved", GPU): 100.0,
        }
    }
    snap = tree.tree_usage(usage)
    premium = ResourceFlavor("cpu-premium", resource_weights={"cpu": 3.0})
    w = dominant_resource_share(snap, "cq/team-a", weights_of(H100, A10, premium))
    assert (w.dominant_resource, w.share) == ("cpu", pytest.approx(500.0))
    u = dominant_resource_share(snap, "cq/team-a")
    assert (u.dominant_resource, u.share) == ("cpu", pytest.approx(300.0))


def test_equal_weights_cancel() -> None:
    # Both GPU flavors weight 8: the gpu ratio stays 100/1100 (seed, after Example A).
    tree = seed_tree({"standard-cpu": 1000}, {"h100-reserved": 100, "a10-spot": 1000})
    snap = tree.tree_usage({"team-a": {("h100-reserved", GPU): 100.0}})
    both8 = weights_of(H100, ResourceFlavor("a10-spot", resource_weights={GPU: 8.0}))
    assert dominant_resource_share(snap, "cq/team-a", both8).share == pytest.approx(1000 * 100 / 1100)


def flat(nominals: dict[str, float], shared: float = 0, weights: dict[str, float] | None = None):  # type: ignore[no-untyped-def]
    weights = weights or {}
    cqs = [
        ClusterQueue(
            n, cohort="c", resource_groups=(rg(("cpu",), ("default", {"cpu": q(v)})),), weight=weights.get(n, 1.0)
        )
        for n, v in nominals.items()
    ]
    cohorts = [Cohort("c", resource_groups=(rg(("cpu",), ("default", {"cpu": q(shared)})),))] if shared else []
    return build_tree(cqs, cohorts)


def test_backward_compat_kueue_numbers() -> None:
    # Reference section 3: a 3, b 1, cohort 4 (lendable 8), a uses 8 -> 5/8 = 625.
    tree = flat({"a": 3, "b": 1}, shared=4)
    snap = tree.tree_usage({"a": {("default", "cpu"): 8.0}})
    d = dominant_resource_share(snap, "cq/a")
    assert (d.share, d.dominant_resource, d.rounded) == (625.0, "cpu", 625)
    # With weights configured on an unrelated flavor the result is identical.
    assert dominant_resource_share(snap, "cq/a", weights_of(H100)).share == 625.0
    # a, b, c with 3 each; a uses 4 -> 1/9*1000 = 111.1, status ceil 112.
    snap = flat({"a": 3, "b": 3, "c": 3}).tree_usage({"a": {("default", "cpu"): 4.0}})
    d = dominant_resource_share(snap, "cq/a")
    assert d.share == pytest.approx(1000 / 9) and d.rounded == 112
    # best-effort weight 0.5 uses 4 of root 12 -> 4/12*1000/0.5 = 666.7
    snap = flat({"be": 0}, shared=12, weights={"be": 0.5}).tree_usage({"be": {("default", "cpu"): 4.0}})
    assert dominant_resource_share(snap, "cq/be").share == pytest.approx(4000 / 12 / 0.5)


def test_no_cohort_and_zero_weight() -> None:
    alone = build_tree([ClusterQueue("x", resource_groups=(rg(("cpu",), ("default", {"cpu": q(1)})),))], [])
    assert dominant_resource_share(alone.tree_usage({"x": {("default", "cpu"): 5.0}}), "cq/x").share == 0
    tree = flat({"a": 1, "z": 1}, weights={"z": 0})
    snap = tree.tree_usage({"z": {("default", "cpu"): 2.0}, "a": {("default", "cpu"): 2.0}})
    z = dominant_resource_share(snap, "cq/z")
    a = dominant_resource_share(snap, "cq/a")
    assert math.isinf(z.share) and z.rounded == 9223372036854775807
    assert compare_drs(z, a) == 1 and compare_drs(a, z) == -1
    assert dominant_resource_share(tree.tree_usage({}), "cq/z").share == 0  # weight 0 but not borrowing


def test_nested_cohorts_and_borrowing_limit() -> None:
    # root(45) -> child(w2) -> cq(5), cq uses 10: cq 5/50 = 100; child 5/50/2 = 50.
    tree = build_tree(
        [ClusterQueue("cq", cohort="child", resource_groups=(rg(("cpu",), ("default", {"cpu": q(5)})),))],
        [
            Cohort("child", parent="root", weight=2),
            Cohort("root", resource_groups=(rg(("cpu",), ("default", {"cpu": q(45)})),)),
        ],
    )
    snap = tree.tree_usage({"cq": {("default", "cpu"): 10.0}})
    assert dominant_resource_share(snap, "cq/cq").share == pytest.approx(100)
    assert dominant_resource_share(snap, "cohort/child").share == pytest.approx(50)
    # child with borrowingLimit 10 under root 50, cq nominal 0 uses 10: cq 10/min(0+10, 50) = 1000, child 10/50 = 200.
    tree = build_tree(
        [ClusterQueue("cq", cohort="child", resource_groups=(rg(("cpu",), ("default", {"cpu": q(0)})),))],
        [
            Cohort("child", parent="root", resource_groups=(rg(("cpu",), ("default", {"cpu": q(0, borrowing=10)})),)),
            Cohort("root", resource_groups=(rg(("cpu",), ("default", {"cpu": q(50)})),)),
        ],
    )
    snap = tree.tree_usage({"cq": {("default", "cpu"): 10.0}})
    assert dominant_resource_share(snap, "cq/cq").share == pytest.approx(1000)
    assert dominant_resource_share(snap, "cohort/child").share == pytest.approx(200)
    assert snap.available("cq/cq", ("default", "cpu")) == 0  # borrowing limit reached


def test_lending_limit_keeps_local_quota() -> None:
    # a: nominal 10, lendingLimit 4 -> localQuota 6, only 4 reach the cohort; b nominal 2.
    # Cohort SubtreeQuota = 4 + 2 = 6. b uses 5: borrowed 3, lendable = potential(cohort) = 6 -> 500.
    tree = build_tree(
        [
            ClusterQueue("a", cohort="c", resource_groups=(rg(("cpu",), ("default", {"cpu": q(10, lending=4)})),)),
            ClusterQueue("b", cohort="c", resource_groups=(rg(("cpu",), ("default", {"cpu": q(2)})),)),
        ],
        [],
    )
    fr = ("default", "cpu")
    assert tree.nodes["cohort/c"].subtree_quota[fr] == 6
    assert tree.potential_available("cq/a", fr) == 12  # local 6 + cohort 6
    snap = tree.tree_usage({"b": {fr: 5.0}, "a": {fr: 7.0}})
    # a spills 1 past its local 6 into the cohort; cohort usage = 1 + 5 = 6.
    assert snap.usage["cohort/c"][fr] == 6
    assert dominant_resource_share(snap, "cq/b").share == pytest.approx(500)
    assert snap.available("cq/b", fr) == 0
    assert snap.available("cq/a", fr) == 0  # a's local quota is used up (7 > 6) and the cohort is full
    # with_delta bubbles like a recompute
    moved = snap.with_delta("a", {fr: 2.0}, -1)
    assert moved.usage == tree.tree_usage({"b": {fr: 5.0}, "a": {fr: 5.0}}).usage


def test_only_gpus_weighted_multi_flavor() -> None:
    # Two teams, cpu on one flavor (unweighted), gpu on h100 (w8) and a10 (w1).
    # team-a nominal: cpu 10, h100 4, a10 0; team-b: cpu 10, h100 4, a10 8. Root lendable: cpu 20, h100 8, a10 8.
    # team-a uses cpu 12 (borrows 2 -> 2/20 = 100), a10 4 (borrows 4): gpu weighted 4*1/(8*8+8*1) = 4/72 -> 55.6,
    # unweighted 4/16 = 250 -> dominant switches from gpu (unweighted) to cpu (weighted).
    def cq(name: str, a10: float) -> ClusterQueue:
        return ClusterQueue(
            name,
            cohort="org",
            resource_groups=(
                rg(("cpu",), ("std", {"cpu": q(10)})),
                rg((GPU,), ("h100-reserved", {GPU: q(4)}), ("a10-spot", {GPU: q(a10)})),
            ),
        )

    tree = build_tree([cq("team-a", 0), cq("team-b", 8)], [])
    snap = tree.tree_usage({"team-a": {("std", "cpu"): 12.0, ("a10-spot", GPU): 4.0}})
    w = dominant_resource_share(snap, "cq/team-a", weights_of(H100, A10))
    u = dominant_resource_share(snap, "cq/team-a", unweighted)
    assert (w.dominant_resource, w.share) == ("cpu", pytest.approx(100))
    assert (u.dominant_resource, u.share) == (GPU, pytest.approx(250))
    # Reclaiming h100 within nominal quota adds nothing borrowed: the share is unchanged.
    after = dominant_resource_share(snap, "cq/team-a", weights_of(H100, A10), workload={("h100-reserved", GPU): 4.0})
    assert after.share == pytest.approx(100)


def test_alphabetical_tie_break() -> None:
    # Both resources borrow 1 of 10 -> equal ratios 100; "a-res" < "b-res".
    tree = build_tree(
        [
            ClusterQueue(
                "x", cohort="c", resource_groups=(rg(("b-res", "a-res"), ("f", {"a-res": q(5), "b-res": q(5)})),)
            ),
            ClusterQueue(
                "y", cohort="c", resource_groups=(rg(("b-res", "a-res"), ("f", {"a-res": q(5), "b-res": q(5)})),)
            ),
        ],
        [],
    )
    snap = tree.tree_usage({"x": {("f", "a-res"): 6.0, ("f", "b-res"): 6.0}})
    assert dominant_resource_share(snap, "cq/x").dominant_resource == "a-res"
