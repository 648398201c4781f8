"""Small builders for the allocator tests: resource.k8s.io/v1 JSON in, parsed objects out.

Everything goes through the real parsers (``parse_*``), so the tests exercise the same path as
objects arriving from the API server.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Container, Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any

from allocator import (
    Allocated,
    Allocator,
    DeviceClass,
    DeviceID,
    NodeRef,
    ResourceClaim,
    ResourceSlice,
    SelectorCache,
    SliceIndex,
    Unschedulable,
    parse_device_class,
    parse_resource_claim,
    parse_resource_slice,
)
from allocator.capacity import NO_SHARES, SharedDevices
from allocator.taints import NO_TAINT_RULES, TaintRules
from k8s_semantics.quantity import parse_quantity

DRIVER = "gpu.example.com"
OTHER_DRIVER = "nic.example.com"
NODE = "node-1"


def device_class(name: str = DRIVER, *expressions: str, config: Sequence[Mapping[str, Any]] = ()) -> DeviceClass:
    """A DeviceClass; without expressions it selects every device of ``DRIVER``."""
    exprs = expressions or (f'device.driver == "{DRIVER}"',)
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": e}} for e in exprs]}
    if config:
        spec["config"] = [{"opaque": dict(c)} for c in config]
    return parse_device_class({"metadata": {"name": name}, "spec": spec})


def gpu(name: str, memory: str | None = None, **attributes: Any) -> dict[str, Any]:
    """A device dict: ``attributes`` as ``{"string": ...}`` / ``{"int": ...}`` / ``{"bool": ...}`` by Python type."""
    attrs: dict[str, Any] = {}
    for key, value in attributes.items():
        if isinstance(value, bool):
            attrs[key] = {"bool": value}
        elif isinstance(value, int):
            attrs[key] = {"int": value}
        elif isinstance(value, dict):
            attrs[key] = value
        else:
            attrs[key] = {"string": value}
    out: dict[str, Any] = {"name": name, "attributes": attrs}
    if memory is not None:
        out["capacity"] = {"memory": {"value": memory}}
    return out


def slice_obj(
    name: str,
    devices: Sequence[Mapping[str, Any]],
    *,
    node: str | None = NODE,
    pool: str | None = None,
    driver: str = DRIVER,
    generation: int = 1,
    count: int = 1,
    priority: int | None = None,
    pool_priority: int | None = None,
    spec_priority: int | None = None,
    spec_pool_priority: int | None = None,
    node_selector: Mapping[str, Any] | None = None,
    all_nodes: bool = False,
) -> dict[str, Any]:
    """A ResourceSlice dict. ``priority``/``pool_priority`` are annotations, ``spec_*`` the KEP-5773 fields.

    Node scope: ``node_selector`` or ``all_nodes`` if given, else ``nodeName: node``.
    """
    annotations: dict[str, str] = {}
    if priority is not None:
        annotations["dra.kube-gpu-extender.io/priority"] = str(priority)
    if pool_priority is not None:
        annotations["dra.kube-gpu-extender.io/pool-priority"] = str(pool_priority)
    pool_obj: dict[str, Any] = {"name": pool or node or name, "generation": generation, "resourceSliceCount": count}
    if spec_pool_priority is not None:
        pool_obj["priority"] = spec_pool_priority
    spec: dict[str, Any] = {"driver": driver, "pool": pool_obj, "devices": [dict(d) for d in devices]}
    if spec_priority is not None:
        spec["priority"] = spec_priority
    if node_selector is not None:
        spec["nodeSelector"] = dict(node_selector)
    elif all_nodes:
        spec["allNodes"] = True
    else:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "annotations": annotations}, "spec": spec}


def rslice(name: str, devices: Sequence[Mapping[str, Any]], **kwargs: Any) -> ResourceSlice:
    return parse_resource_slice(slice_obj(name, devices, **kwargs))


def labels_selector(key: str, *values: str, operator: str = "In") -> dict[str, Any]:
    """A one-term nodeSelector on a node label."""
    req: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        req["values"] = list(values)
    return {"nodeSelectorTerms": [{"matchExpressions": [req]}]}


def exactly(
    name: str = "gpu",
    *selectors: str,
    device_class_name: str = DRIVER,
    count: int | None = None,
    mode: str | None = None,
    admin_access: bool | None = None,
    tolerations: Sequence[Mapping[str, Any]] = (),
    capacity: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A request with ``exactly``."""
    ex: dict[str, Any] = {"deviceClassName": device_class_name}
    if selectors:
        ex["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    if count is not None:
        ex["count"] = count
    if mode is not None:
        ex["allocationMode"] = mode
    if admin_access is not None:
        ex["adminAccess"] = admin_access
    if tolerations:
        ex["tolerations"] = [dict(t) for t in tolerations]
    if capacity is not None:
        ex["capacity"] = {"requests": dict(capacity)}
    return {"name": name, "exactly": ex}


def sub(
    name: str,
    *selectors: str,
    device_class_name: str = DRIVER,
    count: int | None = None,
    mode: str | None = None,
    capacity: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """One ``firstAvailable`` subrequest."""
    out: dict[str, Any] = {"name": name, "deviceClassName": device_class_name}
    if capacity is not None:
        out["capacity"] = {"requests": dict(capacity)}
    if selectors:
        out["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    if count is not None:
        out["count"] = count
    if mode is not None:
        out["allocationMode"] = mode
    return out


def first_available(name: str, *subs: Mapping[str, Any]) -> dict[str, Any]:
    return {"name": name, "firstAvailable": [dict(s) for s in subs]}


def claim(
    name: str = "claim",
    *requests: Mapping[str, Any],
    constraints: Sequence[Mapping[str, Any]] = (),
    config: Sequence[Mapping[str, Any]] = (),
    namespace: str = "default",
) -> ResourceClaim:
    """A ResourceClaim; without requests it has one ``exactly`` request "gpu" for one device."""
    devices: dict[str, Any] = {"requests": [dict(r) for r in (requests or (exactly(),))]}
    if constraints:
        devices["constraints"] = [dict(c) for c in constraints]
    if config:
        devices["config"] = [dict(c) for c in config]
    return parse_resource_claim(
        {
            "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4()), "resourceVersion": "1"},
            "spec": {"devices": devices},
        }
    )


def memory_at_least(quantity: str, driver: str = DRIVER) -> str:
    return f'device.capacity["{driver}"].memory.compareTo(quantity("{quantity}")) >= 0'


def index(*slices: Mapping[str, Any] | ResourceSlice) -> SliceIndex:
    idx = SliceIndex()
    for s in slices:
        idx.upsert(s if isinstance(s, ResourceSlice) else parse_resource_slice(s))
    return idx


def allocate(
    slices: Iterable[Mapping[str, Any] | ResourceSlice],
    *claims: ResourceClaim,
    node: NodeRef | None = None,
    classes: Iterable[DeviceClass] | None = None,
    allocated: Container[DeviceID] = frozenset(),
    shared: SharedDevices = NO_SHARES,
    taint_rules: TaintRules = NO_TAINT_RULES,
    prefer: Sequence[DeviceID] = (),
) -> Allocated | Unschedulable:
    """One Allocate call on ``node`` (default ``NODE`` without labels) with the default class;
    ``prefer``: devices to try first among devices of equal rank.

    Share IDs are ``share-1``, ``share-2``... in the order the search hands them out."""
    ref = node or NodeRef(NODE)
    by_name = {c.name: c for c in (classes if classes is not None else [device_class()])}
    numbers = itertools.count(1)
    allocator = Allocator(
        by_name, allocated, SelectorCache(), shared, lambda: f"share-{next(numbers)}", taint_rules=taint_rules
    )
    return allocator.allocate(ref, index(*slices).pools_for(ref), claims, prefer)


class Shares:
    """A ``SharedDevices`` for tests: device -> summed consumption (quantity text per capacity)."""

    def __init__(self, consumed: Mapping[DeviceID, Mapping[str, str] | None]) -> None:
        self._consumed = {
            d: None if c is None else {k: parse_quantity(v) for k, v in c.items()} for d, c in consumed.items()
        }

    def __contains__(self, device: object) -> bool:
        return device in self._consumed

    def __bool__(self) -> bool:
        return bool(self._consumed)

    def consumed(self, device: DeviceID) -> Mapping[str, Fraction] | None:
        return self._consumed.get(device)


def shared_gpu(name: str, policies: Mapping[str, Mapping[str, Any]] | None = None, **capacity: str) -> dict[str, Any]:
    """A device that allows multiple allocations with these capacities (``policies``: requestPolicy by name)."""
    caps: dict[str, Any] = {}
    for key, value in capacity.items():
        caps[key] = {"value": value}
        if policies and key in policies:
            caps[key]["requestPolicy"] = dict(policies[key])
    return {"name": name, "allowMultipleAllocations": True, "capacity": caps}


def shares_of(outcome: Allocated | Unschedulable, claim_index: int = 0) -> list[tuple[str, str | None, dict[str, str]]]:
    """(device, shareID, consumedCapacity) per result of the claim."""
    assert isinstance(outcome, Allocated), outcome
    return [(r.device, r.share_id, dict(r.consumed_capacity or {})) for r in outcome.results[claim_index].devices]


def picked(outcome: Allocated | Unschedulable, claim_index: int = 0) -> list[str]:
    """The device names the claim got, in result order; fails the test if nothing was allocated."""
    assert isinstance(outcome, Allocated), outcome
    return [r.device for r in outcome.results[claim_index].devices]


def candidate_names(idx: SliceIndex, node: NodeRef | None = None) -> list[str]:
    """The node's candidate devices in search order, as ``pool/device``."""
    pools = idx.pools_for(node or NodeRef(NODE))
    return [f"{c.id.pool}/{c.id.device}" for c in pools.candidates]


# The KEP's example: GPUs from 1Gi up to 80Gi of memory (powers of two, then 80Gi).
KEP_SIZES = ["1Gi", "2Gi", "4Gi", "8Gi", "16Gi", "32Gi", "64Gi", "80Gi"]


def sized(*sizes: str) -> list[dict[str, Any]]:
    return [gpu(f"gpu-{s.lower()}", memory=s) for s in sizes]


def only(name: str) -> str:
    """A request selector accepting one device by name (the device name is its ``uuid`` attribute)."""
    return f'device.attributes["{DRIVER}"].uuid == "{name}"'


def named(*names: str, **attrs: Any) -> list[dict[str, Any]]:
    """Devices that carry their own name as an attribute, for ``only()``."""
    return [gpu(n, uuid=n, **attrs) for n in names]
