"""NodeResourcesFitPlus: exact integer scores, derived by hand from the reference formulas.

Per scored resource r (requested by the pod > 0 AND configured):
    req = node_requested(r) + pod_amount(r)      (NonZeroRequested / non-zero defaults for cpu, memory)
    LeastAllocated: 0 if alloc == 0 or req > alloc else (alloc - req) * 100 // alloc
    MostAllocated : 0 if alloc == 0 else min(req, alloc) * 100 // alloc
combined = sum(score_r * w_r) // sum(w_r); 100 when nothing is scored.
"""

from __future__ import annotations

from typing import Any

import pytest

from scoring.fitplus import (
    NAME,
    NodeResourcesFitPlus,
    NodeResourcesFitPlusArgs,
    ResourceStrategy,
    StrategyType,
)
from scoring.framework import ArgsError, PodInfo
from scoring.resources import pod_resources
from tests.scoring.builders import ctr, node, pod

GI = 2**30
MI = 2**20
GPU = "nvidia.com/gpu"
LA = "LeastAllocated"
MA = "MostAllocated"


def plugin(resources: dict[str, tuple[str, int]]) -> NodeResourcesFitPlus:
    raw = {"resources": {name: {"type": t, "weight": w} for name, (t, w) in resources.items()}}
    return NodeResourcesFitPlus(NodeResourcesFitPlusArgs.parse(raw))


DOC_CONFIG = {GPU: (MA, 2), "cpu": (LA, 1), "memory": (LA, 1)}


def test_name() -> None:
    assert NAME == "NodeResourcesFitPlus"
    assert NodeResourcesFitPlus.name == "NodeResourcesFitPlus"


# --------------------------------------------------------------------------- basic exact scores


def test_doc_example_gpu_pod() -> None:
    # node: cpu 16000m, memory 64Gi, gpu 8; already requested cpu 4000, memory 16Gi, gpu 4
    # pod: cpu 2, memory 8Gi, gpu 2
    #   gpu MA: (4 + 2) * 100 // 8 = 600 // 8 = 75
    #   cpu LA: (16000 - 6000) * 100 // 16000 = 1000000 // 16000 = 62   (62.5)
    #   mem LA: (64 - 24)Gi * 100 // 64Gi = 4000 // 64 = 62             (62.5)
    #   combined: (75*2 + 62 + 62) // 4 = 274 // 4 = 68                  (68.5)
    p = pod(ctr({"cpu": "2", "memory": "8Gi", GPU: "2"}))
    n = node({"cpu": 16000, "memory": 64 * GI, GPU: 8, "pods": 110}, {"cpu": 4000, "memory": 16 * GI, GPU: 4})
    assert plugin(DOC_CONFIG).score(p, n) == 68


def test_most_allocated_prefers_fuller_gpu_node() -> None:
    cfg = plugin({GPU: (MA, 1)})
    p = pod(ctr({GPU: "1"}))
    # (6 + 1) * 100 // 8 = 87 (87.5)  vs  (0 + 1) * 100 // 8 = 12 (12.5)
    assert cfg.score(p, node({GPU: 8}, {GPU: 6})) == 87
    assert cfg.score(p, node({GPU: 8})) == 12


# --------------------------------------------------------------------------- resource-selection


def test_resource_selection_configured_but_not_requested_is_skipped() -> None:
    # pod requests cpu only; memory and gpu are configured but skipped entirely (no 0 term, no weight)
    # cpu LA: (4000 - 1000) * 100 // 4000 = 75 -> 75 * 1 // 1 = 75
    # (a naive "0 term" implementation would give (75 + 0 + 0*2) // 4 = 18)
    p = pod(ctr({"cpu": "1"}))
    n = node({"cpu": 4000, "memory": 8 * GI, GPU: 8})
    assert plugin(DOC_CONFIG).score(p, n) == 75


