"""The GPU-sharing plugins (FGD's GpuFragmentation, GpuPacking, BestFit, DotProduct): hand-worked
scores from the FGD artifact's formulas, args errors naming the field, and the batch twins equal to
the scalar definitions on random per-device states (hypothesis)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scoring.best_fit import BestFit, BestFitArgs
from scoring.devices import FIRST_FIT, DeviceChoice, Placer, PodDevices, first_fit
from scoring.dot_product import DotProduct, DotProductArgs
from scoring.fragmentation import (
    FragmentationMeasure,
    GpuFragmentation,
    GpuFragmentationArgs,
    LeastFragmentation,
    TaskType,
    fragmentation,
)
from scoring.framework import MILLI_DEVICES, ArgsError, NodeInfo, PodInfo, ScorePlugin
from scoring.gpu_packing import GpuPacking, GpuPackingArgs
from scoring.profile import build_placer, build_score_plugin
from scoring.resources import PodResources
from tests.scoring.builders import named_batch

GPU = "nvidia.com/gpu"
WORKLOAD = [
    {"cpu": 4000, "gpuMilli": 500, "gpus": 1, "popularity": 3},
    {"cpu": 8000, "gpuMilli": 1000, "gpus": 1, "popularity": 5},
    {"cpu": 2000, "gpuMilli": 0, "gpus": 0, "popularity": 2},
]


def dra_node(used: list[int], cpu: int = 64000, cpu_used: int = 0) -> NodeInfo:
    allocatable = {"cpu": cpu}
    dra = {GPU: len(used) * MILLI_DEVICES}
    return NodeInfo(
        name="n",
        allocatable=allocatable,
        requested={"cpu": cpu_used},
        allocatable_types=NodeInfo.types_of(allocatable, dra),
        dra_allocatable=dra,
        dra_requested={GPU: sum(used)},
        dra_devices={GPU: tuple(used)},
    )


def plugin_node(gpus: int, used: int, cpu: int = 64000, cpu_used: int = 0) -> NodeInfo:
    allocatable = {"cpu": cpu, GPU: gpus}
    return NodeInfo(name="n", allocatable=allocatable, requested={"cpu": cpu_used, GPU: used})


def claim_pod(count: int, milli: int, cpu: int = 4000) -> PodInfo:
    resources = PodResources({"cpu": cpu}, cpu, 0)
    return PodInfo("u", "ns", "p", resources, claim_devices={GPU: (count, milli)} if count else {})


def fgd(mapping: str = "Sigmoid", placer: Placer = FIRST_FIT) -> GpuFragmentation:
    return GpuFragmentation(GpuFragmentationArgs.parse({"workload": WORKLOAD, "mapping": mapping}), placer)


def types(workload: list[dict[str, int]]) -> list[TaskType]:
    return [TaskType(t["cpu"], t["gpuMilli"], t["gpus"], t["popularity"]) for t in workload]


# --------------------------------------------------------------------------- the per-device view
def test_devices_free_from_dra_use_and_from_device_plugin_integers() -> None:
    assert dra_node([0, 460, 1000]).devices_free(GPU) == (1000, 540, 0)
    assert plugin_node(4, 1).devices_free(GPU) == (0, 1000, 1000, 1000)  # requested GPUs are full
    assert plugin_node(0, 0).devices_free(GPU) == ()


def test_first_fit_takes_the_first_devices_with_enough_left() -> None:
    assert first_fit((300, 1000, 600, 1000), 1, 500) == (300, 500, 600, 1000)
    assert first_fit((1000, 200, 1000), 2, 1000) == (0, 200, 0)
    assert first_fit((1000, 200), 2, 1000) is None
    assert first_fit((10,), 0, 0) == (10,)


def test_claim_devices_and_container_requests() -> None:
    pod = PodInfo("u", "ns", "p", PodResources({GPU: 2}, 0, 0), claim_devices={GPU: (1, 300)})
    assert pod.device_request(GPU) == (2, 1000)  # container requests are whole devices
    assert claim_pod(1, 300).device_request(GPU) == (1, 300)
    assert claim_pod(0, 0).device_request(GPU) == (0, 0)


# --------------------------------------------------------------------------- FGD
def test_fragmentation_per_task_type() -> None:
    types = [TaskType(t["cpu"], t["gpuMilli"], t["gpus"], t["popularity"]) for t in WORKLOAD]
    # free (1000, 540): the 500 type fits, nothing short of it: 0; the 1000 type fits, 540 is short: 5·540;
    # the CPU-only type counts all 1540 free: 2·1540
    assert fragmentation((1000, 540), 64000, types) == 5 * 540 + 2 * 1540
    # too little cpu for every GPU type: all free milli-GPUs count for each
    assert fragmentation((1000, 540), 1000, types) == 10 * 1540


def test_fgd_sigmoid_score_of_a_share() -> None:
    node = dra_node([0, 0])
    pod = claim_pod(1, 460)
    # before: 5·0 + 3·0 + 2·2000 = 4000; after (540, 1000): 3·0 + 5·540 + 2·1540 = 5780
    # ΔF = -1780 over W = 10: sigmoid(-0.178) = 0.4556 -> 45
    assert fgd().score(pod, node) == 45


def test_fgd_prefers_the_placement_that_fills_a_fragment() -> None:
    pod = claim_pod(1, 500)
    fresh, fragmented = dra_node([0, 0]), dra_node([500, 0])
    plugin = fgd()
    assert plugin.score(pod, fragmented) > plugin.score(pod, fresh)
    assert fgd("Linear").score(pod, fragmented) > fgd("Linear").score(pod, fresh)


# --------------------------------------------------------------------------- device choice
def test_least_fragmentation_puts_a_share_where_it_fragments_least() -> None:
    least = LeastFragmentation(types(WORKLOAD), GPU)
    share = PodDevices(1, 500, 4000)
    # free (1000, 500): on the 500 left, nothing is short of any type afterwards (F: 2·1000 CPU-only
    # type); on the whole device, 500 left stays short of the 1000 type (F: 5·1000 + 2·1000)
    assert least.chosen((1000, 500), 64000, share) == (1,)
    assert FIRST_FIT.chosen((1000, 500), 64000, share) == (0,)
    assert least.place((1000, 500), 64000, share) == (1000, 0)
    # equal fragmentation: the first of the devices
    assert least.chosen((1000, 1000), 64000, share) == (0,)
    assert least.chosen((400, 300), 64000, share) is None
    # whole devices: first fit (free whole devices are alike)
    assert least.chosen((500, 1000, 1000), 64000, PodDevices(2, 1000, 0)) == (1, 2)
    assert least.chosen((500,), 64000, PodDevices(0, 0, 0)) == ()


SHARED_MEASURE = FragmentationMeasure(types(WORKLOAD))  # kept across examples: later ones read earlier states


@given(st.lists(st.sampled_from([-1, 0, 250, 500, 750, 1000]), max_size=8), st.integers(-1000, 12000))
def test_a_measure_keeps_each_state_s_fragmentation(free: list[int], cpu: int) -> None:
    """``FragmentationMeasure.of`` is ``fragmentation`` whatever the devices' order and wherever the
    cpu left falls between the types' cpu (the states it keeps one result for)."""
    edges = [t.cpu + step for t in SHARED_MEASURE.workload for step in (-1, 0)]  # each side of each type's cpu
    for left in (cpu, *edges):
        for amounts in (free, free[::-1]):
            assert SHARED_MEASURE.of(amounts, left) == fragmentation(amounts, left, SHARED_MEASURE.workload)


