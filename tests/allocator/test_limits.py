"""Kubernetes 1.36's resource.k8s.io/v1 limits (staging/src/k8s.io/api/resource/v1/types.go): an
object beyond one is refused at parse time, naming the object, the field and the upstream constant;
an object exactly at the limit is accepted."""

from __future__ import annotations

from typing import Any

import pytest

from allocator import ParseError, parse_resource_claim, parse_resource_slice
from allocator.types import (
    ALLOCATION_RESULTS_MAX_SIZE,
    DEVICE_REQUESTS_MAX_SIZE,
    RESOURCE_SLICE_MAX_ATTRIBUTES_AND_CAPACITIES_PER_DEVICE,
    RESOURCE_SLICE_MAX_COUNTER_SETS,
    RESOURCE_SLICE_MAX_COUNTERS_PER_COUNTER_SET,
    RESOURCE_SLICE_MAX_COUNTERS_PER_DEVICE_COUNTER_CONSUMPTION,
    RESOURCE_SLICE_MAX_DEVICE_COUNTER_CONSUMPTIONS_PER_DEVICE,
    RESOURCE_SLICE_MAX_DEVICES,
    RESOURCE_SLICE_MAX_DEVICES_WITH_TAINTS_OR_CONSUMES_COUNTERS,
)
from tests.allocator.builders import exactly, slice_obj


def test_the_constants_are_upstreams() -> None:
    assert (ALLOCATION_RESULTS_MAX_SIZE, DEVICE_REQUESTS_MAX_SIZE) == (32, 32)
    assert (RESOURCE_SLICE_MAX_DEVICES, RESOURCE_SLICE_MAX_DEVICES_WITH_TAINTS_OR_CONSUMES_COUNTERS) == (128, 64)
    assert (RESOURCE_SLICE_MAX_COUNTER_SETS, RESOURCE_SLICE_MAX_COUNTERS_PER_COUNTER_SET) == (8, 32)
    assert RESOURCE_SLICE_MAX_DEVICE_COUNTER_CONSUMPTIONS_PER_DEVICE == 2
    assert RESOURCE_SLICE_MAX_COUNTERS_PER_DEVICE_COUNTER_CONSUMPTION == 32
    assert RESOURCE_SLICE_MAX_ATTRIBUTES_AND_CAPACITIES_PER_DEVICE == 32


def _devices(count: int, **extra: Any) -> list[dict[str, Any]]:
    return [{"name": f"d{i}", **extra} for i in range(count)]


def _counters(count: int) -> dict[str, Any]:
    return {f"c{i}": {"value": "1"} for i in range(count)}


def _counter_slice(sets: list[dict[str, Any]]) -> dict[str, Any]:
    obj = slice_obj("counters", [])
    del obj["spec"]["devices"]
    obj["spec"]["sharedCounters"] = sets
    return obj


def _refused(obj: dict[str, Any], field: str, constant: str) -> None:
    with pytest.raises(ParseError) as err:
        parse_resource_slice(obj)
    message = str(err.value)
    assert message.startswith(f"ResourceSlice {obj['metadata']['name']}: {field}: must have at most"), message
    assert constant in message


def test_devices_per_slice() -> None:
    assert len(parse_resource_slice(slice_obj("s", _devices(128))).devices) == 128
    _refused(slice_obj("s", _devices(129)), "spec.devices", "ResourceSliceMaxDevices")


def test_devices_per_slice_with_taints_or_counters() -> None:
    consumes = [{"counterSet": "gpu", "counters": {"memory": {"value": "1Gi"}}}]
    taints = [{"key": "k", "effect": "NoSchedule"}]
    plain = _devices(65)
    for extra in ({"consumesCounters": consumes}, {"taints": taints}):
        assert parse_resource_slice(slice_obj("s", [*_devices(63), {"name": "x", **extra}]))
        _refused(slice_obj("s", [*plain[:64], {"name": "x", **extra}]), "spec.devices", "TaintsOrConsumesCounters")


def test_counter_sets_and_counters_per_slice() -> None:
    assert parse_resource_slice(_counter_slice([{"name": f"s{i}", "counters": _counters(32)} for i in range(8)]))
    _refused(
        _counter_slice([{"name": f"s{i}", "counters": _counters(1)} for i in range(9)]),
        "spec.sharedCounters",
        "ResourceSliceMaxCounterSets",
    )
    _refused(
        _counter_slice([{"name": "s", "counters": _counters(33)}]),
        "spec.sharedCounters[0].counters",
        "ResourceSliceMaxCountersPerCounterSet",
    )


def test_counter_consumptions_per_device() -> None:
    def consumes(sets: int, counters: int) -> list[dict[str, Any]]:
        return [{"counterSet": f"s{i}", "counters": _counters(counters)} for i in range(sets)]

    assert parse_resource_slice(slice_obj("s", [{"name": "d", "consumesCounters": consumes(2, 32)}]))
    _refused(
        slice_obj("s", [{"name": "d", "consumesCounters": consumes(3, 1)}]),
        "spec.devices[0].consumesCounters",
        "ResourceSliceMaxDeviceCounterConsumptionsPerDevice",
    )
    _refused(
        slice_obj("s", [{"name": "d", "consumesCounters": consumes(1, 33)}]),
        "spec.devices[0].consumesCounters[0].counters",
        "ResourceSliceMaxCountersPerDeviceCounterConsumption",
    )


def test_attributes_and_capacities_per_device() -> None:
    def device(attributes: int, capacities: int) -> dict[str, Any]:
        return {
            "name": "d",
            "attributes": {f"a{i}": {"int": i} for i in range(attributes)},
            "capacity": {f"c{i}": {"value": "1"} for i in range(capacities)},
        }

    assert parse_resource_slice(slice_obj("s", [device(20, 12)]))
    _refused(slice_obj("s", [device(20, 13)]), "spec.devices[0]", "ResourceSliceMaxAttributesAndCapacitiesPerDevice")


def _claim(requests: int) -> dict[str, Any]:
    meta = {"name": "c", "namespace": "default", "uid": "u", "resourceVersion": "1"}
    return {"metadata": meta, "spec": {"devices": {"requests": [exactly(f"r{i}") for i in range(requests)]}}}


def _allocated(results: int) -> dict[str, Any]:
    obj = _claim(1)
    obj["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "r0", "driver": "gpu.example.com", "pool": "p", "device": f"d{i}"}
                    for i in range(results)
                ]
            }
        }
    }
    return obj


def test_results_and_requests_per_claim() -> None:
    assert parse_resource_claim(_allocated(32)).allocation is not None
    with pytest.raises(ParseError, match=r"^ResourceClaim default/c: status\.allocation\.devices\.results: .*32.*"):
        parse_resource_claim(_allocated(33))
    with pytest.raises(ParseError, match=r"spec\.devices\.requests: must have at most 32 entries \(DeviceRequests"):
        parse_resource_claim(_claim(33))
    assert len(parse_resource_claim(_claim(32)).requests) == 32
