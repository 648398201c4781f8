"""Per node, the extended resources that DRA devices serve there (DeviceClasses with
``extendedResourceName``), kept at cache-update time for scoring.

``DraState`` tells this index which nodes may have changed (slices, classes, node labels) and
which devices changed hands (claims, in-flight binds); only those nodes are counted again. The
counting rules are ``allocator.extended``'s. A device counted for a node is remembered with it, so
an allocation of that device recounts exactly the nodes that see it.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from allocator import DeviceClass, DeviceID, NodePools, NodeRef, SelectorCache, SliceIndex
from allocator.extended import class_devices, device_use, extended_resource_classes
from allocator.pools import Candidate
from app.cluster.index import reindex
from scoring.framework import MILLI_DEVICES

__all__ = ["FREE", "Amounts", "Devices", "ExtendedResources", "Held", "held"]

Amounts = Mapping[str, tuple[int, int]]  # extended resource -> (allocatable, in use), in milli-devices
Devices = Mapping[str, tuple[int, ...]]  # extended resource -> milli-devices in use per device, in search order
Held = tuple[bool, int, Mapping[str, Fraction] | None]  # held whole, shares, their summed consumedCapacity
Holders = Callable[[DeviceID], Held]
FREE: Held = (False, 0, None)  # what ``held`` says of a device nobody holds


def held(
    device: DeviceID,
    whole: Iterable[Container[DeviceID]],
    shares: Iterable[Mapping[tuple[str, str], Mapping[str, Fraction] | None] | None],
) -> Held:
    """How ``device`` is held: whole by any of ``whole``, and the shares of ``shares`` (per holder
    map, holder -> consumedCapacity) with what they consume together."""
    taken = any(device in holders for holders in whole)
    count = 0
    consumed: dict[str, Fraction] | None = None
    for by_holder in shares:
        for amounts in (by_holder or {}).values():
            count += 1
            if amounts is not None:
                consumed = consumed if consumed is not None else {}
                for name, amount in amounts.items():
                    before = consumed.get(name)  # one share (the common case): no Fraction sum
                    consumed[name] = amount if before is None else before + amount
    return taken, count, consumed


@dataclass
class ExtendedResources:
    """Extended-resource amounts per node; empty while no class has an ``extendedResourceName``."""

    classes: dict[str, DeviceClass] = field(default_factory=dict)  # extended resource -> its class
    by_node: dict[str, Amounts] = field(default_factory=dict)
    devices_by_node: dict[str, Devices] = field(default_factory=dict)  # the per-device view of by_node
    _devices: dict[str, tuple[DeviceID, ...]] = field(default_factory=dict)  # node -> devices counted there
    _nodes_of: dict[DeviceID, set[str]] = field(default_factory=dict)
    _use: dict[DeviceID, int] = field(default_factory=dict)  # a counted device's use, until it changes hands
    # (node, resource) -> the pools and class the devices were selected from, and the devices: an
    # allocation recounts the node without selecting again
    _selected: dict[tuple[str, str], tuple[NodePools, DeviceClass, list[Candidate]]] = field(default_factory=dict)

    def amounts(self, node: str) -> Amounts | None:
        return self.by_node.get(node)

    def devices(self, node: str) -> Devices | None:
        return self.devices_by_node.get(node)

    def device_ids(self, node: str, resource: str) -> tuple[DeviceID, ...]:
        """The devices counted as ``resource`` on ``node``, in the order of ``devices``."""
        memo = self._selected.get((node, resource))
        return () if memo is None else tuple(candidate.id for candidate in memo[2])

    def set_classes(self, classes: Iterable[DeviceClass]) -> bool:
        """Take the classes as they are now; True if which class serves which name changed."""
        found = extended_resource_classes(classes)
        if found == self.classes:
            return False
        self.classes = found
        return True

    def nodes_of(self, devices: Iterable[DeviceID]) -> set[str]:
        """The nodes that count any of ``devices``."""
        out: set[str] = set()
        for device in devices:
            out |= self._nodes_of.get(device, set())
        return out

    def count(
        self,
        nodes: Iterable[str],
        refs: Mapping[str, NodeRef],
        slices: SliceIndex,
        selectors: SelectorCache,
        holders: Holders,
        moved: Container[DeviceID] | None = None,
    ) -> list[str]:
        """Count ``nodes`` again; returns those whose amounts changed. With ``moved`` (the devices that
        changed hands, nothing else changed), only those devices' use is worked out again."""
        changed = []
        for node in nodes:
            ref = refs.get(node)
            amounts: dict[str, tuple[int, int]] = {}
            uses: dict[str, tuple[int, ...]] = {}
            devices: tuple[DeviceID, ...] = ()
            if ref is not None and self.classes:
                amounts, uses, devices = self._count(ref, slices, selectors, holders, moved)
            self._register(node, devices)
            if amounts:
                if self.by_node.get(node) != amounts or self.devices_by_node.get(node) != uses:
                    self.by_node[node] = amounts
                    self.devices_by_node[node] = uses
                    changed.append(node)
            elif self.by_node.pop(node, None) is not None:
                self.devices_by_node.pop(node, None)
                changed.append(node)
        return changed

    def check(
        self,
        classes: Iterable[DeviceClass],
        refs: Mapping[str, NodeRef],
        slices: SliceIndex,
        selectors: SelectorCache,
        holders: Holders,
    ) -> None:
        """Count every node from scratch and compare (tests and /debug?verify use it)."""
        fresh = ExtendedResources()
        if fresh.set_classes(classes):
            fresh.count(refs, refs, slices, selectors, holders)
        if fresh.by_node != self.by_node or fresh.devices_by_node != self.devices_by_node:
            raise AssertionError(f"extended resources drifted: have {self.by_node}, want {fresh.by_node}")

    def _count(
        self,
        ref: NodeRef,
        slices: SliceIndex,
        selectors: SelectorCache,
        holders: Holders,
        moved: Container[DeviceID] | None,
    ) -> tuple[dict[str, tuple[int, int]], dict[str, tuple[int, ...]], tuple[DeviceID, ...]]:
        pools = slices.pools_for(ref)
        if not pools.candidates:
            return {}, {}, ()
        amounts: dict[str, tuple[int, int]] = {}
        per_device: dict[str, tuple[int, ...]] = {}
        devices: list[DeviceID] = []
        for resource, device_class in self.classes.items():
            memo = self._selected.get((ref.name, resource))
            if memo is not None and memo[0] is pools and memo[1] is device_class:
                found = memo[2]
            else:
                found = class_devices(pools, device_class, selectors)
                self._selected[(ref.name, resource)] = (pools, device_class, found)
            if not found:
                continue
            used: list[int] = []
            uses = self._use
            for candidate in found:
                device = candidate.id
                use = uses.get(device) if moved is not None and device not in moved else None
                if use is None:
                    use = uses[device] = device_use(candidate.device, *holders(device))
                used.append(use)
                devices.append(device)
            amounts[resource] = (len(found) * MILLI_DEVICES, sum(used))
            per_device[resource] = tuple(used)  # search order: what the allocator tries first comes first
        return amounts, per_device, tuple(devices)

    def _register(self, node: str, devices: tuple[DeviceID, ...]) -> None:
        old = self._devices.pop(node, ())
        if devices:
            self._devices[node] = devices
        if old != devices:
            reindex(self._nodes_of, node, old, devices)