def test_resource_selection_defaults_do_not_select_memory() -> None:
    # pod requests gpu only: cpu/memory get non-zero defaults as *amounts*, but they are not
    # requested, so they are not scored. gpu MA: (2 + 1) * 100 // 8 = 37 (37.5)
    p = pod(ctr({GPU: "1"}))
    n = node({"cpu": 4000, "memory": 8 * GI, GPU: 8}, {GPU: 2})
    assert plugin(DOC_CONFIG).score(p, n) == 37


def test_requested_but_not_configured_is_ignored() -> None:
    # pod requests cpu + example.com/foo; only cpu configured -> cpu LA 50 alone
    # (4000 - 2000) * 100 // 4000 = 50
    p = pod(ctr({"cpu": "2", "example.com/foo": "3"}))
    n = node({"cpu": 4000, "example.com/foo": 4})
    assert plugin({"cpu": (LA, 3)}).score(p, n) == 50


# --------------------------------------------------------------------------- weightsum-zero


def test_weightsum_zero_best_effort_pod_scores_100() -> None:
    p = pod(ctr())
    n = node({"cpu": 4000, "memory": 8 * GI, GPU: 8}, {"cpu": 3900, "memory": 8 * GI, GPU: 8})
    assert plugin(DOC_CONFIG).score(p, n) == 100


def test_weightsum_zero_nothing_configured_requested() -> None:
    # pod requests memory only; config has cpu and gpu -> 100
    p = pod(ctr({"memory": "1Gi"}))
    n = node({"cpu": 4000, "memory": 2 * GI, GPU: 8}, {"cpu": 4000})
    assert plugin({"cpu": (LA, 1), GPU: (MA, 2)}).score(p, n) == 100


def test_weightsum_zero_explicit_zero_request() -> None:
    # explicit cpu "0" is not "requested" -> nothing scored -> 100. The node is full, so scoring cpu
    # would have given LA (4000 - 4000) * 100 // 4000 = 0.
    p = pod(ctr({"cpu": "0"}))
    n = node({"cpu": 4000}, {"cpu": 4000})
    assert plugin({"cpu": (LA, 1)}).score(p, n) == 100


def test_unscored_resource_names_never_score() -> None:
    # "pods" and "requests.foo/bar" are not scored resource names even if configured and requested
    p = pod(ctr({"pods": "1", "requests.foo/bar": "1"}))
    n = node({"pods": 110, "requests.foo/bar": 2}, {"pods": 110, "requests.foo/bar": 2})
    assert plugin({"pods": (LA, 1), "requests.foo/bar": (LA, 1)}).score(p, n) == 100


# --------------------------------------------------------------------------- allocatable-zero


def test_allocatable_missing_scores_zero_with_weight() -> None:
    # cpu LA: (4000 - 1000) * 100 // 4000 = 75; gpu absent -> 0 with weight 2
    # (75 * 1 + 0 * 2) // 3 = 25   (dropping gpu instead would give 75)
    p = pod(ctr({"cpu": "1", GPU: "1"}))
    cfg = plugin({"cpu": (LA, 1), GPU: (MA, 2)})
    assert cfg.score(p, node({"cpu": 4000})) == 25
    # allocatable present but 0: same
    assert cfg.score(p, node({"cpu": 4000, GPU: 0})) == 25


def test_allocatable_zero_least_allocated_also_zero() -> None:
    # example.com/foo LA with allocatable 0 -> 0 (not a division error); cpu LA 75
    # (75 * 1 + 0 * 1) // 2 = 37
    p = pod(ctr({"cpu": "1", "example.com/foo": "1"}))
    n = node({"cpu": 4000, "example.com/foo": 0})
    assert plugin({"cpu": (LA, 1), "example.com/foo": (LA, 1)}).score(p, n) == 37


# --------------------------------------------------------------------------- truncation


def test_truncation_per_resource_before_weighting() -> None:
    # cpu LA: alloc 3000, req 1000 -> 2000 * 100 // 3000 = 66   (66.67)
    # mem LA: alloc 3Gi, req 2Gi  -> 1Gi * 100 // 3Gi  = 33   (33.33)
    # integer: (66 + 33) // 2 = 99 // 2 = 49
    # float  : (66.67 + 33.33) / 2 = 50.0 -> 50   (wrong)
    p = pod(ctr({"cpu": "1", "memory": "2Gi"}))
    n = node({"cpu": 3000, "memory": 3 * GI})
    assert plugin({"cpu": (LA, 1), "memory": (LA, 1)}).score(p, n) == 49


