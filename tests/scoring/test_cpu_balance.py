"""GpuCpuBalance: the free milli-devices a node's free cpu cannot feed, before and after the pod.
(Batch == scalar and the memos over node updates: test_gpu_sharing_plugins, test_row_memo.)"""

from __future__ import annotations

from typing import Any

import pytest

from scoring.cpu_balance import GpuCpuBalance, GpuCpuBalanceArgs, node_cpu_per_gpu, stranded
from scoring.framework import ArgsError, PodInfo
from scoring.profile import build_score_plugin
from scoring.resources import PodResources
from tests.scoring.test_gpu_sharing_plugins import GPU, assert_batch_equals_scalar, claim_pod, dra_node, plugin_node

# 10 cores per whole GPU, 10 milli-devices per point
BALANCE = GpuCpuBalance(GpuCpuBalanceArgs.parse({"cpuPerGpu": 10_000, "milliPerPoint": 10}))


def test_stranded_is_the_free_devices_beyond_what_the_free_cpu_feeds() -> None:
    assert stranded(8000, 96_000, 10_000) == 0  # 96 cores feed 9.6 GPUs
    assert stranded(8000, 60_000, 10_000) == 2000  # 6 GPUs fed, 2 stranded
    assert stranded(8000, 65_432, 10_000) == 1457  # 6,543 milli-devices fed (floor)
    assert stranded(8000, -5_000, 10_000) == 8000  # over-committed cpu feeds nothing
    assert stranded(0, 0, 10_000) == 0
    # cpu past what the most devices of a node need feeds nothing more (the batch stays in int64)
    assert stranded(256_000, 2**60, 10**9) == 0


def test_a_device_needs_the_workloads_cpu_or_what_its_node_was_built_with() -> None:
    assert node_cpu_per_gpu(10_000, 96_000, 8) == 10_000  # 12 cores per GPU: enough
    assert node_cpu_per_gpu(10_000, 16_000, 2) == 8_000  # built for pods that ask less
    assert node_cpu_per_gpu(10_000, 0, 8) == 1
    assert node_cpu_per_gpu(10_000, 32_000, 0) == 10_000  # no devices: nothing to strand


def test_a_cpu_only_pod_scores_low_where_it_leaves_gpus_without_cpu_and_the_plugin_sits_out_for_it() -> None:
    dense = dra_node([0] * 8, cpu=96_000)  # 8 GPUs, 12 cores each
    rich = dra_node([0] * 2, cpu=104_000)  # 2 GPUs, 52 cores each
    pod = claim_pod(0, 0, cpu=20_000)
    assert not BALANCE.applies(pod)  # its scores (for /debug) are left out of a profile's mean
    assert BALANCE.applies(claim_pod(1, 500))
    assert BALANCE.applies(PodInfo("u", "ns", "p", PodResources({"cpu": 1000, GPU: 1}, 1000, 0)))
    # dense: 76 cores left feed 7,600 of 8,000 free milli-devices: 400 stranded -> 50 - 40
    assert BALANCE.score(pod, dense) == 10
    assert BALANCE.score(pod, rich) == 50  # cpu to spare either way
    assert BALANCE.score(pod, plugin_node(0, 0, cpu=32_000)) == 50  # no devices at all


def test_a_gpu_pod_goes_where_its_cpu_matches_the_free_devices() -> None:
    # 6 of 8 GPUs used, 10 of 96 cores left: 2,000 free, 1,000 fed, 1,000 stranded
    short = dra_node([1000] * 6 + [0, 0], cpu=96_000, cpu_used=86_000)
    # a 500-milli share with 2 cores: 1,500 free, 800 fed: 700 stranded, 300 fewer -> 50 + 30
    assert BALANCE.score(claim_pod(1, 500, cpu=2_000), short) == 80
    # with 8 cores: 1,500 free, 200 fed: 1,300 stranded, 300 more -> 50 - 30
    assert BALANCE.score(claim_pod(1, 500, cpu=8_000), short) == 20
    # device-plugin GPUs count whole: 2 of 4 free, 8 of 48 cores left (800 fed, 1,200 stranded);
    # one more GPU with 1 core: 1,000 free, 700 fed, 300 stranded -> 50 + 90, clamped
    whole = PodInfo("u", "ns", "p", PodResources({"cpu": 1000, GPU: 1}, 1000, 0))
    assert BALANCE.score(whole, plugin_node(4, 2, cpu=48_000, cpu_used=40_000)) == 100


