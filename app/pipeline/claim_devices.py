"""What a pod's ResourceClaims ask of an extended resource, for the scoring plugins that place a pod
on a node's devices (``PodInfo.claim_devices``, read by ``scoring.devices``).

A pod whose GPUs come from its own claims requests no ``nvidia.com/gpu`` in its containers, so the
score plugins would see a CPU-only pod. Per unallocated claim and ``exactly`` request (the first
alternative of a ``firstAvailable`` one) whose DeviceClass serves an extended resource
(``extendedResourceName``), with ``ExactCount``: ``count`` devices, each taking what one allocation
consumes of a device of the class, as the largest fraction of any of its capacities, rounded up to
a milli-device (the rule of ``allocator.extended.device_use``); a request without capacity requests
(or on devices without capacities) takes whole devices. Over the class's devices the largest such
share is used (devices of one class are normally alike). ``All`` requests are left out.
"""

from __future__ import annotations

from allocator import AllocationError
from allocator.capacity import consumption
from allocator.requests import Alternative, claim_requests
from app.cluster.dra import DraState
from scoring.framework import MILLI_DEVICES, PodInfo

__all__ = ["ClaimDevices"]


class ClaimDevices:
    def __init__(self, state: DraState) -> None:
        self.state = state
        self._share: dict[tuple[str, tuple[object, ...]], tuple[object, int]] = {}

    def with_claim_devices(self, pod: PodInfo) -> PodInfo:
        """``pod`` with ``claim_devices`` set from its unallocated claims (unchanged without any)."""
        if not pod.claims or not self.state.extended.classes:
            return pod
        resource_of = {cls.name: resource for resource, cls in self.state.extended.classes.items()}
        demand: dict[str, tuple[int, int]] = {}
        for ref in pod.claims:
            claim = self.state.claims.get(f"{pod.namespace}/{ref.claim}")
            if claim is None or claim.allocation is not None:
                continue
            try:
                requests = claim_requests(claim, self.state.classes, self.state.selectors)
            except AllocationError:
                continue
            for alternatives in requests:
                alt = alternatives[0]
                resource = resource_of.get(alt.device_class.name)
                if resource is None or alt.all_devices or alt.count <= 0:
                    continue
                count, milli = demand.get(resource, (0, 0))
                demand[resource] = (count + alt.count, max(milli, self._milli(alt)))
        return pod.with_claim_devices(demand) if demand else pod

    def _milli(self, alt: Alternative) -> int:
        """Milli-devices one allocation for ``alt`` takes of a device of its class (the largest)."""
        if not alt.capacity:
            return MILLI_DEVICES
        state = self.state
        table = state.fast.table(alt.device_class, state.node_refs, state.slices, state.selectors, state.holders)
        key = (alt.device_class.name, alt.capacity_key)
        found = self._share.get(key)
        if found is not None and found[0] is table:
            return found[1]
        largest = 0
        seen: set[int] = set()
        for device in table.devices:
            if id(device.capacity) in seen:
                continue
            seen.add(id(device.capacity))
            consumed = consumption(device, alt.capacity)
            if consumed is None:
                continue
            for name, amount in consumed.items():
                capacity = device.capacity[name].value
                if capacity <= 0:
                    largest = MILLI_DEVICES
                    continue
                largest = max(largest, -(-amount.value * MILLI_DEVICES // capacity))
        milli = min(MILLI_DEVICES, int(largest)) if largest > 0 else MILLI_DEVICES
        self._share[key] = (table, milli)
        return milli
