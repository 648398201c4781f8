"""Consumable capacity (DRAConsumableCapacity, beta in 1.36): what one allocation of a device consumes.

A device with ``allowMultipleAllocations: true`` can be allocated to many requests; each allocation
is a *share* with its own ``shareID`` and ``consumedCapacity``, and the shares of a device never
consume more than its capacity. The rules, as kube-scheduler 1.36's allocator applies them
(``structured/internal/incubating/consumable_capacity.go``), for every capacity of the device:

* consumed = the request's ``capacity.requests[name]`` rounded by the capacity's ``requestPolicy``;
  a capacity the request does not name consumes the policy's ``default``, or all of it without one;
* rounding: ``validRange``: below ``min`` -> ``min``; with ``step`` -> ``min + n*step``, the first
  at or above the request, in whole units (``Quantity.Value()``, rounded up, as upstream);
  ``validValues``: the first value at or above the request (unchanged if none is);
* refused: a consumption above ``validRange.max``, off the step grid, or not one of the
  ``validValues`` - unless it equals ``default``; a request naming a capacity the device lacks;
* fit: consumed + what existing shares consume + what this search already gave other shares
  <= capacity value.

The check filters *every* candidate, shared or not (a request for 40Gi skips a 24Gi GPU), but only
devices that allow multiple allocations record consumedCapacity and a shareID. Names are matched
exactly as published (1.36 does not resolve a bare name against ``<driver>/name``).
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Protocol

from allocator.types import CapacityRequestPolicy, Device, DeviceID, ScaledQuantity
from k8s_semantics.quantity import ceil_value

__all__ = [
    "NO_SHARES",
    "Consumption",
    "SharedDevices",
    "consumption",
    "fits",
    "format_binary_si",
]

Consumption = dict[str, ScaledQuantity]  # capacity name -> what one share consumes


class SharedDevices(Protocol):
    """Shares held outside the search (claims' allocations, other pods' in-flight ones)."""

    def __contains__(self, device: object) -> bool:
        """Whether the device has at least one share (it then consumes its counters once)."""
        ...

    def __bool__(self) -> bool:
        """Whether any device has a share at all (lets the search skip every lookup when not)."""
        ...

    def consumed(self, device: DeviceID) -> Mapping[str, Fraction] | None:
        """The summed ``consumedCapacity`` of the device's shares; None if none recorded any."""
        ...


class _NoShares:
    def __contains__(self, device: object) -> bool:
        return False

    def __bool__(self) -> bool:
        return False

    def consumed(self, device: DeviceID) -> Mapping[str, Fraction] | None:
        return None


NO_SHARES: SharedDevices = _NoShares()

_BINARY_SUFFIXES = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_DECIMAL_SUFFIXES = ("", "k", "M", "G", "T", "P", "E")


def format_binary_si(value: int) -> str:
    """``resource.NewQuantity(value, BinarySI).String()``: ``2Gi``, ``1536Mi``, ``1k`` (below 1024 decimal)."""
    if -1024 < value < 1024:
        mantissa, exponent = value, 0
        while mantissa and mantissa % 1000 == 0 and exponent < len(_DECIMAL_SUFFIXES) - 1:
            mantissa, exponent = mantissa // 1000, exponent + 1
        return f"{mantissa}{_DECIMAL_SUFFIXES[exponent]}"
    mantissa, exponent = value, 0
    while mantissa % 1024 == 0 and exponent < len(_BINARY_SUFFIXES) - 1:
        mantissa, exponent = mantissa // 1024, exponent + 1
    return f"{mantissa}{_BINARY_SUFFIXES[exponent]}"


def _round_up(requested: ScaledQuantity, policy: CapacityRequestPolicy) -> ScaledQuantity:
    """upstream calculateConsumedCapacity for an explicit request."""
    rng = policy.valid_range
    if rng is not None:
        if requested.value < rng.min.value:
            return rng.min
        if rng.step is None:
            return requested
        # Whole units, each rounded up, as Quantity.Value() does upstream.
        start, step = ceil_value(rng.min.value), ceil_value(rng.step.value)
        steps = -(-(ceil_value(requested.value) - start) // step)
        rounded = start + step * steps
        return ScaledQuantity(Fraction(rounded), format_binary_si(rounded))
    for valid in policy.valid_values:
        if requested.value <= valid.value:
            return valid
    return requested


def _violates(consumed: ScaledQuantity, policy: CapacityRequestPolicy) -> bool:
    """upstream violatesPolicy (``default`` is always acceptable; compared by value here)."""
    if policy.default is not None and consumed.value == policy.default.value:
        return False
    rng = policy.valid_range
    if rng is not None:
        if rng.max is not None and consumed.value > rng.max.value:
            return True
        if rng.step is not None:
            offset = ceil_value(consumed.value) - ceil_value(rng.min.value)
            return offset % ceil_value(rng.step.value) != 0
        return False
    if policy.valid_values:
        return all(consumed.value != valid.value for valid in policy.valid_values)
    return False


def consumption(device: Device, requests: Mapping[str, ScaledQuantity] | None) -> Consumption | None:
    """What one allocation of ``device`` for a request with these ``capacity.requests`` consumes, per
    capacity of the device; None if the device cannot serve the request at all (it lacks a requested
    capacity, or its request policy refuses the amount). Static: memoise per device and request."""
    if requests:
        for name in requests:
            if name not in device.capacity:
                return None
    out: Consumption = {}
    for name, capacity in device.capacity.items():
        requested = requests.get(name) if requests else None
        policy = capacity.request_policy
        if requested is None:
            if policy is not None and policy.default is not None:
                consumed = policy.default
            else:
                consumed = ScaledQuantity(capacity.value, capacity.text)
        elif policy is None:
            consumed = requested
        else:
            consumed = _round_up(requested, policy)
        if policy is not None and _violates(consumed, policy):
            return None
        out[name] = consumed
    return out


def fits(
    device: Device,
    consumed: Consumption,
    existing: Mapping[str, Fraction] | None,
    allocating: Mapping[str, Fraction] | None,
) -> bool:
    """Whether a share consuming ``consumed`` fits next to the ``existing`` shares and the ones the
    search is ``allocating``: per capacity, the sum stays within the device's value."""
    for name, capacity in device.capacity.items():
        total = consumed[name].value
        if existing:
            total += existing.get(name, 0)
        if allocating:
            total += allocating.get(name, 0)
        if total > capacity.value:
            return False
    return True