def test_fgd_scores_the_node_after_its_device_choice() -> None:
    pod, node = claim_pod(1, 500), dra_node([0, 500])  # free (1000, 500)
    least = LeastFragmentation(types(WORKLOAD), GPU)
    # F before: 5·500 (short of the 1000 type) + 2·1500 (CPU-only type) = 5500. First fit takes the
    # whole device, (500, 500): 5·1000 + 2·1000 = 7000, ΔF = -1500; the half-used one, (1000, 0):
    # 2·1000, ΔF = 3500 (sigmoid(-0.15) = 0.46, sigmoid(0.35) = 0.59)
    assert fgd().score(pod, node) == 46
    assert fgd(placer=least).score(pod, node) == 58
    assert GpuPacking(GpuPackingArgs.parse({}), least).score(pod, node) == 95  # 100 - 50 // 10
    assert GpuPacking(GpuPackingArgs.parse({})).score(pod, node) == 49  # a fresh GPU


def test_device_choice_is_built_from_the_profiles_fragmentation_plugin() -> None:
    plugins = [("BestFit", {}), ("GpuFragmentation", {"workload": WORKLOAD, "resource": "example.com/gpu"})]
    placer = build_placer(DeviceChoice.LEAST_FRAGMENTATION, plugins)
    assert isinstance(placer, LeastFragmentation) and placer.resource == "example.com/gpu"
    assert placer.for_resource(GPU) is FIRST_FIT and placer.for_resource("example.com/gpu") is placer
    assert build_placer(DeviceChoice.FIRST_FIT, plugins) is FIRST_FIT
    with pytest.raises(ArgsError, match="deviceChoice: LeastFragmentation needs a GpuFragmentation plugin"):
        build_placer(DeviceChoice.LEAST_FRAGMENTATION, [("BestFit", {})])
    with pytest.raises(ArgsError, match=r"plugins\[1\]\.args\.workload"):
        build_placer(DeviceChoice.LEAST_FRAGMENTATION, [("BestFit", {}), ("GpuFragmentation", {})])