def test_truncation_of_weighted_mean() -> None:
    # cpu LA: (4000 - 1000) * 100 // 4000 = 75, weight 2
    # mem LA: (4Gi - 2Gi) * 100 // 4Gi  = 50, weight 1
    # (150 + 50) // 3 = 200 // 3 = 66  (66.67: rounding would give 67)
    p = pod(ctr({"cpu": "1", "memory": "2Gi"}))
    n = node({"cpu": 4000, "memory": 4 * GI})
    assert plugin({"cpu": (LA, 2), "memory": (LA, 1)}).score(p, n) == 66


def test_truncation_most_allocated() -> None:
    # gpu MA: 1 * 100 // 3 = 33 (33.33); foo MA: 2 * 100 // 3 = 66 (66.67)
    # (33 + 66) // 2 = 49; float (33.33 + 66.67) / 2 = 50
    p = pod(ctr({GPU: "1", "example.com/foo": "2"}))
    n = node({GPU: 3, "example.com/foo": 3})
    assert plugin({GPU: (MA, 1), "example.com/foo": (MA, 1)}).score(p, n) == 49


# --------------------------------------------------------------------------- clamp / boundary


def test_least_allocated_overcommit_clamps_to_zero() -> None:
    # node cpu requested 3500 + pod 1000 = 4500 > 4000 -> 0 (naive: (4000-4500)*100//4000 = -13)
    p = pod(ctr({"cpu": "1"}))
    n = node({"cpu": 4000}, {"cpu": 3500})
    assert plugin({"cpu": (LA, 1)}).score(p, n) == 0


def test_most_allocated_overcommit_clamps_to_100() -> None:
    # gpu requested 7 + 2 = 9 > 8 -> min(9, 8) * 100 // 8 = 100 (naive: 112)
    p = pod(ctr({GPU: "2"}))
    n = node({GPU: 8}, {GPU: 7})
    assert plugin({GPU: (MA, 1)}).score(p, n) == 100


def test_clamp_combined() -> None:
    # cpu LA overcommitted: 3500 + 1000 > 4000 -> 0 (w 1); gpu MA 7 + 2 > 8 -> 100 (w 2)
    # (0 + 200) // 3 = 66
    p = pod(ctr({"cpu": "1", GPU: "2"}))
    n = node({"cpu": 4000, GPU: 8}, {"cpu": 3500, GPU: 7})
    assert plugin({"cpu": (LA, 1), GPU: (MA, 2)}).score(p, n) == 66


def test_boundary_exactly_full() -> None:
    # req == alloc: LA (4000 - 4000) * 100 // 4000 = 0; MA 8 * 100 // 8 = 100
    p = pod(ctr({"cpu": "1", GPU: "1"}))
    n = node({"cpu": 4000, GPU: 8}, {"cpu": 3000, GPU: 7})
    assert plugin({"cpu": (LA, 1)}).score(p, n) == 0
    assert plugin({GPU: (MA, 1)}).score(p, n) == 100


def test_boundary_empty_node() -> None:
    # tiny request on an empty large node: LA (100000 - 1) * 100 // 100000 = 99 (99.999); MA 1*100//100000 = 0
    p = pod(ctr({"example.com/foo": "1"}))
    n = node({"example.com/foo": 100_000})
    assert plugin({"example.com/foo": (LA, 1)}).score(p, n) == 99
    assert plugin({"example.com/foo": (MA, 1)}).score(p, n) == 0


# --------------------------------------------------------------------------- nonzero-default / node-requested


