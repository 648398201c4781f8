"""Pod request aggregation: k8s component-helpers PodRequests (KEP-753 sidecars, overhead, pod-level).

Units: cpu in millicores (MilliValue, ceil), everything else via Value() (ceil).
Non-zero defaults (pkg/scheduler/util): 100 millicores, 200Mi = 209715200 bytes, per container with
the key *absent*.
"""

from __future__ import annotations

import pytest

from k8s_semantics.quantity import QuantityError
from scoring.resources import (
    DEFAULT_MEMORY_REQUEST,
    DEFAULT_MILLI_CPU_REQUEST,
    is_scalar_resource_name,
    is_scored_resource_name,
    parse_resource_list,
    pod_resources,
)
from tests.scoring.builders import ctr

GI = 2**30
MI = 2**20
DEF_MEM = 200 * MI  # 209715200


def test_default_constants() -> None:
    assert DEFAULT_MILLI_CPU_REQUEST == 100
    assert DEFAULT_MEMORY_REQUEST == 209_715_200


# --------------------------------------------------------------------------- resource names


@pytest.mark.parametrize(
    "name",
    [
        "nvidia.com/gpu",
        "example.com/foo",
        "rdma/hca",
        "hugepages-1Gi",
        "hugepages-2Mi",
        "kubernetes.io/batch-cpu",  # prefixed native
        "kubernetes.io/batch-memory",
        "attachable-volumes-aws-ebs",
    ],
)
def test_scalar_resource_names(name: str) -> None:
    assert is_scalar_resource_name(name)
    assert is_scored_resource_name(name)


@pytest.mark.parametrize("name", ["cpu", "memory", "ephemeral-storage", "pods", "requests.foo/bar", "foo"])
def test_not_scalar_resource_names(name: str) -> None:
    assert not is_scalar_resource_name(name)


@pytest.mark.parametrize(
    ("name", "scored"),
    [
        ("cpu", True),
        ("memory", True),
        ("ephemeral-storage", True),
        ("pods", False),
        ("requests.foo/bar", False),
        ("storage", False),
        ("nvidia.com/gpu", True),
    ],
)
def test_scored_resource_names(name: str, scored: bool) -> None:
    assert is_scored_resource_name(name) is scored


# --------------------------------------------------------------------------- parse_resource_list


def test_parse_resource_list_units() -> None:
    parsed = parse_resource_list({"cpu": "1500m", "memory": "1m", "nvidia.com/gpu": "2", "pods": "110"})
    assert parsed == {"cpu": 1500, "memory": 1, "nvidia.com/gpu": 2, "pods": 110}


def test_parse_resource_list_empty() -> None:
    assert parse_resource_list(None) == {}
    assert parse_resource_list({}) == {}


def test_parse_resource_list_error_names_field_and_resource() -> None:
    with pytest.raises(QuantityError, match=r"^spec\.overhead\[cpu\]"):
        parse_resource_list({"cpu": "1K"}, "spec.overhead")


def test_pod_resources_invalid_quantity_names_container() -> None:
    spec = {"containers": [ctr({"cpu": "NaN"}, name="main")]}
    with pytest.raises(QuantityError, match=r"container 'main' requests\[cpu\]"):
        pod_resources(spec)


# --------------------------------------------------------------------------- aggregation


