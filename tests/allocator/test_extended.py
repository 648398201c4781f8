"""allocator.extended: which class serves an extended resource, and a device's use in milli-devices.

Upstream rules: ExtendedResourceCache ``betterDeviceClass`` (newest creationTimestamp, then the
lower name); noderesources ``calculateDRAResourceTotals`` (devices of the class on the node).
"""

from __future__ import annotations

from fractions import Fraction

from allocator import parse_device_class
from allocator.extended import device_use, extended_resource_classes
from allocator.types import Device, DeviceCapacity


def _class(name: str, resource: str | None, created: str = "") -> object:
    spec = {} if resource is None else {"extendedResourceName": resource}
    meta = {"name": name, **({"creationTimestamp": created} if created else {})}
    return parse_device_class({"kind": "DeviceClass", "metadata": meta, "spec": spec})


def test_the_newest_class_then_the_lowest_name_serves_a_resource() -> None:
    classes = [
        _class("b", "example.com/gpu", "2025-01-01T00:00:00Z"),
        _class("a", "example.com/gpu", "2025-01-01T00:00:00Z"),
        _class("old", "example.com/gpu", "2024-01-01T00:00:00Z"),
        _class("nic", "example.com/nic"),
        _class("plain", None),
    ]
    found = extended_resource_classes(classes)  # type: ignore[arg-type]
    assert {name: c.name for name, c in found.items()} == {"example.com/gpu": "a", "example.com/nic": "nic"}
    newer = _class("z", "example.com/gpu", "2026-01-01T00:00:00Z")
    assert extended_resource_classes([*classes, newer])["example.com/gpu"].name == "z"  # type: ignore[list-item]


def _device(**capacity: int) -> Device:
    return Device("d", capacity={k: DeviceCapacity(Fraction(v), str(v)) for k, v in capacity.items()})


def test_device_use() -> None:
    gpu = _device(memory=40, cores=100)
    assert device_use(gpu, True, 0, None) == 1000  # held whole
    assert device_use(gpu, False, 0, None) == 0  # free
    assert device_use(gpu, False, 2, {"memory": Fraction(10)}) == 250
    assert device_use(gpu, False, 2, {"memory": Fraction(10), "cores": Fraction(30)}) == 300  # the tighter capacity
    assert device_use(gpu, False, 1, {"memory": Fraction(40, 3)}) == 334  # rounded up
    assert device_use(gpu, False, 3, {"memory": Fraction(50)}) == 1000  # never above one device
    assert device_use(gpu, False, 1, None) == 1000  # a share that records no consumption
    assert device_use(_device(), False, 1, {}) == 1000  # a device without capacities
    assert device_use(_device(memory=0), False, 1, {"memory": Fraction(1)}) == 1000
