"""Extended resources backed by DRA (DRAExtendedResource): what scoring counts of a DeviceClass with
``spec.extendedResourceName`` on a node.

* The class of a name: among the classes naming it, the newest (``creationTimestamp``), then the
  lowest name, as kube-scheduler's ExtendedResourceCache. Only explicit names count (not the
  implicit ``deviceclass.resource.kubernetes.io/<class>``).
* The class's devices on a node: the devices the allocator could consider there (usable pools,
  per-device node selection applied, devices this extender never allocates left out) that every
  selector of the class accepts; results are the SelectorCache's, memoised per device. A selector
  that fails to evaluate counts as not matching. Upstream's scorer (``calculateDRAResourceTotals``)
  counts every device of every slice for the node; incomplete, invalid or outdated pools are left
  out here because no claim can get their devices.
* A device's use, in milli-devices: held whole, 1000; held as shares (consumable capacity), the
  largest fraction of any capacity that the shares' ``consumedCapacity`` add up to, rounded up to a
  milli-device and at most 1000; shares that record no consumption (a device without capacities),
  1000. Upstream counts a device with any share as one whole device.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from fractions import Fraction

from allocator.cel import SelectorCache, SelectorError
from allocator.pools import Candidate, NodePools
from allocator.types import Device, DeviceClass
from scoring.framework import MILLI_DEVICES

__all__ = ["class_devices", "device_use", "extended_resource_classes"]


def extended_resource_classes(classes: Iterable[DeviceClass]) -> dict[str, DeviceClass]:
    """extendedResourceName -> the class that serves it."""
    out: dict[str, DeviceClass] = {}
    for device_class in classes:
        name = device_class.extended_resource_name
        if not name:
            continue
        current = out.get(name)
        if current is None or _newer(device_class, current):
            out[name] = device_class
    return out


def _newer(a: DeviceClass, b: DeviceClass) -> bool:
    if a.creation_timestamp != b.creation_timestamp:
        return a.creation_timestamp > b.creation_timestamp
    return a.name < b.name


def class_devices(pools: NodePools, device_class: DeviceClass, selectors: SelectorCache) -> list[Candidate]:
    """The devices of ``device_class`` on the node ``pools`` were gathered for, in search order."""
    expressions = [s.expression for s in device_class.selectors]
    if any(e is None for e in expressions):
        return []  # a selector kind this code does not know: the allocator refuses the class too
    out = []
    for index, candidate in enumerate(pools.candidates):
        if index in pools.off_node or candidate.device.unsupported:
            continue
        if _selected(candidate, expressions, selectors):
            out.append(candidate)
    return out


def _selected(candidate: Candidate, expressions: list[str | None], selectors: SelectorCache) -> bool:
    driver = candidate.id.driver
    for expression in expressions:
        assert expression is not None
        try:
            if not selectors.matches(expression, candidate.device, driver):
                return False
        except SelectorError:
            return False
    return True


def device_use(device: Device, whole: bool, shares: int, consumed: Mapping[str, Fraction] | None) -> int:
    """Milli-devices in use of ``device``: ``whole`` if held whole, else ``shares`` shares consuming
    ``consumed`` in total (None when none recorded any)."""
    if whole:
        return MILLI_DEVICES
    if shares == 0:
        return 0
    if not consumed or not device.capacity:
        return MILLI_DEVICES
    used = Fraction(0)
    for name, capacity in device.capacity.items():
        amount = consumed.get(name, Fraction(0))
        if amount <= 0:
            continue
        if capacity.value <= 0:
            return MILLI_DEVICES
        used = max(used, amount / capacity.value)
    return min(MILLI_DEVICES, math.ceil(used * MILLI_DEVICES))