def test_nodes_built_with_less_cpu_per_device_score_a_used_and_an_empty_one_alike() -> None:
    """8 cores per GPU, under the workload's 10: such a node feeds each of its devices with what it
    has, so packing 1-GPU pods strands nothing and the plugin prefers neither node (the tie-break
    packs them; test_placement.py on the real control plane). Counted at 10 cores per GPU the empty
    node would strand 1,600 milli-devices and draw the pod away from the used one."""
    pod = claim_pod(1, 1000, cpu=1_000)
    empty = dra_node([0] * 8, cpu=64_000)
    used = dra_node([1000] * 3 + [0] * 5, cpu=64_000, cpu_used=3_000)
    assert BALANCE.score(pod, empty) == BALANCE.score(pod, used) == 50
    # a cpu-hungry share there strands what its cores leave unfed: 7,500 free, 40 cores feed 5,000
    assert BALANCE.score(claim_pod(1, 500, cpu=24_000), empty) == 0


def test_a_node_the_pod_does_not_fit_scores_zero() -> None:
    assert BALANCE.score(claim_pod(1, 600), dra_node([500, 500])) == 0  # no device with 600 left
    assert BALANCE.score(claim_pod(1, 500, cpu=9_000), dra_node([0], cpu=8_000)) == 0  # cpu


def test_scores_are_clamped_to_0_and_100() -> None:
    fine = GpuCpuBalance(GpuCpuBalanceArgs.parse({"cpuPerGpu": 10_000, "milliPerPoint": 1}))
    assert fine.score(claim_pod(0, 0, cpu=20_000), dra_node([0] * 8, cpu=96_000)) == 0
    assert fine.score(claim_pod(1, 1000, cpu=0), dra_node([0] * 8, cpu=0)) == 100


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (None, r"args\.cpuPerGpu: required: the milli-CPU your GPU pods ask per whole device"),
        ({"milliPerPoint": 10}, r"args\.cpuPerGpu: required"),
        (
            {"cpuPerGpu": 0},
            r"args\.cpuPerGpu: must be an integer > 0 and <= 1000000000 \(milli-CPU per whole device\), got 0",
        ),
        ({"cpuPerGpu": True}, r"args\.cpuPerGpu: must be an integer > 0 .* got True"),
        ({"cpuPerGpu": "10"}, r"args\.cpuPerGpu: must be an integer > 0 .* got '10'"),
        ({"cpuPerGpu": 10**10}, r"args\.cpuPerGpu: must be an integer > 0 and <= 1000000000"),
        (
            {"cpuPerGpu": 10_000, "milliPerPoint": -1},
            r"args\.milliPerPoint: must be an integer > 0 and <= 256000, got -1",
        ),
        ({"cpuPerGpu": 10_000, "weight": 1}, r"args: unknown field\(s\) \['weight'\]"),
        ({"cpuPerGpu": 10_000, "resource": ""}, r"args\.resource: must be a non-empty resource name"),
    ],
)
def test_args_errors_name_the_field(raw: Any, message: str) -> None:
    with pytest.raises(ArgsError, match=message):
        GpuCpuBalanceArgs.parse(raw)


def test_registered_with_defaults() -> None:
    plugin = build_score_plugin("GpuCpuBalance", {"cpuPerGpu": 10_882}, "plugins[2]")
    assert isinstance(plugin, GpuCpuBalance)
    assert plugin.args == GpuCpuBalanceArgs("nvidia.com/gpu", 10_882, 10)
    with pytest.raises(ArgsError, match=r"^plugins\[2\]\.args\.cpuPerGpu: required"):
        build_score_plugin("GpuCpuBalance", {}, "plugins[2]")


def test_the_batch_stays_exact_at_the_largest_amounts() -> None:
    """cpu near the table's exact limit and the largest cpuPerGpu: int64 products must not wrap."""
    plugin = GpuCpuBalance(GpuCpuBalanceArgs.parse({"cpuPerGpu": 10**9, "milliPerPoint": 1}))
    nodes = [dra_node([0] * 8, cpu=2**55), dra_node([0] * 8, cpu=2**55, cpu_used=2**55 - 10**12), dra_node([0] * 8)]
    for pod in (claim_pod(1, 500, cpu=0), claim_pod(0, 0, cpu=10**12), claim_pod(2, 1000, cpu=2**40)):
        assert_batch_equals_scalar(plugin, pod, nodes)
