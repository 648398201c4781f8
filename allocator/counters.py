"""Partitionable devices (DRAPartitionableDevices, beta in 1.36): shared counters.

A pool publishes counter sets (``spec.sharedCounters`` of slices that carry nothing else, in the
1.36 shape) and its devices name what they take from them (``consumesCounters``, by counter-set
name, possibly from a slice for another node or for no node at all). A device can be allocated
only while every counter it consumes has room, so a MIG-like partition and the whole GPU it is cut
from, which consume the same counters, block each other. As in kube-scheduler 1.36
(``allocateDevice`` / ``checkAvailableCounters``):

* available = the pool's counters minus what every *allocated* device of the pool consumes
  (devices of every slice of the pool's generation, whichever node they are for; allocated means
  held whole by a claim, in flight, or holding at least one share);
* a device taken by the search adds its consumption; the search fails the device if any counter of
  the pool would then be below zero (an over-committed pool therefore takes no counter-consuming
  device at all, as upstream);
* a device that allows multiple allocations consumes its counters once, for its first share.

Unlike upstream 1.36 the bookkeeping is exact: counters are taken back whenever the search drops
a device (upstream keeps them when a taint or constraint rejects the device after the counter
check, and for shared devices on backtracking), and pools are told apart by driver and name.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from allocator.types import Device, DeviceCounterConsumption, DeviceID

__all__ = ["CounterKey", "CounterUse", "PoolCounters", "is_allocated"]

CounterKey = tuple[str, str]  # (counter set, counter)


@dataclass(frozen=True, slots=True, eq=False)
class PoolCounters:
    """The counter sets of one gathered pool and every device of its generation that consumes them."""

    sets: Mapping[str, Mapping[str, Fraction]]
    consumers: tuple[tuple[DeviceID, Device], ...]

    def available(self, allocated: Callable[[DeviceID], bool]) -> dict[CounterKey, Fraction]:
        """Counters left after the devices ``allocated`` says are allocated (may go below zero)."""
        left = {(name, counter): value for name, counters in self.sets.items() for counter, value in counters.items()}
        for device_id, device in self.consumers:
            if allocated(device_id):
                for use in device.consumes_counters:
                    for counter, amount in use.counters.items():
                        key = (use.counter_set, counter)
                        if key in left:
                            left[key] -= amount
        return left


@dataclass(slots=True)
class CounterUse:
    """What one search has taken from each pool's counters, on top of the allocated baseline.

    ``baseline`` computes a pool's available counters once per allocator (the allocated state does
    not change during a filter request); ``take`` / ``give_back`` move one device's consumption.
    """

    baseline: Callable[[PoolCounters], Mapping[CounterKey, Fraction]]
    used: dict[int, dict[CounterKey, Fraction]] = field(default_factory=dict)

    def take(self, pool: PoolCounters, consumes: tuple[DeviceCounterConsumption, ...]) -> bool:
        """Add the device's consumption if every counter of the pool stays at or above zero."""
        available = self.baseline(pool)
        if any(value < 0 for value in available.values()):
            return False
        used = self.used.setdefault(id(pool), {})
        for use in consumes:
            for counter, amount in use.counters.items():
                key = (use.counter_set, counter)
                if used.get(key, 0) + amount > available.get(key, 0):
                    return False
        for use in consumes:
            for counter, amount in use.counters.items():
                key = (use.counter_set, counter)
                used[key] = used.get(key, 0) + amount
        return True

    def give_back(self, pool: PoolCounters, consumes: tuple[DeviceCounterConsumption, ...]) -> None:
        used = self.used[id(pool)]
        for use in consumes:
            for counter, amount in use.counters.items():
                key = (use.counter_set, counter)
                used[key] -= amount


def is_allocated(exclusive: Container[DeviceID], shared: Container[DeviceID]) -> Callable[[DeviceID], bool]:
    """upstream IsDeviceAllocated: held whole, or holding a share."""
    return lambda device: device in exclusive or device in shared
