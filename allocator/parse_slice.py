"""resource.k8s.io/v1 ResourceSlices parsed from the API server's JSON into ``allocator.types`` (the
field reader and the rules are ``allocator.parse``'s; see there)."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from itertools import pairwise
from typing import Any

from allocator.parse import _metadata, _node_selector, _Obj, _priority
from allocator.types import (
    POOL_PRIORITY_ANNOTATION,
    PRIORITY_ANNOTATION,
    RESOURCE_SLICE_MAX_ATTRIBUTES_AND_CAPACITIES_PER_DEVICE,
    RESOURCE_SLICE_MAX_COUNTER_SETS,
    RESOURCE_SLICE_MAX_COUNTERS_PER_COUNTER_SET,
    RESOURCE_SLICE_MAX_COUNTERS_PER_DEVICE_COUNTER_CONSUMPTION,
    RESOURCE_SLICE_MAX_DEVICE_COUNTER_CONSUMPTIONS_PER_DEVICE,
    RESOURCE_SLICE_MAX_DEVICES,
    RESOURCE_SLICE_MAX_DEVICES_WITH_TAINTS_OR_CONSUMES_COUNTERS,
    Attribute,
    CapacityRequestPolicy,
    CapacityRequestPolicyRange,
    CounterSet,
    Device,
    DeviceCapacity,
    DeviceCounterConsumption,
    DeviceTaint,
    ResourcePool,
    ResourceSlice,
)

__all__ = ["parse_resource_slice"]


_ATTRIBUTE_KINDS = ("int", "bool", "string", "version", "ints", "bools", "strings", "versions")
# Kubernetes 1.36's limits (allocator.types), with the name of the upstream constant for messages.
_DEVICES = (RESOURCE_SLICE_MAX_DEVICES, "ResourceSliceMaxDevices")
_DEVICES_WITH_TAINTS_OR_COUNTERS = (
    RESOURCE_SLICE_MAX_DEVICES_WITH_TAINTS_OR_CONSUMES_COUNTERS,
    "ResourceSliceMaxDevicesWithTaintsOrConsumesCounters: a device has taints or consumesCounters",
)
_COUNTER_SETS = (RESOURCE_SLICE_MAX_COUNTER_SETS, "ResourceSliceMaxCounterSets")
_COUNTERS_PER_SET = (RESOURCE_SLICE_MAX_COUNTERS_PER_COUNTER_SET, "ResourceSliceMaxCountersPerCounterSet")
_CONSUMPTIONS = (
    RESOURCE_SLICE_MAX_DEVICE_COUNTER_CONSUMPTIONS_PER_DEVICE,
    "ResourceSliceMaxDeviceCounterConsumptionsPerDevice",
)
_COUNTERS_PER_CONSUMPTION = (
    RESOURCE_SLICE_MAX_COUNTERS_PER_DEVICE_COUNTER_CONSUMPTION,
    "ResourceSliceMaxCountersPerDeviceCounterConsumption",
)
_ATTRIBUTES_AND_CAPACITIES = (
    RESOURCE_SLICE_MAX_ATTRIBUTES_AND_CAPACITIES_PER_DEVICE,
    "ResourceSliceMaxAttributesAndCapacitiesPerDevice: attributes and capacity together",
)


def _attribute(o: _Obj, value: Any, path: str) -> Attribute:
    attr = o.obj(value, path)
    present = [kind for kind in _ATTRIBUTE_KINDS if attr.get(kind) is not None]
    if len(present) > 1:
        raise o.fail(path, f"must have exactly one value, has {', '.join(present)}")
    if not present:
        return Attribute("unknown", None)  # a future value type: the device is never allocated
    kind = present[0]
    raw = attr[kind]
    if kind == "int":
        return Attribute(kind, o.int64(raw, f"{path}.int"))
    if kind == "bool":
        if not isinstance(raw, bool):
            raise o.fail(f"{path}.bool", f"must be a boolean, not {type(raw).__name__}")
        return Attribute(kind, raw)
    if kind in ("string", "version"):
        if not isinstance(raw, str):
            raise o.fail(f"{path}.{kind}", f"must be a string, not {type(raw).__name__}")
        return Attribute(kind, raw)
    items = o.seq(raw, f"{path}.{kind}")
    if kind == "ints":
        return Attribute(kind, tuple(o.int64(v, f"{path}.ints[{i}]") for i, v in enumerate(items)))
    if kind == "bools":
        for i, v in enumerate(items):
            if not isinstance(v, bool):
                raise o.fail(f"{path}.bools[{i}]", f"must be a boolean, not {type(v).__name__}")
        return Attribute(kind, tuple(items))
    return Attribute(kind, o.strings(items, f"{path}.{kind}"))


def _counters(o: _Obj, value: Any, path: str, limit: tuple[int, str]) -> dict[str, Fraction]:
    """A counter map (``sharedCounters[].counters``, ``consumesCounters[].counters``): amounts are never negative."""
    out = {}
    counters = o.obj(value, path)
    o.at_most(len(counters), limit, path)
    for name, counter in counters.items():
        cp = f"{path}[{name!r}]"
        out[name] = o.scaled(o.obj(counter, cp).get("value"), f"{cp}.value", non_negative=True).value
    return out


def _request_policy(o: _Obj, value: Any, path: str) -> CapacityRequestPolicy | None:
    """``capacity[...].requestPolicy``. What the API server validates and the allocator's arithmetic
    needs (one kind of valid values, a ``min`` for a range, a positive step) is refused here."""
    if value is None:
        return None
    policy = o.obj(value, path)
    default = policy.get("default")
    values_raw = policy.get("validValues")
    range_raw = policy.get("validRange")
    if values_raw and range_raw is not None:
        raise o.fail(path, "must not set both validValues and validRange")
    valid_values = tuple(
        o.scaled(v, f"{path}.validValues[{i}]") for i, v in enumerate(o.seq(values_raw, f"{path}.validValues"))
    )
    if any(a.value >= b.value for a, b in pairwise(valid_values)):
        raise o.fail(f"{path}.validValues", "must be sorted in ascending order without duplicates")
    valid_range = None
    if range_raw is not None:
        rp = f"{path}.validRange"
        rng = o.obj(range_raw, rp)
        step = None if rng.get("step") is None else o.scaled(rng["step"], f"{rp}.step")
        if step is not None and step.value <= 0:
            raise o.fail(f"{rp}.step", f"must be positive, is {step.text}")
        valid_range = CapacityRequestPolicyRange(
            min=o.scaled(rng.get("min"), f"{rp}.min", non_negative=True),
            max=None if rng.get("max") is None else o.scaled(rng["max"], f"{rp}.max"),
            step=step,
        )
    return CapacityRequestPolicy(
        default=None if default is None else o.scaled(default, f"{path}.default", non_negative=True),
        valid_values=valid_values,
        valid_range=valid_range,
    )


_BINDING_CONDITIONS_MAX = 4  # resourceapi.BindingConditionsMaxSize / BindingFailureConditionsMaxSize


def _conditions(o: _Obj, d: Mapping[str, Any], key: str, path: str) -> tuple[str, ...]:
    """``bindingConditions`` / ``bindingFailureConditions``: at most 4 non-empty condition types."""
    found = o.strings(d.get(key), f"{path}.{key}")
    if len(found) > _BINDING_CONDITIONS_MAX:
        raise o.fail(f"{path}.{key}", f"must have at most {_BINDING_CONDITIONS_MAX} entries, has {len(found)}")
    for i, condition in enumerate(found):
        if not condition:
            raise o.fail(f"{path}.{key}[{i}]", "must be a non-empty condition type")
    return found


def _unsupported(attributes: Mapping[str, Attribute]) -> str:
    """Why a device needs a feature this extender does not implement ("" if none)."""
    for name, attr in attributes.items():
        if attr.kind not in ("int", "bool", "string", "version"):
            return f"attribute {name} has a {attr.kind} value (list attributes are not supported)"
    return ""


def _device(o: _Obj, item: Any, path: str) -> Device:
    d = o.obj(item, path)
    attributes = {
        name: _attribute(o, value, f"{path}.attributes[{name!r}]")
        for name, value in o.obj(d.get("attributes"), f"{path}.attributes").items()
    }
    capacity = {}
    for name, value in o.obj(d.get("capacity"), f"{path}.capacity").items():
        cp = f"{path}.capacity[{name!r}]"
        cap = o.obj(value, cp)
        total = o.scaled(cap.get("value"), f"{cp}.value", non_negative=True)
        capacity[name] = DeviceCapacity(
            total.value, total.text, _request_policy(o, cap.get("requestPolicy"), f"{cp}.requestPolicy")
        )
    o.at_most(len(attributes) + len(capacity), _ATTRIBUTES_AND_CAPACITIES, path)
    consumes = []
    for cp, c in o.objects(d.get("consumesCounters"), f"{path}.consumesCounters", _CONSUMPTIONS):
        consumes.append(
            DeviceCounterConsumption(
                o.text(c, "counterSet", cp, required=True),
                _counters(o, c.get("counters"), f"{cp}.counters", _COUNTERS_PER_CONSUMPTION),
            )
        )
    taints = []
    for tp, t in o.objects(d.get("taints"), f"{path}.taints"):
        taints.append(
            DeviceTaint(
                o.text(t, "key", tp, required=True),
                o.text(t, "effect", tp),
                o.text(t, "value", tp),
                o.opt_text(t, "timeAdded", tp),
            )
        )
    binding_conditions = _conditions(o, d, "bindingConditions", path)
    failure_conditions = _conditions(o, d, "bindingFailureConditions", path)
    multiple = bool(o.flag(d, "allowMultipleAllocations", path))
    return Device(
        name=o.text(d, "name", path, required=True),
        attributes=attributes,
        capacity=capacity,
        consumes_counters=tuple(consumes),
        taints=tuple(taints),
        binds_to_node=bool(o.flag(d, "bindsToNode", path)),
        binding_conditions=binding_conditions,
        binding_failure_conditions=failure_conditions,
        allow_multiple_allocations=multiple,
        node_name=o.text(d, "nodeName", path) or None,
        node_selector=_node_selector(o, d.get("nodeSelector"), f"{path}.nodeSelector"),
        all_nodes=bool(o.flag(d, "allNodes", path)),
        unsupported=_unsupported(attributes),
    )


def parse_resource_slice(obj: Mapping[str, Any]) -> ResourceSlice:
    """A resource.k8s.io/v1 ResourceSlice, with KEP-5773 priorities from the spec or the annotations."""
    o, meta = _metadata(obj, "ResourceSlice", namespaced=False)
    annotations = o.string_map(meta.get("annotations"), "metadata.annotations")
    spec = o.obj(obj.get("spec"), "spec")
    driver = o.text(spec, "driver", "spec", required=True)
    pool = o.obj(spec.get("pool"), "spec.pool")
    if not pool:
        raise o.fail("spec.pool", "required")
    generation = o.int64(pool.get("generation", 0), "spec.pool.generation")
    count = o.int64(pool.get("resourceSliceCount", 0), "spec.pool.resourceSliceCount")
    if count < 1:
        raise o.fail("spec.pool.resourceSliceCount", "must be >= 1")
    resource_pool = ResourcePool(
        name=o.text(pool, "name", "spec.pool", required=True),
        generation=generation,
        resource_slice_count=count,
        priority=_priority(o, pool.get("priority"), "spec.pool.priority", annotations, POOL_PRIORITY_ANNOTATION),
    )
    shared = []
    for cp, c in o.objects(spec.get("sharedCounters"), "spec.sharedCounters", _COUNTER_SETS):
        counters = _counters(o, c.get("counters"), f"{cp}.counters", _COUNTERS_PER_SET)
        shared.append(CounterSet(o.text(c, "name", cp, required=True), counters))
    items = o.seq(spec.get("devices"), "spec.devices", _DEVICES)
    devices = tuple(_device(o, item, f"spec.devices[{i}]") for i, item in enumerate(items))
    if any(d.taints or d.consumes_counters for d in devices):
        o.at_most(len(devices), _DEVICES_WITH_TAINTS_OR_COUNTERS, "spec.devices")
    return ResourceSlice(
        name=meta["name"],
        driver=driver,
        pool=resource_pool,
        priority=_priority(o, spec.get("priority"), "spec.priority", annotations, PRIORITY_ANNOTATION),
        node_name=o.text(spec, "nodeName", "spec") or None,
        node_selector=_node_selector(o, spec.get("nodeSelector"), "spec.nodeSelector"),
        all_nodes=bool(o.flag(spec, "allNodes", "spec")),
        per_device_node_selection=bool(o.flag(spec, "perDeviceNodeSelection", "spec")),
        devices=devices,
        shared_counters=tuple(shared),
        uid=o.text(meta, "uid", "metadata"),
        resource_version=o.text(meta, "resourceVersion", "metadata"),
    )
