"""Binding conditions (DRADeviceBindingConditions, beta in Kubernetes 1.36): is an allocated claim
ready for its pod to be bound?

A device may publish ``bindingConditions`` (and ``bindingFailureConditions``); the allocation
copies them into its results, and the pod may be bound only once the claim's ``status.devices``
entry for that device (matched by driver, pool and device, as upstream's
``getAllocatedDeviceStatus``) has every binding condition ``True``. A ``True`` failure condition
means binding failed. Upstream ``isClaimReadyForBinding`` reads the failure conditions first, and
only for results that have binding conditions; so does ``binding_state``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from allocator.types import AllocatedDeviceStatus, DeviceRequestAllocationResult, ResourceClaim

__all__ = ["BindingState", "binding_state", "has_binding_conditions", "pods_binding_state"]


@dataclass(frozen=True, slots=True)
class BindingState:
    """``failed`` (why binding failed) wins over ``pending`` (what is not True yet); neither: ready."""

    failed: str = ""
    pending: tuple[str, ...] = ()  # "<claim>: <driver>/<pool>/<device> <condition>"

    @property
    def ready(self) -> bool:
        return not self.failed and not self.pending


READY = BindingState()


def has_binding_conditions(claim: ResourceClaim) -> bool:
    return claim.allocation is not None and any(r.binding_conditions for r in claim.allocation.results)


def _status(claim: ResourceClaim, result: DeviceRequestAllocationResult) -> AllocatedDeviceStatus | None:
    for status in claim.device_statuses:
        if (status.driver, status.pool, status.device) == (result.driver, result.pool, result.device):
            return status
    return None


def binding_state(claim: ResourceClaim) -> BindingState:
    """Whether every device of the claim's allocation that has binding conditions is ready.

    A claim without an allocation is not ready (upstream: "false, nil").
    """
    if claim.allocation is None:
        return BindingState(pending=(f"{claim.key}: not allocated",))
    pending: list[str] = []
    for result in claim.allocation.results:
        if not result.binding_conditions:
            continue
        where = f"{claim.key}: {result.driver}/{result.pool}/{result.device}"
        status = _status(claim, result)
        if status is None:
            pending.extend(f"{where} {c}" for c in result.binding_conditions)
            continue
        for kind in result.binding_failure_conditions:
            found = status.condition(kind)
            if found is not None and found.status == "True":
                why = f"reason={found.reason!r}, message={found.message!r}"
                return BindingState(failed=f"{where}: binding failed: {kind} is True ({why})")
        for kind in result.binding_conditions:
            found = status.condition(kind)
            if found is None or found.status != "True":
                pending.append(f"{where} {kind}")
    return BindingState(pending=tuple(pending)) if pending else READY


def pods_binding_state(claims: Iterable[ResourceClaim]) -> BindingState:
    """All of a pod's claims (upstream ``isPodReadyForBinding``): the first failure, else every pending condition."""
    pending: list[str] = []
    for claim in claims:
        state = binding_state(claim)
        if state.failed:
            return state
        pending.extend(state.pending)
    return BindingState(pending=tuple(pending)) if pending else READY
