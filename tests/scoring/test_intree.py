"""kube-scheduler's in-tree NodeResourcesFit and NodeResourcesBalancedAllocation scores.

Exact scores derived by hand from upstream's formulas (scoring/intree.py, scoring/balanced.py), the
args' defaulting and validation, Go's integer and rounding arithmetic, and hypothesis checks that
the vectorised batch path equals the scalar definition node by node.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scoring.balanced import (
    NodeResourcesBalancedAllocation,
    NodeResourcesBalancedAllocationArgs,
    balance,
)
from scoring.framework import ArgsError, NodeInfo, PodInfo
from scoring.intree import (
    DEFAULT_RESOURCES,
    NodeResourcesFit,
    NodeResourcesFitArgs,
    ResourceSpec,
    ScoringStrategyType,
    go_quotient,
    go_quotient_batch,
    go_round,
    go_round_batch,
)
from scoring.kube_scheduler import KubeSchedulerScore, WeightedPlugin, select_host, select_host_batch
from scoring.resources import PodResources
from scoring.table import NodeTable
from tests.scoring.builders import ctr, node, pod
from tests.scoring.strategies import nodes, pods

GI = 2**30
MI = 2**20
GPU = "nvidia.com/gpu"


def fit(
    strategy: str = "LeastAllocated", resources: list[dict[str, Any]] | None = None, **extra: Any
) -> NodeResourcesFit:
    raw: dict[str, Any] = {"type": strategy, **extra}
    if resources is not None:
        raw["resources"] = resources
    return NodeResourcesFit(NodeResourcesFitArgs.parse({"scoringStrategy": raw}))


def shape(*points: tuple[int, int]) -> dict[str, Any]:
    return {"requestedToCapacityRatio": {"shape": [{"utilization": u, "score": s} for u, s in points]}}


def balanced_plugin(*names: str) -> NodeResourcesBalancedAllocation:
    raw = {"resources": [{"name": n} for n in names]} if names else None
    return NodeResourcesBalancedAllocation(NodeResourcesBalancedAllocationArgs.parse(raw))


# ------------------------------------------------------------------------------ NodeResourcesFit
# Node: 4 cores, 8Gi; its pods request 1000m and 2Gi, one container has no cpu request and one no
# memory request, so NonZeroRequested is 1100m and 2Gi + 200Mi. Pod: 1 core, no memory request
# (NonZero: 200Mi).
BUSY = node({"cpu": 4000, "memory": 8 * GI}, {"cpu": 1000, "memory": 2 * GI}, 1100, 2 * GI + 200 * MI)
ONE_CORE = pod(ctr({"cpu": "1"}))


def test_least_allocated_uses_non_zero_requests_for_node_and_pod() -> None:
    # cpu: req = 1100 + 1000 = 2100; (4000 - 2100) * 100 // 4000 = 190000 // 4000 = 47      (47.5)
    # mem: req = 2Gi + 200Mi + 200Mi = 2566914048; (8589934592 - 2566914048) * 100 // 8589934592 = 70
    # (47 + 70) // 2 = 58                                                                      (58.5)
    assert NodeResourcesFit(NodeResourcesFitArgs()).score(ONE_CORE, BUSY) == 58
    assert NodeResourcesFitArgs.parse(None) == NodeResourcesFitArgs()  # the defaults: LeastAllocated, cpu + memory


def test_most_allocated_same_inputs() -> None:
    # cpu: 2100 * 100 // 4000 = 52 (52.5); mem: 2566914048 * 100 // 8589934592 = 29 (29.88); (52 + 29) // 2 = 40
    assert fit("MostAllocated").score(ONE_CORE, BUSY) == 40


def test_most_allocated_clamps_over_commit_and_least_allocated_scores_zero() -> None:
    full = node({"cpu": 1000, "memory": 8 * GI}, {"cpu": 900, "memory": 0})
    # cpu: 900 + 1000 > 1000; MostAllocated min(1900, 1000) * 100 // 1000 = 100, LeastAllocated 0
    # mem (NonZero 200Mi): most 209715200 * 100 // 8589934592 = 2, least 97; means (100 + 2) // 2, (0 + 97) // 2
    assert fit("MostAllocated").score(ONE_CORE, full) == 51
    assert fit("LeastAllocated").score(ONE_CORE, full) == 48


def test_extended_resources_are_bypassed_unless_requested_and_allocatable_zero_is_skipped() -> None:
    plugin = fit("MostAllocated", [{"name": "cpu", "weight": 1}, {"name": GPU, "weight": 3}])
    gpu_node = node({"cpu": 8000, GPU: 8}, {"cpu": 2000, GPU: 4})
    # GPU pod: cpu (2000 + 1000) * 100 // 8000 = 37 (37.5), gpu (4 + 2) * 100 // 8 = 75; (37 + 3 * 75) // 4 = 65
    assert plugin.score(pod(ctr({"cpu": "1", GPU: "2"})), gpu_node) == 65
    # CPU pod: the GPU term is bypassed entirely (no 0 term, no weight): 37 // 1
    assert plugin.score(ONE_CORE, gpu_node) == 37
    # GPU pod on a node without GPUs: allocatable 0 is skipped, so only cpu counts again
    assert plugin.score(pod(ctr({"cpu": "1", GPU: "2"})), node({"cpu": 8000}, {"cpu": 2000})) == 37


def test_nothing_scored_gives_zero_not_one_hundred() -> None:
    # FitPlus gives 100 when nothing is scored; in-tree NodeResourcesFit gives 0.
    plugin = fit("LeastAllocated", [{"name": "example.com/fpga", "weight": 1}, {"name": "pods", "weight": 1}])
    assert plugin.score(ONE_CORE, node({"cpu": 4000, "example.com/fpga": 2, "pods": 110})) == 0


def test_ephemeral_storage_uses_plain_requests_and_is_not_bypassed() -> None:
    plugin = fit("LeastAllocated", [{"name": "ephemeral-storage", "weight": 1}])
    storage = node({"ephemeral-storage": 100 * GI}, {"ephemeral-storage": 25 * GI})
    # The pod requests none: not bypassed (not a scalar resource): (100 - 25) * 100 // 100 = 75
    assert plugin.score(ONE_CORE, storage) == 75


def test_duplicate_resources_count_twice_as_kube_scheduler_does() -> None:
    plugin = fit("MostAllocated", [{"name": "cpu", "weight": 1}, {"name": "cpu", "weight": 1}, {"name": "memory"}])
    # cpu 52 twice, memory 29 once: (52 + 52 + 29) // 3 = 44
    assert plugin.score(ONE_CORE, BUSY) == 44


def test_requested_to_capacity_ratio_rounds_half_away_from_zero() -> None:
    # Bin packing shape (0, 0) .. (100, 10): scores scaled by 10, f(p) = p.
    plugin = fit("RequestedToCapacityRatio", None, **shape((0, 0), (100, 10)))
    assert [(p.utilization, p.score) for p in plugin.shape] == [(0, 0), (100, 100)]
    workload = pod(ctr({"cpu": "1", "memory": "1Gi"}))
    # cpu: (1000 + 1000) * 100 // 4000 = 50; mem: (22 + 1)Gi * 100 // 100Gi = 23;
    # mean 73 / 2 = 36.5 -> math.Round 37 (Python's round would give 36)
    assert plugin.score(workload, node({"cpu": 4000, "memory": 100 * GI}, {"cpu": 1000, "memory": 22 * GI})) == 37


def test_requested_to_capacity_ratio_truncates_between_points_and_counts_only_positive_scores() -> None:
    # Spread shape (0, 10) .. (30, 0), scaled (0, 100) .. (30, 0).
    plugin = fit("RequestedToCapacityRatio", None, **shape((0, 10), (30, 0)))
    workload = pod(ctr({"cpu": "1", "memory": "8Gi"}))
    # cpu utilization (1000 + 1000) * 100 // 10000 = 20:
    #   f(20) = 100 + trunc((0 - 100) * (20 - 0) / 30) = 100 + trunc(-66.7) = 100 - 66 = 34 (flooring: 33)
    # memory: 8Gi of 8Gi is utilization 100 -> f = 0, which is not counted at all
    # mean over the counted resources: 34 / 1 = 34 (a plain mean would be 17)
    assert plugin.score(workload, node({"cpu": 10000, "memory": 8 * GI}, {"cpu": 1000, "memory": 0})) == 34
    # Both at 0: nothing counted -> 0
    assert plugin.score(pod(ctr({"cpu": "10", "memory": "8Gi"})), node({"cpu": 10000, "memory": 8 * GI})) == 0


# ------------------------------------------------------------------------------ BalancedAllocation
def test_balanced_allocation_scores_the_change_in_balance() -> None:
    # Plain requests. Node 4 cores / 8Gi with 1000m / 1Gi requested; pod 1000m / 3Gi.
    #   with the pod:    cpu 2000/4000 = 0.5, mem 4Gi/8Gi = 0.5    -> std 0      -> 100
    #   without the pod: cpu 0.25, mem 0.125 -> std |0.25 - 0.125| / 2 = 0.0625 -> int(93.75) = 93
    #   score = 50 + (50 + 100 - 93) // 2 = 50 + 28 = 78   (the pod evens the node out)
    workload = pod(ctr({"cpu": "1", "memory": "3Gi"}))
    assert balanced_plugin().score(workload, node({"cpu": 4000, "memory": 8 * GI}, {"cpu": 1000, "memory": GI})) == 78


def test_balanced_allocation_population_std_for_three_resources() -> None:
    # cpu, memory, GPU; node 4 cores / 8Gi / 4 GPUs with 3 GPUs requested; pod 1 core, 1Gi, 1 GPU.
    #   with:    0.25, 0.125, 1.0 -> mean 0.458333; Σ squares 0.447917 / 3 = 0.149306 -> std 0.386401 -> 61
    #   without: 0, 0, 0.75       -> mean 0.25;     Σ squares 0.375 / 3 = 0.125      -> std 0.353553 -> 64
    #   score = 50 + (50 + 61 - 64) // 2 = 50 + 23 = 73
    plugin = balanced_plugin("cpu", "memory", GPU)
    workload = pod(ctr({"cpu": "1", "memory": "1Gi", GPU: "1"}))
    gpu_node = node({"cpu": 4000, "memory": 8 * GI, GPU: 4}, {GPU: 3})
    assert balance([1000, GI, 4], [4000, 8 * GI, 4]) == 61
    assert balance([0, 0, 3], [4000, 8 * GI, 4]) == 64
    assert plugin.score(workload, gpu_node) == 73
    # A CPU pod: the GPU (a scalar the pod does not request) is left out, so two fractions remain:
    #   with cpu 0.25, mem 0.125 -> 93; without 0, 0 -> 100; 50 + (50 + 93 - 100) // 2 = 71
    assert plugin.score(pod(ctr({"cpu": "1", "memory": "1Gi"})), gpu_node) == 71


def test_balanced_allocation_caps_fractions_at_one() -> None:
    # Node 6 cores / 6Gi, half requested; pod 4500m / 3Gi: cpu 7500/6000 = 1.25 counts as 1.0.
    #   with 1.0, 1.0 -> 100; without 0.5, 0.5 -> 100; 50 + (50 + 0) // 2 = 75
    #   (uncapped: std 0.125 -> 87 and the score would be 68)
    workload = pod(ctr({"cpu": "4500m", "memory": "3Gi"}))
    assert (
        balanced_plugin().score(workload, node({"cpu": 6000, "memory": 6 * GI}, {"cpu": 3000, "memory": 3 * GI})) == 75
    )


def test_balanced_allocation_with_one_resource_is_always_75() -> None:
    plugin = balanced_plugin("cpu")
    for requested in (0, 1000, 3999, 9000):
        assert plugin.score(ONE_CORE, node({"cpu": 4000}, {"cpu": requested})) == 75  # std 0 with and without


def test_balanced_allocation_uses_plain_requests_not_non_zero() -> None:
    # Pod requests only 2Gi (plain cpu 0; its NonZero cpu of 100m is ignored here), node NonZero 1000m / 1Gi ignored.
    #   with: cpu 0, mem 0.5 -> std 0.25 -> 75; without: 0, 0 -> 100; 50 + (50 + 75 - 100) // 2 = 62
    workload = pod(ctr({"memory": "2Gi"}))
    assert balanced_plugin().score(workload, node({"cpu": 4000, "memory": 4 * GI}, {}, 1000, GI)) == 62


def test_balanced_allocation_skips_pods_that_request_none_of_its_resources() -> None:
    plugin = balanced_plugin()
    assert not plugin.applies(pod(ctr()))  # best effort: PreScore Skip
    assert not plugin.applies(pod(ctr({GPU: "1"})))  # requests only a resource the plugin does not look at
    assert plugin.applies(pod(ctr({"memory": "1Gi"})))
    score = KubeSchedulerScore([WeightedPlugin(plugin, 5)], extender_weight=1)
    assert score.plugin_total(pod(ctr()), BUSY) == 0  # it adds nothing on any node


# ------------------------------------------------------------------------------ args
@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            {"scoringStrategy": {"type": "leastAllocated"}},
            r"args\.scoringStrategy\.type: 'leastAllocated' is not one of",
        ),
        ({"scoringStrategy": {}}, r"args\.scoringStrategy\.type: None is not one of"),
        (
            {"scoringStrategy": {"type": "MostAllocated", "resources": [{"name": "cpu", "weight": 101}]}},
            r"args\.scoringStrategy\.resources\[0\]\.weight: must be in 1\.\.100",
        ),
        (
            {"scoringStrategy": {"type": "MostAllocated", "resources": [{"name": "cpu", "weight": -1}]}},
            r"resources\[0\]\.weight: must be in 1\.\.100",
        ),
        (
            {"scoringStrategy": {"type": "MostAllocated", "resources": [{"weight": 1}]}},
            r"resources\[0\]\.name: must be",
        ),
        (
            {"scoringStrategy": {"type": "RequestedToCapacityRatio"}},
            r"args\.scoringStrategy\.requestedToCapacityRatio: required",
        ),
        (
            {"scoringStrategy": {"type": "RequestedToCapacityRatio", **shape((10, 1), (10, 2))}},
            r"requestedToCapacityRatio\.shape\[1\]\.utilization: values must be sorted in increasing order",
        ),
        (
            {"scoringStrategy": {"type": "RequestedToCapacityRatio", **shape((0, 11))}},
            r"shape\[0\]\.score: 11 not in valid range \[0, 10\]",
        ),
        (
            {"scoringStrategy": {"type": "RequestedToCapacityRatio", **shape((101, 1))}},
            r"shape\[0\]\.utilization: 101 not in valid range \[0, 100\]",
        ),
        (
            {"scoringStrategy": {"type": "RequestedToCapacityRatio", "requestedToCapacityRatio": {"shape": []}}},
            r"shape: at least one point must be specified",
        ),
        (
            {"scoringStrategy": {"type": "MostAllocated", "shap": []}},
            r"args\.scoringStrategy: unknown field\(s\) \['shap'\]",
        ),
        ({"ignoredResourceGroups": ["example.com/x"]}, r"args\.ignoredResourceGroups\[0\]: resource group name can't"),
        ({"kind": "NodeResourcesBalancedAllocationArgs"}, r"args\.kind: 'NodeResourcesBalancedAllocationArgs' is not"),
        ({"scoringstrategy": {}}, r"args: unknown field\(s\) \['scoringstrategy'\]"),
        ("LeastAllocated", r"args: must be a mapping"),
    ],
)
def test_fit_args_errors_name_the_field(raw: Any, message: str) -> None:
    with pytest.raises(ArgsError, match=message):
        NodeResourcesFitArgs.parse(raw)


def test_fit_args_defaulting() -> None:
    args = NodeResourcesFitArgs.parse(
        {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "NodeResourcesFitArgs",
            "ignoredResources": [GPU],
            "scoringStrategy": {"type": "MostAllocated", "resources": [{"name": GPU}, {"name": "cpu", "weight": 0}]},
        }
    )
    assert args.type is ScoringStrategyType.MOST_ALLOCATED
    assert args.resources == (ResourceSpec(GPU, 1), ResourceSpec("cpu", 1))  # missing or 0 weight -> 1
    assert args.ignored_resources == (GPU,)
    # An empty resource list means the defaults, as kube-scheduler's SetDefaults does.
    assert NodeResourcesFitArgs.parse({"scoringStrategy": {"type": "MostAllocated", "resources": []}}).resources == (
        DEFAULT_RESOURCES
    )


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"resources": [{"name": "cpu", "weight": 2}]}, r"args\.resources\[0\]\.weight: must be 1"),
        ({"resources": [{"name": "cpu"}, {"name": "cpu"}]}, r"args\.resources\[1\]\.name: duplicate resource 'cpu'"),
        ({"resource": []}, r"args: unknown field\(s\) \['resource'\]"),
    ],
)
def test_balanced_args_errors_name_the_field(raw: Any, message: str) -> None:
    with pytest.raises(ArgsError, match=message):
        NodeResourcesBalancedAllocationArgs.parse(raw)


# ------------------------------------------------------------------------------ Go arithmetic
@given(st.integers(-(10**6), 10**6), st.integers(1, 1000))
def test_go_quotient_truncates_toward_zero(numerator: int, denominator: int) -> None:
    expected = math.trunc(Fraction(numerator, denominator))
    assert go_quotient(numerator, denominator) == expected
    assert go_quotient(numerator, -denominator) == -expected
    assert go_quotient_batch(np.array([numerator], dtype=np.int64), denominator).tolist() == [expected]


@given(st.floats(-(2.0**60), 2.0**60, allow_nan=False))
def test_go_round_is_half_away_from_zero(value: float) -> None:
    exact = Fraction(value)
    floor = math.floor(abs(exact))
    expected = (floor + (1 if abs(exact) - floor >= Fraction(1, 2) else 0)) * (1 if value >= 0 else -1)
    assert go_round(value) == expected
    assert go_round_batch(np.array([value])).tolist() == [expected]


def test_go_round_edges() -> None:
    assert [go_round(v) for v in (0.5, 1.5, 2.5, -2.5, 0.49999999999999994)] == [1, 2, 3, -3, 0]


# ------------------------------------------------------------------------------ scalar == batch
NAMES = ["cpu", "memory", "ephemeral-storage", GPU, "hugepages-1Gi", "example.com/fpga", "pods"]
LARGEST = 10**15  # the largest random amount


resource_lists = st.lists(
    st.fixed_dictionaries({"name": st.sampled_from(NAMES), "weight": st.integers(0, 100)}), max_size=5
)


@st.composite
def fit_plugins(draw: st.DrawFn) -> NodeResourcesFit:
    strategy = draw(st.sampled_from([t.value for t in ScoringStrategyType]))
    raw: dict[str, Any] = {"type": strategy, "resources": draw(resource_lists)}
    if strategy == "RequestedToCapacityRatio":
        utilizations = sorted(draw(st.sets(st.integers(0, 100), min_size=1, max_size=5)))
        raw["requestedToCapacityRatio"] = {
            "shape": [{"utilization": u, "score": draw(st.integers(0, 10))} for u in utilizations]
        }
    return NodeResourcesFit(NodeResourcesFitArgs.parse({"scoringStrategy": raw}))


@st.composite
def balanced_plugins(draw: st.DrawFn) -> NodeResourcesBalancedAllocation:
    names = draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=5))
    return NodeResourcesBalancedAllocation(
        NodeResourcesBalancedAllocationArgs.parse({"resources": [{"name": n} for n in names]})
    )


def _batch(node_list: list[NodeInfo]) -> Any:
    table = NodeTable(capacity=2)
    named = [
        NodeInfo(f"n{i}", n.allocatable, n.requested, n.non_zero_cpu, n.non_zero_memory, 0, n.allocatable_types)
        for i, n in enumerate(node_list)
    ]
    for snapshot in named:
        table.upsert(snapshot)
    batch = table.batch([n.name for n in named])
    assert batch is not None and table.exact
    return named, batch


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(fit_plugins(), balanced_plugins()),
    pods(NAMES, LARGEST),
    st.lists(nodes(NAMES, LARGEST), min_size=1, max_size=10),
)
def test_batch_equals_scalar(plugin: Any, workload: PodInfo, node_list: list[NodeInfo]) -> None:
    named, batch = _batch(node_list)
    scores = plugin.score_batch(workload, batch).tolist()
    expected = [plugin.score(workload, snapshot) for snapshot in named]
    assert scores == expected
    low = 50 if isinstance(plugin, NodeResourcesBalancedAllocation) else 0
    assert all(low <= s <= 100 for s in expected)


@settings(max_examples=300, deadline=None)
@given(fit_plugins(), pods(NAMES, LARGEST), st.lists(nodes(NAMES, LARGEST), min_size=1, max_size=6))
def test_fit_that_does_not_apply_scores_zero_everywhere(
    plugin: NodeResourcesFit, workload: PodInfo, node_list: list[NodeInfo]
) -> None:
    """Leaving out a NodeResourcesFit that does not apply (as the totals and the simulator do) adds
    what kube-scheduler's run of it adds: 0 on every node."""
    if not plugin.applies(workload):
        assert [plugin.score(workload, node) for node in node_list] == [0] * len(node_list)


