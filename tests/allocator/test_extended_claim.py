"""The special claim of extended resources served by DRA, derived by hand from upstream 1.36's
``createRequestsAndMappings`` and ``extended.DeviceClassMapping`` (dynamicresources plugin)."""

from __future__ import annotations

from typing import Any

import pytest

from allocator import (
    EXTENDED_RESOURCE_CLAIM_ANNOTATION,
    RequestMapping,
    claim_object,
    device_class_mapping,
    parse_device_class,
    parse_resource_claim,
    plan_extended_claim,
)
from scoring.resources import container_extended_requests, is_dra_extended_resource_name

GPU = "nvidia.com/gpu"


def container(name: str, restart: str | None = None, **requests: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": name,
        "resources": {"requests": {k.replace("_", "/"): v for k, v in requests.items()}},
    }
    if restart:
        out["restartPolicy"] = restart
    return out


def gpus(n: int, **more: str) -> dict[str, str]:
    return {"nvidia.com_gpu": str(n), **more}


def plan(spec: dict[str, Any], classes: dict[str, str] | None = None) -> Any:
    return plan_extended_claim(container_extended_requests(spec), classes or {GPU: "gpu"})


def test_names_follow_container_index_and_sorted_resource_position() -> None:
    # keys sorted: cpu, memory, nvidia.com/gpu -> the GPU is position 2 of container 0
    out = plan({"containers": [container("main", cpu="1", memory="1Gi", **gpus(2))]})
    assert out.requests == (("container-0-request-2", "gpu", 2),)
    assert out.mappings == (RequestMapping("main", GPU, "container-0-request-2"),)


def test_every_long_lived_container_gets_its_own_request() -> None:
    out = plan({"containers": [container("a", **gpus(1)), container("b", cpu="1"), container("c", **gpus(3))]})
    assert out.requests == (("container-0-request-0", "gpu", 1), ("container-2-request-0", "gpu", 3))
    assert [m.container_name for m in out.mappings] == ["a", "c"]


def test_an_init_container_reuses_the_devices_of_later_long_lived_containers() -> None:
    # init (index 0) needs 1; the regular container (index 1) has 2: no request of its own.
    out = plan({"initContainers": [container("setup", **gpus(1))], "containers": [container("main", **gpus(2))]})
    assert out.requests == (("container-1-request-0", "gpu", 2),)
    assert out.mappings == (
        RequestMapping("main", GPU, "container-1-request-0"),
        RequestMapping("setup", GPU, "container-1-request-0"),
    )


def test_an_init_container_asks_only_for_what_the_reused_devices_miss() -> None:
    out = plan({"initContainers": [container("setup", **gpus(3))], "containers": [container("main", **gpus(1))]})
    assert out.requests == (("container-0-request-0", "gpu", 2), ("container-1-request-0", "gpu", 1))
    assert out.mappings[1:] == (
        RequestMapping("setup", GPU, "container-1-request-0"),
        RequestMapping("setup", GPU, "container-0-request-0"),
    )


def test_only_the_largest_init_request_is_kept_and_the_others_map_to_it() -> None:
    spec = {"initContainers": [container("i0", **gpus(2)), container("i1", **gpus(3)), container("i2", **gpus(1))]}
    out = plan({**spec, "containers": [container("main", cpu="1")]})
    assert out.requests == (("container-1-request-0", "gpu", 3),)
    assert {m.container_name: m.request_name for m in out.mappings} == dict.fromkeys(
        ("i0", "i1", "i2"), "container-1-request-0"
    )


def test_a_sidecar_is_long_lived_and_is_reused_by_init_containers_after_it_only() -> None:
    spec = {
        "initContainers": [container("before", **gpus(1)), container("proxy", "Always", **gpus(1))],
        "containers": [container("main", cpu="1")],
    }
    out = plan(spec)
    # "before" (index 0) may reuse the sidecar at index 1, which covers it.
    assert out.requests == (("container-1-request-0", "gpu", 1),)
    assert RequestMapping("before", GPU, "container-1-request-0") in out.mappings


def test_resources_are_planned_in_name_order_and_requests_sorted_by_name() -> None:
    spec = {"containers": [container("main", **{"vendor.com_fpga": "1", **gpus(1)})]}
    out = plan(spec, {GPU: "gpu", "vendor.com/fpga": "fpga"})
    assert out.requests == (("container-0-request-0", "gpu", 1), ("container-0-request-1", "fpga", 1))
    assert [m.resource_name for m in out.mappings] == [GPU, "vendor.com/fpga"]


def test_resources_no_class_serves_and_zero_requests_are_left_out() -> None:
    assert plan({"containers": [container("main", **gpus(1))]}, {"other.com/x": "x"}) is None
    assert container_extended_requests({"containers": [container("main", cpu="2", **gpus(0))]}) == ()


def test_dra_capable_names() -> None:
    assert is_dra_extended_resource_name(GPU)
    assert is_dra_extended_resource_name("deviceclass.resource.kubernetes.io/gpu")
    assert not is_dra_extended_resource_name("cpu")
    assert not is_dra_extended_resource_name("kubernetes.io/batch")
    assert not is_dra_extended_resource_name("requests.nvidia.com/gpu")


def _class(name: str, resource: str | None, created: str) -> Any:
    spec: dict[str, Any] = {}
    if resource:
        spec["extendedResourceName"] = resource
    return parse_device_class(
        {"kind": "DeviceClass", "metadata": {"name": name, "creationTimestamp": created}, "spec": spec}
    )


def test_class_mapping_has_implicit_names_and_the_newest_explicit_one() -> None:
    classes = [_class("old", GPU, "2026-01-01T00:00:00Z"), _class("new", GPU, "2026-02-01T00:00:00Z")]
    mapping = device_class_mapping(classes)
    assert mapping[GPU] == "new"
    assert mapping["deviceclass.resource.kubernetes.io/old"] == "old"


@pytest.mark.parametrize("pod_name", ["p", "a" * 63])
def test_the_claim_object_is_owned_annotated_and_parses(pod_name: str) -> None:
    out = plan({"containers": [container("main", **gpus(2))]})
    obj = claim_object("ns", pod_name, "uid-1", out)
    assert obj["metadata"]["generateName"] == f"{pod_name}-extended-resources-"
    assert obj["metadata"]["annotations"] == {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"}
    assert obj["metadata"]["ownerReferences"][0] | {"controller": True} == obj["metadata"]["ownerReferences"][0]
    claim = parse_resource_claim({**obj, "metadata": {**obj["metadata"], "name": "x"}})
    assert claim.owner_pod_uid == "uid-1"
    request = claim.requests[0]
    assert request.exactly is not None and request.exactly.count == 2 and request.exactly.device_class_name == "gpu"
