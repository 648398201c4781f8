"""ScarceResourceAvoidance: counts resource *types*, exact integer scores derived by hand.

N = scored types with allocatable > 0 on the node (never ``pods``), P = pod's requested types,
D = N - P, S = D ∩ scarce. Score = 100 if |D| == 0 or |S| == 0 else (|D| - |S|) * 100 // |D|.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from scoring.framework import ArgsError, NodeInfo
from scoring.profile import Profile, ScorePluginSpec
from scoring.scarce import NAME, ScarceResourceAvoidance, ScarceResourceAvoidanceArgs
from tests.scoring.builders import ctr, node, pod

GI = 2**30
GPU = "nvidia.com/gpu"


def sra(*names: str) -> ScarceResourceAvoidance:
    return ScarceResourceAvoidance(ScarceResourceAvoidanceArgs.parse({"resources": list(names)}))


CPU_POD = ctr({"cpu": "1", "memory": "1Gi"})


def test_name() -> None:
    assert NAME == "ScarceResourceAvoidance"
    assert ScarceResourceAvoidance.name == "ScarceResourceAvoidance"


# --------------------------------------------------------------------------- NodeInfo.types_of


def test_types_of_excludes_pods_zero_and_unscored() -> None:
    alloc = {
        "cpu": 32000,
        "memory": 128 * GI,
        "ephemeral-storage": 100 * GI,
        "pods": 110,
        GPU: 8,
        "hugepages-1Gi": 2 * GI,
        "hugepages-2Mi": 0,
        "attachable-volumes-aws-ebs": 39,
        "kubernetes.io/batch-cpu": 1000,
        "requests.foo/bar": 1,
        "storage": 5,
    }
    assert NodeInfo.types_of(alloc) == frozenset(
        {
            "cpu",
            "memory",
            "ephemeral-storage",
            GPU,
            "hugepages-1Gi",
            "attachable-volumes-aws-ebs",
            "kubernetes.io/batch-cpu",
        }
    )


# --------------------------------------------------------------------------- type-count


# A node with five scored types; the quantities are beside the point.
GPU_NODE = {"cpu": 32000, "memory": 128 * GI, "ephemeral-storage": 100 * GI, GPU: 8, "hugepages-1Gi": 2 * GI}


@pytest.mark.parametrize(
    ("allocatable", "expected"),
    [
        # N = {cpu, memory, ephemeral-storage, gpu, hugepages-1Gi}; P = {cpu, memory}
        # D = {ephemeral-storage, gpu, hugepages-1Gi} (3), S = {gpu} (1) -> (3 - 1) * 100 // 3 = 66
        # (hugepages-2Mi is zero-valued: not a type of this node; pods is never counted)
        pytest.param({**GPU_NODE, "hugepages-2Mi": 0, "pods": 110}, 66, id="gpu-node"),
        # N = {cpu, memory, gpu} (pods excluded); D = {gpu}; S = {gpu} -> (1 - 1) * 100 // 1 = 0
        # (counting pods would give D = {gpu, pods} -> 50)
        pytest.param({"cpu": 32000, "memory": 128 * GI, GPU: 8, "pods": 110}, 0, id="pods-never-counted"),
        # gpu allocatable 0 -> not in N -> S empty -> 100
        pytest.param({"cpu": 32000, "memory": 128 * GI, "ephemeral-storage": GI, GPU: 0}, 100, id="zero-scarce"),
        # D = {ephemeral-storage, gpu, hugepages-1Gi, hugepages-2Mi, kubernetes.io/batch-cpu,
        #      attachable-volumes-x} (6), S = 1 -> 5 * 100 // 6 = 83 (83.33)
        pytest.param(
            {
                "cpu": 64000,
                "memory": 512 * GI,
                "ephemeral-storage": 500 * GI,
                GPU: 8,
                "hugepages-1Gi": 4 * GI,
                "hugepages-2Mi": 2**21,
                "kubernetes.io/batch-cpu": 1000,
                "attachable-volumes-x": 39,
                "pods": 110,
            },
            83,
            id="six-unrequested-types-dilute",
        ),
    ],
)
def test_cpu_pod_type_count(allocatable: dict[str, int], expected: int) -> None:
    assert sra(GPU).score(pod(CPU_POD), node(allocatable)) == expected


def test_quantities_and_usage_do_not_matter() -> None:
    # same types, different quantities and usage -> same score (|D| = 3, |S| = 1 -> 66)
    big = {"cpu": 256000, "memory": 2048 * GI, "ephemeral-storage": GI, GPU: 1, "hugepages-1Gi": 64 * GI}
    scorer = sra(GPU)
    assert scorer.score(pod(CPU_POD), node(GPU_NODE)) == 66
    assert scorer.score(pod(CPU_POD), node(big, {GPU: 1, "cpu": 1000})) == 66


def test_pod_requesting_scarce_resource_scores_100() -> None:
    # P includes gpu -> D = {ephemeral-storage} -> S empty -> 100
    n = node({"cpu": 32000, "memory": 128 * GI, "ephemeral-storage": GI, GPU: 8})
    assert sra(GPU).score(pod(ctr({"cpu": "1", "memory": "1Gi", GPU: "1"})), n) == 100


def test_sits_out_for_a_pod_asking_for_every_scarce_resource() -> None:
    # it would score 100 on every node: left out of the weighted mean, as a PreScore Skip
    gpu_pod = pod(ctr({"cpu": "1", GPU: "1"}))
    assert not sra(GPU).applies(gpu_pod)
    claim_pod = replace(pod(CPU_POD), claim_devices={GPU: (1, 500)})  # GPUs through a ResourceClaim
    assert not sra(GPU).applies(claim_pod)
    assert sra(GPU).applies(pod(CPU_POD))
    assert sra(GPU, "rdma/hca").applies(gpu_pod)  # asks for one scarce resource, not both
    profile = Profile([], [ScorePluginSpec(sra(GPU), 1), ScorePluginSpec(_Constant(40), 1)])
    n = node({"cpu": 32000, "memory": 128 * GI, GPU: 8})
    assert profile.score(gpu_pod, n).node_score == 40
    assert profile.score(pod(CPU_POD), n).node_score == 20  # (0 + 40) // 2


class _Constant:
    name = "Constant"

    def __init__(self, value: int) -> None:
        self.value = value

    def score(self, pod: object, node: object) -> int:
        return self.value

    def score_batch(self, pod: object, batch: object) -> None:
        return None


def test_scarce_requested_by_init_container_counts() -> None:
    n = node({"cpu": 32000, "memory": 128 * GI, GPU: 8})
    p = pod(CPU_POD, initContainers=[ctr({GPU: "1"})])
    assert sra(GPU).score(p, n) == 100


def test_node_without_scarce_resource_scores_100() -> None:
    n = node({"cpu": 32000, "memory": 128 * GI, "ephemeral-storage": GI})
    assert sra(GPU).score(pod(CPU_POD), n) == 100


def test_empty_difference_scores_100() -> None:
    # pod requests everything the node has -> D empty -> 100
    n = node({"cpu": 32000, "memory": 128 * GI})
    assert sra(GPU).score(pod(CPU_POD), n) == 100


def test_best_effort_pod_counts_cpu_and_memory() -> None:
    # P empty -> D = {cpu, memory, ephemeral-storage, gpu} (4), S = 1 -> 3 * 100 // 4 = 75
    n = node({"cpu": 32000, "memory": 128 * GI, "ephemeral-storage": GI, GPU: 8, "pods": 110})
    assert sra(GPU).score(pod(ctr()), n) == 75


def test_explicit_zero_request_is_not_requested() -> None:
    # cpu "0" is not in P -> D = {cpu, gpu}, S = 1 -> 1 * 100 // 2 = 50
    n = node({"cpu": 32000, "memory": 128 * GI, GPU: 8})
    assert sra(GPU).score(pod(ctr({"cpu": "0", "memory": "1Gi"})), n) == 50


def test_overhead_counts_as_requested() -> None:
    # best-effort containers but overhead cpu/memory -> P = {cpu, memory}; D = {gpu} -> 0
    # (ignoring overhead: D = {cpu, memory, gpu} -> 2 * 100 // 3 = 66)
    n = node({"cpu": 32000, "memory": 128 * GI, GPU: 8})
    p = pod(ctr(), overhead={"cpu": "100m", "memory": "64Mi"})
    assert sra(GPU).score(p, n) == 0


def test_two_scarce_types() -> None:
    scorer = sra(GPU, "rdma/hca")
    n = node({"cpu": 32000, "memory": 128 * GI, "ephemeral-storage": GI, GPU: 8, "rdma/hca": 1})
    # cpu pod: D = {ephemeral-storage, gpu, rdma/hca} (3), S = 2 -> 1 * 100 // 3 = 33
    assert scorer.score(pod(CPU_POD), n) == 33
    # gpu pod: D = {ephemeral-storage, rdma/hca} (2), S = 1 -> 1 * 100 // 2 = 50 (not shielded)
    assert scorer.score(pod(ctr({"cpu": "1", "memory": "1Gi", GPU: "1"})), n) == 50
    # both requested -> D = {ephemeral-storage}, S = 0 -> 100
    assert scorer.score(pod(ctr({"cpu": "1", GPU: "1", "rdma/hca": "1", "memory": "1"})), n) == 100


@pytest.mark.parametrize("scarce", ["NVIDIA.com/gpu", "nvidia.com", "nvidia.com/GPU", "gpu", "nvidia.com/gpu "])
def test_exact_case_sensitive_matching(scarce: str) -> None:
    n = node({"cpu": 32000, "memory": 128 * GI, GPU: 8})
    assert sra(scarce).score(pod(CPU_POD), n) == 100


def test_scarce_list_entry_not_on_node_is_harmless() -> None:
    # scarce {gpu, amd.com/gpu}; node has only nvidia gpu: D = {gpu, eph} S = 1 -> 50
    n = node({"cpu": 32000, "memory": 128 * GI, "ephemeral-storage": GI, GPU: 8})
    assert sra(GPU, "amd.com/gpu").score(pod(CPU_POD), n) == 50


# --------------------------------------------------------------------------- args validation


def test_args_parse_valid() -> None:
    args = ScarceResourceAvoidanceArgs.parse({"resources": [GPU, "rdma/hca"]})
    assert args.resources == frozenset({GPU, "rdma/hca"})


@pytest.mark.parametrize(
    ("raw", "prefix"),
    [
        ({"resources": []}, "args.resources"),
        ({}, "args.resources"),
        ({"resources": None}, "args.resources"),
        ({"resources": GPU}, "args.resources"),  # a bare string is not a list
        ({"resources": [GPU, GPU]}, "args.resources[1]"),
        ({"resources": ["a/b", GPU, "c/d", GPU]}, "args.resources[3]"),
        ({"resources": [""]}, "args.resources[0]"),
        ({"resources": [GPU, 7]}, "args.resources[1]"),
        ({"resources": [GPU], "weights": {}}, "args"),
        ([GPU], "args"),
        (None, "args"),
        ("nvidia.com/gpu", "args"),
    ],
)
def test_args_invalid(raw: Any, prefix: str) -> None:
    with pytest.raises(ArgsError) as info:
        ScarceResourceAvoidanceArgs.parse(raw)
    message = str(info.value)
    assert message.startswith(prefix + ":"), message


def test_duplicate_message_names_the_resource() -> None:
    with pytest.raises(ArgsError, match=r"nvidia\.com/gpu"):
        ScarceResourceAvoidanceArgs.parse({"resources": [GPU, GPU]})


def test_args_error_uses_given_path() -> None:
    with pytest.raises(ArgsError) as info:
        ScarceResourceAvoidanceArgs.parse({"resources": []}, "plugins[0].args")
    assert str(info.value).startswith("plugins[0].args.resources:")


def test_args_accept_any_mapping() -> None:
    from types import MappingProxyType

    args = ScarceResourceAvoidanceArgs.parse(MappingProxyType({"resources": (GPU,)}))
    assert args.resources == frozenset({GPU})