def test_fit_applies_to_pods_asking_for_a_scored_resource() -> None:
    gpus_only = NodeResourcesFit(
        NodeResourcesFitArgs.parse(
            {"scoringStrategy": {"type": "MostAllocated", "resources": [{"name": GPU, "weight": 1}]}}
        )
    )
    claims_only = PodInfo("u", "ns", "p", PodResources({"cpu": 1000}, 1000, 0))  # GPUs through claims
    asks = PodInfo("u", "ns", "p", PodResources({"cpu": 1000, GPU: 1}, 1000, 0))
    assert not gpus_only.applies(claims_only)
    assert gpus_only.applies(asks)
    node = NodeInfo("n", {"cpu": 8000, GPU: 8}, {GPU: 3})
    assert gpus_only.score(claims_only, node) == 0 and gpus_only.score(asks, node) == 50
    default = NodeResourcesFit(NodeResourcesFitArgs.parse({}))  # cpu and memory: every pod counts
    assert default.applies(claims_only)
    total = KubeSchedulerScore([WeightedPlugin(gpus_only, 1)], 200)
    assert not total.applies(claims_only) and total.applies(asks)


@settings(max_examples=100, deadline=None)
@given(
    fit_plugins(),
    balanced_plugins(),
    st.integers(1, 5),
    st.integers(1, 5),
    pods(NAMES, LARGEST),
    st.lists(nodes(NAMES, LARGEST), min_size=1, max_size=8),
)
def test_weighted_totals_batch_equals_scalar(
    fit_plugin: NodeResourcesFit,
    balanced: NodeResourcesBalancedAllocation,
    fit_weight: int,
    balanced_weight: int,
    workload: PodInfo,
    node_list: list[NodeInfo],
) -> None:
    score = KubeSchedulerScore([WeightedPlugin(fit_plugin, fit_weight), WeightedPlugin(balanced, balanced_weight)], 7)
    named, batch = _batch(node_list)
    totals = score.plugin_totals_batch(workload, batch)
    assert totals is not None
    assert totals.tolist() == [score.plugin_total(workload, snapshot) for snapshot in named]


