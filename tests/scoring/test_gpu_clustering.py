"""GpuClustering (the FGD artifact's Clustering baseline): the four score bands with the artifact's
integer fill term, pods' kinds, args errors naming the field, and the batch twin equal to the scalar
definition on random nodes with random kind counts (hypothesis)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scoring.clustering import GpuClustering, GpuClusteringArgs
from scoring.framework import SHARE_KIND, ArgsError, NodeInfo, PodInfo, device_kind
from scoring.profile import build_score_plugin
from scoring.resources import PodResources
from scoring.table import NodeTable
from tests.scoring.test_gpu_sharing_plugins import (
    GPU,
    assert_batch_equals_scalar,
    claim_pod,
    dra_node,
    gpu_nodes,
    gpu_pods,
    plugin_node,
)

PLUGIN = GpuClustering(GpuClusteringArgs.parse({}))


def with_kinds(node: NodeInfo, **kinds: int) -> NodeInfo:
    """``node`` running pods of these kinds: ``share=2, gpu1=1`` (SHARE_KIND, 1 whole GPU)."""
    counts = {SHARE_KIND if name == "share" else int(name.removeprefix("gpu")): pods for name, pods in kinds.items()}
    return replace(node, pod_kinds={GPU: counts})


def go_fill(left: int) -> int:
    """The artifact's ``MaxNodeScore/4*(MaxSpecGpu-left)/MaxSpecGpu``, evaluated left to right."""
    return 100 // 4 * (8000 - left) // 8000


def test_device_kinds() -> None:
    assert device_kind(0, False) is None
    assert device_kind(1, True) == SHARE_KIND
    assert device_kind(1, False) == 1
    assert device_kind(4, False) == 4
    assert device_kind(2, True) == 2  # several shares: their devices (the artifact has none)


def test_the_four_bands() -> None:
    node = dra_node([0, 500, 1000, 1000])  # free 1000 + 500: left 1500, fill 25·6500 // 8000 = 20
    share = claim_pod(1, 500)
    assert go_fill(1500) == 20
    assert PLUGIN.score(share, with_kinds(node, share=2)) == 75 + 20  # only its kind
    assert PLUGIN.score(share, with_kinds(node, share=2, gpu1=1)) == 50 + 20  # its kind among others
    assert PLUGIN.score(share, node) == 25 + 20  # no GPU pods
    assert PLUGIN.score(share, with_kinds(node, gpu1=3)) == 20  # only other kinds
    # whole GPUs: the kind is the count
    assert PLUGIN.score(claim_pod(2, 1000), with_kinds(node, gpu2=1)) == 95
    assert PLUGIN.score(claim_pod(1, 1000), with_kinds(node, gpu2=1)) == 20


def test_fill_is_the_artifacts_integer_arithmetic() -> None:
    for used in ([0] * 8, [1000] * 8, [999] + [1000] * 7, [700, 0, 0], [1000, 1000, 999, 460]):
        node = dra_node(used)
        left = sum(1000 - u for u in used)
        assert PLUGIN.score(claim_pod(1, 100), node) == 25 + go_fill(left)
    # device-plugin GPUs: the requested ones are full (8 GPUs, 2 requested: 25·2000 // 8000 = 6)
    assert PLUGIN.score(claim_pod(1, 1000), with_kinds(plugin_node(8, 2), gpu1=2)) == 75 + 6


def test_a_node_larger_than_the_largest_spec_stays_in_its_band() -> None:
    idle16 = dra_node([0] * 16)  # 16000 milli-GPUs left: clamped to 8000, fill 0
    assert PLUGIN.score(claim_pod(1, 500), idle16) == 25
    assert PLUGIN.score(claim_pod(1, 500), with_kinds(idle16, gpu1=1)) == 0