def test_fgd_does_not_fit() -> None:
    assert fgd().score(claim_pod(2, 1000), dra_node([0, 500])) == 0
    assert fgd().score(claim_pod(1, 100, cpu=70000), dra_node([0])) == 0


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({}, "args.workload: must be a non-empty list"),
        ({"workload": [{"cpu": 1, "gpuMilli": 1001, "gpus": 1, "popularity": 1}]}, "args.workload[0].gpuMilli"),
        (
            {"workload": [{"cpu": 1, "gpuMilli": 500, "gpus": 0, "popularity": 1}]},
            "args.workload[0]: gpuMilli and gpus",
        ),
        ({"workload": [{"cpu": 1, "popularity": 0}]}, "args.workload[0].popularity: must be an integer >= 1"),
        ({"workload": [{"cpu": 1, "popularity": 1, "memory": 2}]}, "args.workload[0]: unknown field(s) ['memory']"),
        ({"workload": WORKLOAD, "mapping": "Tanh"}, "args.mapping: 'Tanh' is not one of Sigmoid, Linear"),
        ({"workload": WORKLOAD, "milliPerPoint": 0}, "args.milliPerPoint: must be an integer > 0"),
        ({"workload": WORKLOAD, "resource": ""}, "args.resource: must be a non-empty resource name"),
    ],
)
def test_fgd_args_errors_name_the_field(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(
        ArgsError, match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(").replace(")", r"\)")
    ):
        GpuFragmentationArgs.parse(raw)


# --------------------------------------------------------------------------- packing, best fit, dot product
def test_gpu_packing_cases() -> None:
    packing = GpuPacking(GpuPackingArgs.parse({}))
    assert packing.score(claim_pod(1, 500), dra_node([0, 0, 0, 0])) == 29  # idle node: max(33 - 4, 4)
    assert packing.score(claim_pod(1, 500), dra_node([1000, 0, 0])) == 49  # a fresh GPU: max(50 - 1, 33)
    # shares on a used GPU with 700 left: 100 - 70 // 10 = 93
    assert packing.score(claim_pod(1, 500), dra_node([300, 0])) == 93
    assert packing.score(claim_pod(0, 0), dra_node([300, 0])) == 0
    assert packing.score(claim_pod(2, 1000), dra_node([300, 0])) == 0


def test_best_fit_and_dot_product() -> None:
    node = dra_node([0, 500], cpu=96000, cpu_used=32000)
    pod = claim_pod(1, 500, cpu=32000)
    # left after: cpu 32000, milli 1000: 100·(1 - ½·32000/128000 - ½·1000/8000) = 81.25 -> 81
    assert BestFit(BestFitArgs.parse({})).score(pod, node) == 81
    # free (64000, 1500)/(128000, 8000) · pod (32000, 500)/(…): 0.125 + 0.01171875 = 0.13671875; 100·(1 - 0.0684) -> 93
    assert DotProduct(DotProductArgs.parse({})).score(pod, node) == 93


@pytest.mark.parametrize("name", ["GpuPacking", "BestFit", "DotProduct", "IdleGpuAvoidance"])
def test_registered_and_strict(name: str) -> None:
    assert build_score_plugin(name, {}, "plugins[0]").name == name
    with pytest.raises(ArgsError, match=r"plugins\[0\]\.args: unknown field\(s\) \['weight'\]"):
        build_score_plugin(name, {"weight": 1}, "plugins[0]")


# --------------------------------------------------------------------------- batch == scalar
@st.composite
def gpu_nodes(draw: st.DrawFn) -> NodeInfo:
    cpu = draw(st.integers(0, 128000))
    cpu_used = draw(st.integers(0, 130000))
    if draw(st.booleans()):
        used = draw(st.lists(st.sampled_from([0, 0, 1000, 1000, 200, 460, 500, 540, 800, 999]), max_size=9))
        return dra_node(used, cpu, cpu_used) if used else plugin_node(0, 0, cpu, cpu_used)
    gpus = draw(st.integers(0, 9))
    return plugin_node(gpus, draw(st.integers(0, gpus + 1)), cpu, cpu_used)


@st.composite
def gpu_pods(draw: st.DrawFn) -> PodInfo:
    cpu = draw(st.integers(0, 64000))
    if draw(st.booleans()):
        gpus = draw(st.integers(0, 4))
        return PodInfo("u", "ns", "p", PodResources({"cpu": cpu, GPU: gpus} if gpus else {"cpu": cpu}, cpu, 0))
    count = draw(st.integers(0, 3))
    return claim_pod(count, draw(st.sampled_from([100, 460, 500, 1000])) if count else 0, cpu)