# ------------------------------------------------------------------------------ kube-scheduler's total
def test_totals_add_the_extender_priority_times_weight_times_ten() -> None:
    score = KubeSchedulerScore([], extender_weight=200)
    assert score.extender_points(1) == 2000  # one priority step outweighs 9 in-tree plugins at 100 x weight 2
    assert score.totals([100, 0], [9, 10]) == [100 + 18000, 20000]
    assert score.totals_batch(np.array([100, 0]), np.array([9, 10])).tolist() == [18100, 20000]


def test_select_host_picks_the_highest_and_asks_only_about_ties() -> None:
    asked: list[list[str]] = []

    def choose(ties: Sequence[str]) -> str:
        asked.append(list(ties))
        return ties[-1]

    assert select_host(["a", "b", "c"], [5, 9, 1], choose) == "b" and asked == []
    assert select_host(["a", "b", "c"], [9, 5, 9], choose) == "c" and asked == [["a", "c"]]
    assert select_host_batch(["a", "b", "c"], np.array([9, 5, 9]), choose) == "c" and asked[-1] == ["a", "c"]
    with pytest.raises(ValueError, match="no nodes"):
        select_host([], [], choose)


def test_select_host_batch_hands_choose_the_ties_as_a_list_would() -> None:
    # A seeded random pick reads the same position of the lazy view as of the list of tied names.
    names = [f"n{i}" for i in range(50)]
    totals = np.array([i % 3 for i in range(50)])
    tied = [name for name, total in zip(names, totals.tolist(), strict=True) if total == 2]
    for seed in range(5):
        assert select_host_batch(names, totals, random.Random(seed).choice) == random.Random(seed).choice(tied)
    assert select_host_batch(names, totals, min) == min(tied)
