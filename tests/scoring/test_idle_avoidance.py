"""IdleGpuAvoidance: a CPU-only pod scores a node by the share of its GPUs in use (100 without GPUs,
0 where its cpu does not fit), and the plugin sits out for pods that ask for GPUs. The batch twin
equals this definition in test_gpu_sharing_plugins (hypothesis, with the other device plugins)."""

from __future__ import annotations

from scoring.framework import NodeInfo, PodInfo
from scoring.idle_avoidance import IdleGpuAvoidance, IdleGpuAvoidanceArgs, idle_avoidance
from scoring.profile import Profile, ScorePluginSpec
from scoring.resources import PodResources
from tests.scoring.builders import named_batch
from tests.scoring.test_gpu_sharing_plugins import GPU, claim_pod, dra_node, plugin_node

AVOIDANCE = IdleGpuAvoidance(IdleGpuAvoidanceArgs.parse({}))


def cpu_pod(cpu: int = 8000) -> PodInfo:
    return PodInfo("u", "ns", "p", PodResources({"cpu": cpu}, cpu, 0))


def test_one_point_per_percent_of_the_nodes_gpus_in_use() -> None:
    assert idle_avoidance(0, 8) == 100  # every GPU allocated
    assert idle_avoidance(8000, 8) == 0  # all idle
    assert idle_avoidance(3000, 8) == 63  # 37.5 % idle: 100 - floor(37.5)
    assert idle_avoidance(1, 8) == 100
    assert idle_avoidance(0, 0) == 100  # no GPUs: nothing to block


def test_cpu_only_pods_go_where_the_gpus_are_busiest() -> None:
    busy = plugin_node(8, 8)  # device plugin GPUs, all requested
    half = dra_node([1000, 1000, 0, 0])  # DRA devices: two of four in use
    shared = dra_node([460, 0])  # a share counts by its milli-devices
    idle = plugin_node(8, 0)
    cpu_only = NodeInfo(name="n", allocatable={"cpu": 64000}, requested={})
    scores = [AVOIDANCE.score(cpu_pod(), n) for n in (busy, half, shared, idle, cpu_only)]
    assert scores == [100, 50, 23, 0, 100]  # shared: 1540 of 2000 idle -> 100 - 77


def test_a_node_without_the_cpu_scores_0() -> None:
    assert AVOIDANCE.score(cpu_pod(8000), plugin_node(8, 8, cpu=64000, cpu_used=60000)) == 0


def test_it_sits_out_for_gpu_pods() -> None:
    assert AVOIDANCE.applies(cpu_pod())
    assert not AVOIDANCE.applies(claim_pod(1, 500))
    gpus = PodInfo("u", "ns", "p", PodResources({"cpu": 1000, GPU: 1}, 1000, 0))
    assert not AVOIDANCE.applies(gpus)


def test_a_profile_leaves_it_out_of_a_gpu_pods_mean() -> None:
    """With it at weight 3 beside a plugin at weight 1, a GPU pod's node score is that plugin's own."""
    from scoring.best_fit import BestFit, BestFitArgs

    profile = Profile([], [ScorePluginSpec(BestFit(BestFitArgs.parse({})), 1), ScorePluginSpec(AVOIDANCE, 3)])
    nodes = [plugin_node(8, 0), plugin_node(8, 7)]
    pod = claim_pod(1, 1000)
    _, batch = named_batch(nodes)
    best_fit = [BestFit(BestFitArgs.parse({})).score(pod, n) for n in nodes]
    scores = profile.node_scores_batch(pod, batch)
    assert scores is not None and scores.tolist() == best_fit
    mixed = profile.node_scores_batch(cpu_pod(), batch)
    assert mixed is not None
    expected = [
        (BestFit(BestFitArgs.parse({})).score(cpu_pod(), n) + 3 * AVOIDANCE.score(cpu_pod(), n)) // 4 for n in nodes
    ]
    assert mixed.tolist() == expected