@st.composite
def workloads(draw: st.DrawFn) -> list[dict[str, int]]:
    workload = draw(
        st.lists(
            st.tuples(
                st.integers(0, 64000), st.sampled_from([0, 100, 500, 1000]), st.integers(1, 4), st.integers(1, 50)
            ),
            min_size=1,
            max_size=6,
        )
    )
    return [{"cpu": c, "gpuMilli": m, "gpus": g if m else 0, "popularity": p} for c, m, g, p in workload]


@st.composite
def placers(draw: st.DrawFn) -> Placer:
    if draw(st.booleans()):
        return FIRST_FIT
    return LeastFragmentation(types(draw(workloads())), GPU)


@st.composite
def plugins(draw: st.DrawFn) -> ScorePlugin:
    name = draw(
        st.sampled_from(
            ["GpuFragmentation", "GpuPacking", "BestFit", "DotProduct", "GpuCpuBalance", "IdleGpuAvoidance"]
        )
    )
    placer = draw(placers())
    if name == "GpuCpuBalance":
        raw = {"cpuPerGpu": draw(st.integers(1, 40000)), "milliPerPoint": draw(st.integers(1, 50))}
        return build_score_plugin(name, raw, "p", placer)
    if name != "GpuFragmentation":
        return build_score_plugin(name, {}, "p", placer)
    raw = {
        "workload": draw(workloads()),
        "mapping": draw(st.sampled_from(["Sigmoid", "Linear"])),
        "milliPerPoint": draw(st.integers(1, 50)),
    }
    return build_score_plugin(name, raw, "p", placer)


@st.composite
def dra_nodes(draw: st.DrawFn) -> NodeInfo:
    used = draw(st.lists(st.sampled_from([0, 1000, 460, 540]), min_size=1, max_size=9))
    return dra_node(used, draw(st.integers(0, 128000)), draw(st.integers(0, 130000)))


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.lists(gpu_nodes(), min_size=1, max_size=10), st.lists(dra_nodes(), min_size=1, max_size=10)))
def test_batch_devices_free_is_each_nodes_padded_with_minus_one(node_list: list[NodeInfo]) -> None:
    """Mixed nodes, and nodes all served by DRA (read straight from the table's DRA rows)."""
    named, batch = named_batch(node_list)
    free = batch.devices_free(GPU).tolist()
    width = max((len(n.devices_free(GPU)) for n in named), default=0)
    assert free == [[*n.devices_free(GPU), *[-1] * (width - len(n.devices_free(GPU)))] for n in named]


@settings(max_examples=300, deadline=None)
@given(plugins(), gpu_pods(), st.lists(gpu_nodes(), min_size=1, max_size=10))
def test_batch_equals_scalar(plugin: ScorePlugin, pod: PodInfo, node_list: list[NodeInfo]) -> None:
    assert_batch_equals_scalar(plugin, pod, node_list)


def assert_batch_equals_scalar(plugin: ScorePlugin, pod: PodInfo, node_list: list[NodeInfo]) -> None:
    """The plugin's batch scores over a table of ``node_list`` are its scalar scores, in 0..100."""
    named, batch = named_batch(node_list)
    scores = plugin.score_batch(pod, batch)
    assert scores is not None
    assert scores.tolist() == [plugin.score(pod, node) for node in named]
    assert all(0 <= s <= 100 for s in scores.tolist())


@settings(max_examples=300, deadline=None)
@given(
    placers(),
    st.integers(0, 3),
    st.sampled_from([100, 460, 500, 540, 1000]),
    st.integers(0, 64000),
    st.lists(gpu_nodes(), min_size=1, max_size=10),
)
def test_device_choice_batch_equals_scalar(
    placer: Placer, count: int, milli: int, cpu: int, node_list: list[NodeInfo]
) -> None:
    """Where the batch twin puts the demand on each row is where the definition puts it."""
    demand = PodDevices(count, milli if count else 0, cpu)
    named, batch = named_batch(node_list)
    free = batch.devices_free(GPU)
    left = batch.allocatable("cpu") - batch.requested("cpu")
    fits, after = placer.place_batch(free, left, demand)
    for row, node in enumerate(named):
        own = node.devices_free(GPU)
        placed = placer.place(own, int(left[row]), demand)
        assert bool(fits[row]) == (placed is not None)
        width = len(own)
        assert after[row, :width].tolist() == list(placed if placed is not None else own)
        assert (after[row, width:] == -1).all()
