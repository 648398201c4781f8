"""Profile: plugin combination and the 0..100 -> 0..10 extender mapping.

combine_scores = sum(w * s) // sum(w); priority_scale.absolute = clamp((s + 5) // 10, 0, 10).
Combined priority = (sum(w * s) // sum(w) + 5) // 10 (tests/scoring/test_priority_scale.py: the other scale).
"""

from __future__ import annotations

from typing import Any

import pytest

from scoring import fitplus, scarce
from scoring.framework import (
    MAX_EXTENDER_PRIORITY,
    MAX_NODE_SCORE,
    MIN_EXTENDER_PRIORITY,
    MIN_NODE_SCORE,
    SUCCESS,
    ArgsError,
    Code,
    NodeInfo,
    PodInfo,
    Status,
    combine_scores,
)
from scoring.managed_fit import ManagedResourcesFit
from scoring.priority_scale import absolute as to_extender_priority
from scoring.profile import SCORE_PLUGINS, NodeScore, Profile, ScorePluginSpec, build_score_plugin
from tests.scoring.builders import node
from tests.scoring.builders import pod_requesting as pod

GI = 2**30
GPU = "nvidia.com/gpu"


FIT_ARGS = {
    "resources": {
        GPU: {"type": "MostAllocated", "weight": 2},
        "cpu": {"type": "LeastAllocated", "weight": 1},
        "memory": {"type": "LeastAllocated", "weight": 1},
    }
}
SRA_ARGS = {"resources": [GPU]}


def profile(fit_weight: int = 1, sra_weight: int = 1, filters: tuple[Any, ...] = ()) -> Profile:
    return Profile(
        filters,
        [
            ScorePluginSpec(build_score_plugin(fitplus.NAME, FIT_ARGS, "plugins[0]"), fit_weight),
            ScorePluginSpec(build_score_plugin(scarce.NAME, SRA_ARGS, "plugins[1]"), sra_weight),
        ],
    )


def test_constants() -> None:
    assert (MIN_NODE_SCORE, MAX_NODE_SCORE) == (0, 100)
    assert (MIN_EXTENDER_PRIORITY, MAX_EXTENDER_PRIORITY) == (0, 10)


@pytest.mark.parametrize(
    ("score", "priority"),
    [
        (0, 0),
        (4, 0),
        (5, 1),
        (14, 1),
        (15, 2),
        (49, 5),  # (49 + 5) // 10 = 5
        (50, 5),
        (66, 7),  # (66 + 5) // 10 = 7
        (94, 9),
        (95, 10),
        (100, 10),
        (-7, 0),  # clamped
        (-100, 0),
        (150, 10),  # clamped
    ],
)
def test_to_extender_priority(score: int, priority: int) -> None:
    result = to_extender_priority(score)
    assert result == priority
    assert type(result) is int


def test_combine_scores() -> None:
    # (2*75 + 1*50) // 3 = 200 // 3 = 66
    assert combine_scores([(2, 75), (1, 50)]) == 66
    # (1*49 + 1*50) // 2 = 49
    assert combine_scores([(1, 49), (1, 50)]) == 49
    assert combine_scores([(3, 100)]) == 100
    assert combine_scores(iter([(1, 0), (1, 100)])) == 50


def test_registry() -> None:
    assert set(SCORE_PLUGINS) == {
        "NodeResourcesFitPlus",
        "ScarceResourceAvoidance",
        "GpuFragmentation",
        "GpuPacking",
        "BestFit",
        "DotProduct",
        "GpuClustering",
        "GpuCpuBalance",
        "GpuModelBalance",
        "IdleGpuAvoidance",
    }


def test_build_score_plugin_unknown_name() -> None:
    with pytest.raises(ArgsError) as info:
        build_score_plugin("NodeResourcesFit", {}, "plugins[0]")
    message = str(info.value)
    assert message.startswith("plugins[0].name:"), message
    assert "NodeResourcesFit" in message


def test_build_score_plugin_args_path() -> None:
    with pytest.raises(ArgsError) as info:
        build_score_plugin(fitplus.NAME, {"resources": {"cpu": {"type": "mostallocated"}}}, "plugins[2]")
    assert str(info.value).startswith("plugins[2].args.resources[cpu].type:")
    with pytest.raises(ArgsError) as info:
        build_score_plugin(scarce.NAME, {"resources": []}, "plugins[3]")
    assert str(info.value).startswith("plugins[3].args.resources:")


def test_build_score_plugin_builds_the_plugins() -> None:
    fit = build_score_plugin(fitplus.NAME, FIT_ARGS, "p")
    sra = build_score_plugin(scarce.NAME, SRA_ARGS, "p")
    assert isinstance(fit, fitplus.NodeResourcesFitPlus)
    assert isinstance(sra, scarce.ScarceResourceAvoidance)


# Scenario used below:
#   node: cpu 4000, memory 16Gi, ephemeral-storage 100Gi, gpu 8, pods 110; nothing requested
#   CPU pod: cpu 1, memory 4Gi
#     FitPlus: cpu LA (4000-1000)*100//4000 = 75; mem LA (16-4)*100//16 = 75; gpu skipped
#              -> (75 + 75) // 2 = 75
#     SRA    : D = {ephemeral-storage, gpu}, S = 1 -> 1 * 100 // 2 = 50
GPU_NODE = {"cpu": 4000, "memory": 16 * GI, "ephemeral-storage": 100 * GI, GPU: 8, "pods": 110}
CPU_POD = {"cpu": "1", "memory": "4Gi"}


