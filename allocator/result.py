"""``status.allocation`` to and from JSON, and the devices an allocation holds.

``allocation_to_obj`` writes exactly what the API server stores (Go field names, unset optionals
omitted, ``devices`` always present as Go never omits a struct), so a claim read back after our
own write compares equal to what we meant to write.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any, NamedTuple

from allocator.nodeselector import node_selector_to_obj
from allocator.parse import _allocation, _Obj
from allocator.types import (
    AllocationResult,
    DeviceAllocationConfiguration,
    DeviceID,
    DeviceRequestAllocationResult,
    DeviceToleration,
    OpaqueDeviceConfiguration,
)
from k8s_semantics.quantity import parse_quantity

__all__ = ["AllocatedShare", "allocated_device_ids", "allocated_shares", "allocation_to_obj", "parse_allocation"]


def allocated_device_ids(allocation: AllocationResult) -> list[DeviceID]:
    """Devices the allocation takes whole from everyone else: every result except adminAccess ones
    and shares (results with a ``shareID``), as the scheduler's AllocatedDevices."""
    return [r.id for r in allocation.devices if not r.admin_access and r.share_id is None]


class AllocatedShare(NamedTuple):
    device: DeviceID
    share_id: str
    consumed: Mapping[str, Fraction] | None  # consumedCapacity, exact; None when the result has none


def allocated_shares(allocation: AllocationResult) -> list[AllocatedShare]:
    """The shares the allocation holds (AllocatedSharedDeviceIDs and AggregatedCapacity upstream):
    results with a ``shareID``, except adminAccess ones."""
    out = []
    for r in allocation.devices:
        if r.share_id is None or r.admin_access:
            continue
        consumed = None
        if r.consumed_capacity is not None:
            consumed = {name: parse_quantity(text) for name, text in r.consumed_capacity.items()}
        out.append(AllocatedShare(r.id, r.share_id, consumed))
    return out


def _toleration_to_obj(t: DeviceToleration) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if t.key:
        out["key"] = t.key
    if t.operator:
        out["operator"] = t.operator
    if t.value:
        out["value"] = t.value
    if t.effect:
        out["effect"] = t.effect
    if t.toleration_seconds is not None:
        out["tolerationSeconds"] = t.toleration_seconds
    return out


def _opaque_to_obj(opaque: OpaqueDeviceConfiguration) -> dict[str, Any]:
    return {"driver": opaque.driver, "parameters": opaque.parameters}


def _result_to_obj(r: DeviceRequestAllocationResult) -> dict[str, Any]:
    out: dict[str, Any] = {"request": r.request, "driver": r.driver, "pool": r.pool, "device": r.device}
    if r.admin_access is not None:
        out["adminAccess"] = r.admin_access
    if r.tolerations:
        out["tolerations"] = [_toleration_to_obj(t) for t in r.tolerations]
    if r.binding_conditions:
        out["bindingConditions"] = list(r.binding_conditions)
    if r.binding_failure_conditions:
        out["bindingFailureConditions"] = list(r.binding_failure_conditions)
    if r.share_id is not None:
        out["shareID"] = r.share_id
    if r.consumed_capacity:
        out["consumedCapacity"] = dict(r.consumed_capacity)
    return out


def _config_to_obj(c: DeviceAllocationConfiguration) -> dict[str, Any]:
    out: dict[str, Any] = {"source": c.source}
    if c.requests:
        out["requests"] = list(c.requests)
    if c.opaque is not None:
        out["opaque"] = _opaque_to_obj(c.opaque)
    return out


def allocation_to_obj(result: AllocationResult) -> dict[str, Any]:
    """The JSON for ``status.allocation``."""
    devices: dict[str, Any] = {}
    if result.devices:
        devices["results"] = [_result_to_obj(r) for r in result.devices]
    if result.config:
        devices["config"] = [_config_to_obj(c) for c in result.config]
    out: dict[str, Any] = {"devices": devices}
    if result.node_selector is not None:
        out["nodeSelector"] = node_selector_to_obj(result.node_selector)
    if result.allocation_timestamp is not None:
        out["allocationTimestamp"] = result.allocation_timestamp
    return out


def parse_allocation(obj: Mapping[str, Any]) -> AllocationResult:
    """``status.allocation`` JSON; errors name the field below the allocation."""
    return _allocation(_Obj("AllocationResult"), obj, "")