def test_node_requested_uses_non_zero_requested_for_cpu() -> None:
    # node plain requested cpu 1000, but NonZeroRequested 1200 (two existing containers without cpu)
    # req = 1200 + 1000 = 2200 -> (4000 - 2200) * 100 // 4000 = 180000 // 4000 = 45
    # (plain requested would give (4000 - 2000) * 100 // 4000 = 50)
    p = pod(ctr({"cpu": "1"}))
    n = node({"cpu": 4000}, {"cpu": 1000}, non_zero_cpu=1200)
    assert plugin({"cpu": (LA, 1)}).score(p, n) == 45


def test_node_requested_uses_non_zero_requested_for_memory() -> None:
    # node: alloc 4Gi, plain requested memory 0, NonZeroRequested 2 * 200Mi = 400Mi
    # req = 400Mi + 1Gi = 1424Mi; (4096Mi - 1424Mi) * 100 // 4096Mi = 267200 // 4096 = 65 (65.23)
    # (plain requested: (4096 - 1024) * 100 // 4096 = 75)
    p = pod(ctr({"memory": "1Gi"}))
    n = node({"memory": 4 * GI}, {}, non_zero_memory=400 * MI)
    assert plugin({"memory": (LA, 1)}).score(p, n) == 65


def test_node_requested_plain_for_extended_and_ephemeral() -> None:
    # ephemeral-storage and scalars use plain requested (NodeInfo non-zero fields do not apply)
    # eph LA: (4Gi - (1Gi + 1Gi)) * 100 // 4Gi = 50
    p = pod(ctr({"ephemeral-storage": "1Gi"}))
    n = node({"ephemeral-storage": 4 * GI}, {"ephemeral-storage": GI}, non_zero_cpu=999, non_zero_memory=999)
    assert plugin({"ephemeral-storage": (LA, 1)}).score(p, n) == 50


def test_pod_amount_uses_non_zero_defaults_per_container() -> None:
    # c1 cpu 1 + c2 without cpu (+100m default) -> amount 1100
    # (4000 - 1100) * 100 // 4000 = 290000 // 4000 = 72 (72.5); without the default: 75
    p = pod(ctr({"cpu": "1", "memory": "1Gi"}), ctr({"memory": "1Gi"}))
    n = node({"cpu": 4000, "memory": 8 * GI})
    assert plugin({"cpu": (LA, 1)}).score(p, n) == 72


def test_pod_amount_memory_default() -> None:
    # c1 memory 1Gi + c2 without memory (+200Mi) -> 1224Mi
    # MA: 1224Mi * 100 // 4096Mi = 122400 // 4096 = 29 (29.88); without default 1024*100//4096 = 25
    p = pod(ctr({"cpu": "1", "memory": "1Gi"}), ctr({"cpu": "1"}))
    n = node({"cpu": 4000, "memory": 4 * GI})
    assert plugin({"memory": (MA, 1)}).score(p, n) == 29


def test_pod_amount_includes_overhead_and_init() -> None:
    # containers cpu 1000, init 2000 -> 2000, + overhead 500 = 2500
    # MA: 2500 * 100 // 10000 = 25
    p = PodInfo(
        uid="u",
        namespace="ns",
        name="p",
        resources=pod_resources(
            {
                "containers": [ctr({"cpu": "1"})],
                "initContainers": [ctr({"cpu": "2"})],
                "overhead": {"cpu": "500m"},
            }
        ),
    )
    assert plugin({"cpu": (MA, 1)}).score(p, node({"cpu": 10000})) == 25


def test_scalar_names_are_scored() -> None:
    # hugepages-2Mi MA: (4Mi + 4Mi) * 100 // 16Mi = 50; kubernetes.io/batch-cpu LA: (1000-500)*100//1000 = 50
    # attachable-volumes-x MA: (1 + 1) * 100 // 39 = 5 (5.13)
    # (50*1 + 50*1 + 5*2) // 4 = 110 // 4 = 27
    p = pod(ctr({"hugepages-2Mi": "4Mi", "kubernetes.io/batch-cpu": "500", "attachable-volumes-x": "1"}))
    n = node(
        {"hugepages-2Mi": 16 * MI, "kubernetes.io/batch-cpu": 1000, "attachable-volumes-x": 39},
        {"hugepages-2Mi": 4 * MI, "attachable-volumes-x": 1},
    )
    cfg = plugin({"hugepages-2Mi": (MA, 1), "kubernetes.io/batch-cpu": (LA, 1), "attachable-volumes-x": (MA, 2)})
    assert cfg.score(p, n) == 27