def test_profile_score_equal_weights() -> None:
    # (75 + 50) // 2 = 62 -> (62 + 5) // 10 = 6
    result = profile().score(pod(CPU_POD), node(GPU_NODE))
    assert result == NodeScore({fitplus.NAME: 75, scarce.NAME: 50}, 62)


def test_profile_score_weighted() -> None:
    # fit weight 1, sra weight 2: (75 + 100) // 3 = 58 -> (58 + 5) // 10 = 6
    assert profile(1, 2).score(pod(CPU_POD), node(GPU_NODE)).node_score == 58
    assert to_extender_priority(profile(1, 2).node_score(pod(CPU_POD), node(GPU_NODE))) == 6
    # fit weight 3, sra weight 1: (225 + 50) // 4 = 68 -> (68 + 5) // 10 = 7
    assert profile(3, 1).score(pod(CPU_POD), node(GPU_NODE)).node_score == 68
    assert to_extender_priority(profile(3, 1).node_score(pod(CPU_POD), node(GPU_NODE))) == 7


def test_combined_is_rounded_once_after_the_mean() -> None:
    # node: cpu 4000, memory 16Gi, gpu 8 (no ephemeral-storage); CPU pod cpu 1, memory 4Gi
    #   FitPlus 75 (as above); SRA: D = {gpu}, S = 1 -> 0
    #   weights 1, 1: (75 + 0) // 2 = 37 -> (37 + 5) // 10 = 4
    #   weights 1, 2: (75 + 0) // 3 = 25 -> (25 + 5) // 10 = 3
    #   (averaging per-plugin priorities 8 and 0 with weights 1, 2 instead would give 8 // 3 = 2)
    n = node({"cpu": 4000, "memory": 16 * GI, GPU: 8})
    assert profile(1, 1).score(pod(CPU_POD), n) == NodeScore({fitplus.NAME: 75, scarce.NAME: 0}, 37)
    assert profile(1, 2).score(pod(CPU_POD), n) == NodeScore({fitplus.NAME: 75, scarce.NAME: 0}, 25)


def test_gpu_pod_prefers_fuller_gpu_node() -> None:
    # GPU pod: cpu 1, memory 4Gi, gpu 2
    #   empty node : gpu MA 2*100//8 = 25; cpu 75; mem 75 -> (50 + 75 + 75) // 4 = 50
    #   busy node  : gpu 6 used -> MA 8*100//8 = 100; cpu 75; mem 75 -> (200 + 150) // 4 = 87
    #   SRA sits out: the pod asks for the only scarce resource (it would score 100 on both)
    gpu_pod = pod({"cpu": "1", "memory": "4Gi", GPU: "2"})
    prof = profile()
    sat_out = (scarce.NAME,)
    assert prof.score(gpu_pod, node(GPU_NODE)) == NodeScore({fitplus.NAME: 50, scarce.NAME: 100}, 50, sat_out)
    assert prof.score(gpu_pod, node(GPU_NODE, {GPU: 6})) == NodeScore({fitplus.NAME: 87, scarce.NAME: 100}, 87, sat_out)


def test_node_score_per_plugin() -> None:
    prof = profile()
    p, n = pod(CPU_POD), node(GPU_NODE)
    assert prof.node_score(p, n, plugin=fitplus.NAME) == 75
    assert prof.node_score(p, n, plugin=scarce.NAME) == 50
    assert prof.node_score(p, n) == 62  # (75 + 50) // 2
    with pytest.raises(KeyError):
        prof.node_score(p, n, plugin="NoSuchPlugin")


def test_best_effort_pod() -> None:
    # FitPlus: nothing requested -> 100; SRA: D = {cpu, memory, eph, gpu}, S = 1 -> 3*100//4 = 75
    # (100 + 75) // 2 = 87 -> (87 + 5) // 10 = 9
    assert profile().score(pod(None), node(GPU_NODE)) == NodeScore({fitplus.NAME: 100, scarce.NAME: 75}, 87)


def test_scorer_names() -> None:
    assert profile().scorer_names == (fitplus.NAME, scarce.NAME)


class _Reject:
    name = "Reject"

    def __init__(self, reason: str) -> None:
        self.reason = reason
        self.calls = 0

    def filter(self, pod: PodInfo, node: NodeInfo) -> Status:
        self.calls += 1
        return Status(Code.UNSCHEDULABLE, self.reason)


def test_filter_first_failure_wins() -> None:
    first, second = _Reject("first"), _Reject("second")
    prof = profile(filters=(ManagedResourcesFit([GPU]), first, second))
    status = prof.filter(pod(CPU_POD), node(GPU_NODE))
    assert status == Status(Code.UNSCHEDULABLE, "first")
    assert (first.calls, second.calls) == (1, 0)


def test_filter_managed_fit_in_profile() -> None:
    prof = profile(filters=(ManagedResourcesFit([GPU]),))
    assert prof.filter(pod({GPU: "2"}), node(GPU_NODE, {GPU: 6})) is SUCCESS
    assert prof.filter(pod({GPU: "3"}), node(GPU_NODE, {GPU: 6})) == Status(
        Code.UNSCHEDULABLE, "Insufficient nvidia.com/gpu"
    )


def test_filter_no_filters_passes() -> None:
    assert profile().filter(pod(CPU_POD), node(GPU_NODE)).passed
