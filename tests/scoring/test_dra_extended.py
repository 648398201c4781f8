"""NodeResourcesFitPlus and ScarceResourceAvoidance on extended resources served by DRA devices
(``NodeInfo.dra_allocatable`` / ``dra_requested``, in milli-devices; the cluster cache fills them,
see tests/app/test_dra_extended.py). Scores derived by hand.

Upstream rule (noderesources ``calculateResourceAllocatableRequest`` with DRAExtendedResource): an
extended resource with no allocatable in ``status.allocatable`` is scored on the devices of the
DeviceClass naming it: allocatable = devices, requested = devices allocated + the pod's request.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from scoring.fitplus import NodeResourcesFitPlus, NodeResourcesFitPlusArgs
from scoring.framework import MILLI_DEVICES, NodeInfo
from scoring.scarce import ScarceResourceAvoidance, ScarceResourceAvoidanceArgs
from scoring.table import NodeTable
from tests.scoring.builders import ctr, node, pod

GPU = "nvidia.com/gpu"
GI = 2**30


def fitplus(kind: str) -> NodeResourcesFitPlus:
    return NodeResourcesFitPlus(NodeResourcesFitPlusArgs.parse({"resources": {GPU: {"type": kind, "weight": 1}}}))


def dra_node(devices: int, used_milli: int, name: str = "n") -> NodeInfo:
    """A node with cpu and memory from its kubelet and ``devices`` GPUs from a DRA driver only."""
    base = node({"cpu": 16000, "memory": 64 * GI, "pods": 110})
    dra = {GPU: devices * MILLI_DEVICES}
    return replace(
        base,
        name=name,
        dra_allocatable=dra,
        dra_requested={GPU: used_milli},
        allocatable_types=NodeInfo.types_of(base.allocatable, dra),
    )


@pytest.mark.parametrize(
    ("kind", "used", "devices", "pod_gpus"), [("MostAllocated", 2, 8, 2), ("LeastAllocated", 3, 4, 1)]
)
def test_whole_devices_score_as_a_device_plugin_node(kind: str, used: int, devices: int, pod_gpus: int) -> None:
    """Milli-devices scale allocatable and requested alike: whole devices give the device plugin's score."""
    gpu_pod = pod(ctr({"cpu": "1", GPU: str(pod_gpus)}))
    plugin_node = node({"cpu": 16000, GPU: devices}, {GPU: used})
    assert fitplus(kind).score(gpu_pod, dra_node(devices, used * MILLI_DEVICES)) == fitplus(kind).score(
        gpu_pod, plugin_node
    )


def test_shares_count_as_fractions_of_a_device() -> None:
    # 4 GPUs; shares hold 1.25 devices (1250 milli); the pod asks for 1:
    #   MostAllocated: (1250 + 1000) * 100 // 4000 = 56   (device-plugin counting would say 1 or 2 used: 50 / 75)
    #   LeastAllocated: (4000 - 2250) * 100 // 4000 = 43
    gpu_pod = pod(ctr({GPU: "1"}))
    assert fitplus("MostAllocated").score(gpu_pod, dra_node(4, 1250)) == 56
    assert fitplus("LeastAllocated").score(gpu_pod, dra_node(4, 1250)) == 43


def test_packing_prefers_the_fuller_dra_node() -> None:
    gpu_pod = pod(ctr({GPU: "1"}))
    plugin = fitplus("MostAllocated")
    assert plugin.score(gpu_pod, dra_node(8, 6000)) > plugin.score(gpu_pod, dra_node(8, 500))


def test_cpu_only_pod_avoids_a_dra_only_gpu_node() -> None:
    """The DRA-served GPU is a resource type of the node: a pod that does not request it is steered
    off (N = {cpu, memory, gpu}, D = N - {cpu, memory} = {gpu}, S = {gpu}: (1 - 1) * 100 // 1 = 0;
    a node without GPUs: D empty, 100)."""
    sra = ScarceResourceAvoidance(ScarceResourceAvoidanceArgs.parse({"resources": [GPU]}))
    cpu_pod = pod(ctr({"cpu": "1", "memory": "1Gi"}))
    assert sra.score(cpu_pod, dra_node(8, 0)) == 0
    assert sra.score(cpu_pod, node({"cpu": 16000, "memory": 64 * GI, "pods": 110})) == 100
    assert sra.score(pod(ctr({"cpu": "1", GPU: "1"})), dra_node(8, 0)) == 100


def test_a_table_row_reused_by_a_node_without_dra_reads_zero() -> None:
    table = NodeTable(capacity=2)
    table.upsert(dra_node(8, 3000, name="a"))
    table.remove("a")
    table.upsert(replace(node({"cpu": 1000, GPU: 2}, {GPU: 1}), name="b"))  # takes a's row
    batch = table.batch(["b"])
    assert batch is not None
    amounts = batch.fit_amounts(GPU, 1)
    assert amounts is not None
    assert [a.tolist() for a in amounts] == [[2], [2]]  # plain units: requested 1 + 1, allocatable 2


def test_a_pod_amount_that_could_overflow_in_milli_devices_is_scored_one_by_one() -> None:
    table = NodeTable()
    table.upsert(dra_node(8, 0, name="a"))
    huge = pod(ctr({GPU: str(2**50)}))
    batch = table.batch(["a"])
    assert batch is not None
    assert fitplus("MostAllocated").score_batch(huge, batch) is None
    assert fitplus("MostAllocated").score(huge, dra_node(8, 0)) == 100
    small = pod(ctr({GPU: "2"}))
    assert np.array_equal(fitplus("MostAllocated").score_batch(small, batch), [25])  # type: ignore[arg-type]