# --------------------------------------------------------------------------- args validation


def _fit_error(raw: Any) -> str:
    with pytest.raises(ArgsError) as info:
        NodeResourcesFitPlusArgs.parse(raw)
    return str(info.value)


def test_args_parse_valid() -> None:
    args = NodeResourcesFitPlusArgs.parse(
        {"resources": {GPU: {"type": MA, "weight": 2}, "cpu": {"type": LA, "weight": 1}}}
    )
    assert args.resources == {
        GPU: ResourceStrategy(StrategyType.MOST_ALLOCATED, 2),
        "cpu": ResourceStrategy(StrategyType.LEAST_ALLOCATED, 1),
    }


def test_args_missing_weight_defaults_to_1() -> None:
    # Project choice, like in-tree NodeResourcesFit's defaulting (weight 0/unset -> 1). Upstream
    # Koordinator has no defaulting: an omitted weight is Go's zero value, i.e. the resource is ignored.
    args = NodeResourcesFitPlusArgs.parse({"resources": {"cpu": {"type": LA}}})
    assert args.resources == {"cpu": ResourceStrategy(StrategyType.LEAST_ALLOCATED, 1)}


@pytest.mark.parametrize(
    ("raw", "prefix"),
    [
        ({"resources": {"cpu": {"type": "RequestedToCapacityRatio", "weight": 1}}}, "args.resources[cpu].type"),
        ({"resources": {"cpu": {"type": "mostallocated", "weight": 1}}}, "args.resources[cpu].type"),
        ({"resources": {"cpu": {"type": "leastAllocated", "weight": 1}}}, "args.resources[cpu].type"),
        ({"resources": {"cpu": {"weight": 1}}}, "args.resources[cpu].type"),
        ({"resources": {"cpu": {"type": None, "weight": 1}}}, "args.resources[cpu].type"),
        ({"resources": {GPU: {"type": MA, "weight": 0}}}, f"args.resources[{GPU}].weight"),
        ({"resources": {GPU: {"type": MA, "weight": -1}}}, f"args.resources[{GPU}].weight"),
        ({"resources": {GPU: {"type": MA, "weight": True}}}, f"args.resources[{GPU}].weight"),
        ({"resources": {GPU: {"type": MA, "weight": 1.5}}}, f"args.resources[{GPU}].weight"),
        ({"resources": {GPU: {"type": MA, "weight": "2"}}}, f"args.resources[{GPU}].weight"),
        ({"resources": {}}, "args.resources"),
        ({}, "args.resources"),
        ({"resources": None}, "args.resources"),
        ({"resources": [GPU]}, "args.resources"),
        ([], "args"),
        ("resources", "args"),
        (None, "args"),
        ({"resources": {"cpu": {"type": LA}}, "extra": 1}, "args"),
        ({"resources": {"cpu": {"type": LA, "weight": 1, "shape": []}}}, "args.resources[cpu]"),
        ({"resources": {"cpu": "LeastAllocated"}}, "args.resources[cpu]"),
        ({"resources": {"": {"type": LA}}}, "args.resources"),
    ],
)
def test_args_invalid(raw: Any, prefix: str) -> None:
    message = _fit_error(raw)
    assert message.startswith(prefix), message
    # the prefix is the whole field path, followed by ':'
    assert message[len(prefix)] == ":", message


def test_args_error_uses_given_path() -> None:
    with pytest.raises(ArgsError) as info:
        NodeResourcesFitPlusArgs.parse({"resources": {"cpu": {"type": "x"}}}, "plugins[1].args")
    assert str(info.value).startswith("plugins[1].args.resources[cpu].type:")


def test_args_error_is_value_error() -> None:
    assert issubclass(ArgsError, ValueError)