def test_a_pod_without_gpus_scores_zero_and_kinds_of_other_resources_do_not_count() -> None:
    cpu_only = PodInfo("u", "ns", "p", PodResources({"cpu": 1000}, 1000, 0))
    node = with_kinds(dra_node([0, 0]), share=1)
    assert PLUGIN.score(cpu_only, node) == 0
    other = replace(node, pod_kinds={"example.com/accel": {SHARE_KIND: 1}})
    assert PLUGIN.score(claim_pod(1, 500), other) == 25 + go_fill(2000)
    accel = GpuClustering(GpuClusteringArgs.parse({"resource": "example.com/accel"}))
    accel_share = PodInfo("u", "ns", "p", PodResources({}, 0, 0), claim_devices={"example.com/accel": (1, 500)})
    assert accel.score(accel_share, other) == 75 + 25  # only its kind; no accel devices free: fill 25
    whole_accel = PodInfo("u", "ns", "p", PodResources({"example.com/accel": 1}, 0, 0))
    assert accel.score(whole_accel, other) == 0 + 25  # only another kind


def test_kinds_with_no_pods_are_not_present() -> None:
    node = replace(dra_node([0, 0]), pod_kinds={GPU: {SHARE_KIND: 1, 1: 0}})
    assert PLUGIN.score(claim_pod(1, 500), node) == 75 + go_fill(2000)


def test_container_requests_are_whole_gpus() -> None:
    pod = PodInfo("u", "ns", "p", PodResources({GPU: 1}, 0, 0), claim_devices={GPU: (1, 300)})
    assert PLUGIN.score(pod, with_kinds(plugin_node(8, 1), gpu1=1)) == 75 + go_fill(7000)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"weight": 1}, r"plugins\[0\]\.args: unknown field\(s\) \['weight'\]"),
        ({"resource": ""}, r"plugins\[0\]\.args\.resource: must be a non-empty resource name"),
        ({"resource": 3}, r"plugins\[0\]\.args\.resource: must be a non-empty resource name"),
        ([], r"plugins\[0\]\.args: must be a mapping"),
    ],
)
def test_args_errors_name_the_field(raw: Any, message: str) -> None:
    with pytest.raises(ArgsError, match=message):
        build_score_plugin("GpuClustering", raw, "plugins[0]")


def test_registered() -> None:
    plugin = build_score_plugin("GpuClustering", None, "plugins[0]")
    assert isinstance(plugin, GpuClustering) and plugin.args.resource == GPU


# --------------------------------------------------------------------------- batch == scalar
KINDS = st.dictionaries(st.sampled_from([SHARE_KIND, 1, 2, 4, 8]), st.integers(0, 3), max_size=4)


@st.composite
def clustered_nodes(draw: st.DrawFn) -> NodeInfo:
    node = draw(gpu_nodes())
    resources = draw(st.dictionaries(st.sampled_from([GPU, "example.com/accel"]), KINDS, max_size=2))
    return replace(node, pod_kinds=resources)


@settings(max_examples=300, deadline=None)
@given(gpu_pods(), st.lists(clustered_nodes(), min_size=1, max_size=10))
def test_batch_equals_scalar(pod: PodInfo, node_list: list[NodeInfo]) -> None:
    assert_batch_equals_scalar(PLUGIN, pod, node_list)


@settings(max_examples=100, deadline=None)
@given(gpu_pods(), st.lists(clustered_nodes(), min_size=2, max_size=6), st.data())
def test_batch_equals_scalar_after_rows_are_reused(pod: PodInfo, node_list: list[NodeInfo], data: Any) -> None:
    """A node removed and another added in its row: no kind count of the old node stays."""
    table = NodeTable(capacity=2)
    named = [replace(n, name=f"n{i}") for i, n in enumerate(node_list)]
    for node in named:
        table.upsert(node)
    gone = data.draw(st.sampled_from(named))
    table.remove(gone.name)
    fresh = replace(data.draw(gpu_nodes()), name="fresh")  # no kinds at all
    table.upsert(fresh)
    kept = [n for n in named if n is not gone] + [fresh]
    batch = table.batch([n.name for n in kept])
    assert batch is not None
    scores = PLUGIN.score_batch(pod, batch)
    assert scores is not None
    assert scores.tolist() == [PLUGIN.score(pod, node) for node in kept]