def test_containers_are_summed() -> None:
    spec = {
        "containers": [
            ctr({"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}),
            ctr({"cpu": "250m", "memory": "512Mi", "nvidia.com/gpu": "2"}),
        ]
    }
    pr = pod_resources(spec)
    assert pr.requests == {"cpu": 1250, "memory": GI + 512 * MI, "nvidia.com/gpu": 3}
    assert pr.non_zero_cpu == 1250
    assert pr.non_zero_memory == GI + 512 * MI


def test_init_containers_by_max() -> None:
    # containers: cpu 1000, mem 1Gi.  init: cpu 2000 mem 256Mi, then cpu 500 mem 2Gi.
    # cpu = max(1000, 2000, 500) = 2000; memory = max(1Gi, 256Mi, 2Gi) = 2Gi (not a sum of inits)
    spec = {
        "containers": [ctr({"cpu": "1", "memory": "1Gi"})],
        "initContainers": [ctr({"cpu": "2", "memory": "256Mi"}), ctr({"cpu": "500m", "memory": "2Gi"})],
    }
    pr = pod_resources(spec)
    assert pr.requests == {"cpu": 2000, "memory": 2 * GI}


def test_init_container_only_resource_counts() -> None:
    # a resource only an init container asks for is still requested (max(absent, 1) = 1)
    spec = {
        "containers": [ctr({"cpu": "1"})],
        "initContainers": [ctr({"nvidia.com/gpu": "1"})],
    }
    pr = pod_resources(spec)
    assert pr.requests == {"cpu": 1000, "nvidia.com/gpu": 1}
    assert pr.requested_names == frozenset({"cpu", "nvidia.com/gpu"})


def test_sidecars_are_added_to_the_running_sum() -> None:
    # sidecar 500m runs for the whole pod lifetime: 1000 + 500 = 1500
    spec = {
        "containers": [ctr({"cpu": "1"})],
        "initContainers": [ctr({"cpu": "500m"}, sidecar=True)],
    }
    assert pod_resources(spec).requests == {"cpu": 1500}


def test_regular_init_after_sidecar_includes_preceding_sidecars() -> None:
    # KEP-753:
    #   containers             : 1000
    #   s1 sidecar 500         : sum 1500, sidecars 500, effective 500
    #   i1 regular 2000        : effective 2000 + 500 = 2500
    #   s2 sidecar 300         : sum 1800, sidecars 800, effective 800
    #   i2 regular 1000        : effective 1000 + 800 = 1800
    #   result = max(1800, 500, 2500, 800, 1800) = 2500
    # (Koordinator's own loop would give max(1800, 2000, 1000) = 2000; a naive sum of all 4800.)
    spec = {
        "containers": [ctr({"cpu": "1"})],
        "initContainers": [
            ctr({"cpu": "500m"}, name="s1", sidecar=True),
            ctr({"cpu": "2"}, name="i1"),
            ctr({"cpu": "300m"}, name="s2", sidecar=True),
            ctr({"cpu": "1"}, name="i2"),
        ],
    }
    assert pod_resources(spec).requests == {"cpu": 2500}


def test_regular_init_before_sidecar_does_not_include_it() -> None:
    # i0 regular 2000 (no sidecar started yet): effective 2000
    # s sidecar 1000: sum = 1500 + 1000 = 2500
    # result = max(2500, 2000, 1000) = 2500
    spec = {
        "containers": [ctr({"cpu": "1500m"})],
        "initContainers": [ctr({"cpu": "2"}, name="i0"), ctr({"cpu": "1"}, name="s", sidecar=True)],
    }
    assert pod_resources(spec).requests == {"cpu": 2500}


def test_init_with_sidecar_extended_resource() -> None:
    # sidecar gpu 1; regular init after it asks gpu 2 -> effective 3; containers gpu 1 + sidecar 1 = 2
    # result = max(2, 1, 3) = 3
    spec = {
        "containers": [ctr({"nvidia.com/gpu": "1"})],
        "initContainers": [
            ctr({"nvidia.com/gpu": "1"}, name="s", sidecar=True),
            ctr({"nvidia.com/gpu": "2"}, name="i"),
        ],
    }
    assert pod_resources(spec).requests == {"nvidia.com/gpu": 3}


def test_restart_policy_other_than_always_is_a_regular_init() -> None:
    spec = {
        "containers": [ctr({"cpu": "1"})],
        "initContainers": [{"name": "i", "restartPolicy": "Never", "resources": {"requests": {"cpu": "500m"}}}],
    }
    # max(1000, 500) = 1000 (not 1500)
    assert pod_resources(spec).requests == {"cpu": 1000}


def test_overhead_is_added() -> None:
    # cpu 1000 + 250 = 1250; memory 1Gi + 120Mi
    spec = {
        "containers": [ctr({"cpu": "1", "memory": "1Gi"})],
        "overhead": {"cpu": "250m", "memory": "120Mi"},
    }
    pr = pod_resources(spec)
    assert pr.requests == {"cpu": 1250, "memory": GI + 120 * MI}
    assert pr.non_zero_cpu == 1250
    assert pr.non_zero_memory == GI + 120 * MI


def test_overhead_added_after_init_max() -> None:
    # max(containers 1000, init 3000) = 3000, then + 100 overhead = 3100
    spec = {
        "containers": [ctr({"cpu": "1"})],
        "initContainers": [ctr({"cpu": "3"})],
        "overhead": {"cpu": "100m"},
    }
    assert pod_resources(spec).requests == {"cpu": 3100}


def test_overhead_makes_best_effort_pod_request() -> None:
    spec = {"containers": [ctr()], "overhead": {"cpu": "100m", "memory": "64Mi"}}
    pr = pod_resources(spec)
    assert pr.requests == {"cpu": 100, "memory": 64 * MI}
    assert pr.requested_names == frozenset({"cpu", "memory"})
    # non-zero: container default 100m / 200Mi, plus overhead
    assert pr.non_zero_cpu == 100 + 100
    assert pr.non_zero_memory == DEF_MEM + 64 * MI


def test_pod_level_requests_replace_cpu_memory_aggregate() -> None:
    # pod-level cpu 2, memory 1Gi replace container sums 500m / (absent); no defaults apply to them
    spec = {
        "resources": {"requests": {"cpu": "2", "memory": "1Gi"}},
        "containers": [ctr({"cpu": "500m", "nvidia.com/gpu": "1"}), ctr()],
    }
    pr = pod_resources(spec)
    assert pr.requests == {"cpu": 2000, "memory": GI, "nvidia.com/gpu": 1}
    assert pr.non_zero_cpu == 2000  # not 500 + 100
    assert pr.non_zero_memory == GI  # not 2 * 200Mi


def test_pod_level_requests_only_for_cpu_and_memory() -> None:
    # example.com/foo at pod level is not a supported pod-level resource: containers' 1 stays
    spec = {
        "resources": {"requests": {"cpu": "3", "example.com/foo": "5"}},
        "containers": [ctr({"cpu": "1", "memory": "1Gi", "example.com/foo": "1"})],
    }
    assert pod_resources(spec).requests == {"cpu": 3000, "memory": GI, "example.com/foo": 1}


def test_pod_level_cpu_only_leaves_memory_from_containers() -> None:
    spec = {
        "resources": {"requests": {"cpu": "4"}},
        "containers": [ctr({"cpu": "1", "memory": "1Gi"}), ctr({"cpu": "1"})],
    }
    pr = pod_resources(spec)
    assert pr.requests == {"cpu": 4000, "memory": GI}
    assert pr.non_zero_cpu == 4000
    assert pr.non_zero_memory == GI + DEF_MEM  # second container has no memory -> 200Mi


def test_pod_level_then_overhead() -> None:
    # pod-level 2000 replaces containers' 1000, then overhead 100 is added: 2100
    spec = {
        "resources": {"requests": {"cpu": "2"}},
        "containers": [ctr({"cpu": "1"})],
        "overhead": {"cpu": "100m"},
    }
    assert pod_resources(spec).requests == {"cpu": 2100}


def test_non_zero_defaults_per_container() -> None:
    # c1: cpu 1, memory 1Gi; c2: memory 1Gi, no cpu -> non-zero cpu = 1000 + 100
    spec = {"containers": [ctr({"cpu": "1", "memory": "1Gi"}), ctr({"memory": "1Gi"})]}
    pr = pod_resources(spec)
    assert pr.requests == {"cpu": 1000, "memory": 2 * GI}  # no defaults in requests
    assert pr.non_zero_cpu == 1100
    assert pr.non_zero_memory == 2 * GI
    assert pr.amount("cpu") == 1100
    assert pr.amount("memory") == 2 * GI


def test_best_effort_pod() -> None:
    spec = {"containers": [ctr(), ctr({})]}
    pr = pod_resources(spec)
    assert pr.requests == {}
    assert pr.requested_names == frozenset()
    assert pr.non_zero_cpu == 200  # 2 containers * 100m
    assert pr.non_zero_memory == 2 * DEF_MEM


def test_explicit_zero_cpu_is_set_and_not_requested() -> None:
    spec = {"containers": [ctr({"cpu": "0", "memory": "1Gi"})]}
    pr = pod_resources(spec)
    assert pr.requests == {"cpu": 0, "memory": GI}
    assert pr.non_zero_cpu == 0  # an explicit 0 is "set": no 100m default
    assert pr.requested_names == frozenset({"memory"})
    assert pr.amount("cpu") == 0


def test_non_zero_defaults_apply_to_init_containers_and_sidecars() -> None:
    # containers: cpu 50m. init (regular, no cpu) -> effective 100 (default); result max(50, 100) = 100
    spec = {"containers": [ctr({"cpu": "50m"})], "initContainers": [ctr({"memory": "1Mi"})]}
    pr = pod_resources(spec)
    assert pr.requests == {"cpu": 50, "memory": MI}
    assert pr.non_zero_cpu == 100
    # memory: container default 200Mi vs init 1Mi -> 200Mi
    assert pr.non_zero_memory == DEF_MEM

    # sidecar without cpu adds its 100m default to the running sum: 1000 + 100
    spec = {"containers": [ctr({"cpu": "1"})], "initContainers": [ctr({"memory": "1Mi"}, sidecar=True)]}
    pr = pod_resources(spec)
    assert pr.requests == {"cpu": 1000, "memory": MI}
    assert pr.non_zero_cpu == 1100
    assert pr.non_zero_memory == DEF_MEM + MI


def test_requested_names_excludes_pods_zero_and_unscored() -> None:
    spec = {
        "containers": [
            ctr(
                {
                    "cpu": "1",
                    "memory": "0",
                    "pods": "1",
                    "nvidia.com/gpu": "0",
                    "hugepages-2Mi": "4Mi",
                    "example.com/foo": "1",
                    "kubernetes.io/batch-cpu": "500",
                    "requests.foo/bar": "1",
                    "ephemeral-storage": "1Gi",
                }
            )
        ]
    }
    pr = pod_resources(spec)
    assert pr.requested_names == frozenset(
        {"cpu", "hugepages-2Mi", "example.com/foo", "kubernetes.io/batch-cpu", "ephemeral-storage"}
    )
    assert pr.amount("hugepages-2Mi") == 4 * MI
    assert pr.amount("kubernetes.io/batch-cpu") == 500
    assert pr.amount("nvidia.com/gpu") == 0
    assert pr.amount("not-there") == 0


def test_aggregate_rounds_once_not_per_container() -> None:
    # PodRequests adds exact Quantities, then MilliValue()/Value() rounds the total once:
    # cpu 0.0001 + 0.0001 = 0.0002 cores = 0.2m -> ceil 1m (rounding each container first gives 2m)
    spec = {"containers": [ctr({"cpu": "0.0001"}), ctr({"cpu": "100u"})]}
    pr = pod_resources(spec)
    assert pr.requests["cpu"] == 1
    assert pr.non_zero_cpu == 1
    # memory "1m" + "1m" = 0.002 bytes -> Value() 1
    spec = {"containers": [ctr({"memory": "1m"}), ctr({"memory": "1m"})]}
    assert pod_resources(spec).requests["memory"] == 1


def test_missing_containers_key() -> None:
    pr = pod_resources({})
    assert pr.requests == {}
    assert pr.non_zero_cpu == 0
    assert pr.non_zero_memory == 0


def test_aggregate_rounds_after_init_max_and_overhead() -> None:
    # exact: containers 0.4m + 0.4m = 0.8m; init 0.9m -> max 0.9m -> ceil 1m
    # (rounding per container first: 1 + 1 = 2 vs init 1 -> 2)
    spec = {"containers": [ctr({"cpu": "400u"}), ctr({"cpu": "400u"})], "initContainers": [ctr({"cpu": "900u"})]}
    assert pod_resources(spec).requests["cpu"] == 1
    # exact: container 0.5m + overhead 0.5m = 1m -> 1 (per-part rounding would give 2)
    spec = {"containers": [ctr({"cpu": "500u"})], "overhead": {"cpu": "500u"}}
    assert pod_resources(spec).requests["cpu"] == 1
    # memory: 0.5 + 0.5 bytes = 1 byte -> 1
    spec = {"containers": [ctr({"memory": "500m"}), ctr({"memory": "500m"})]}
    assert pod_resources(spec).requests["memory"] == 1


def test_limits_default_missing_requests_like_the_api_server() -> None:
    container = {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2", "cpu": "2"}, "requests": {"cpu": "500m"}}}
    resources = pod_resources({"containers": [container]})
    assert resources.requests == {"cpu": 500, "nvidia.com/gpu": 2}  # the explicit cpu request wins
    assert resources.non_zero_cpu == 500
