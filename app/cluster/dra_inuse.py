"""What the allocator sees of devices in use, per pod (``DraState.allocated_view`` and
``shared_view``): devices held whole, and shares (consumable capacity), by claims' allocations and
by other pods' in-flight binds. A pod's own in-flight devices, and the claims that must not block it
(its leftover special claim), do not count against it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from allocator import AllocatedShare, AllocationResult, DeviceID, allocated_device_ids, allocated_shares

__all__ = [
    "AllocatedDevices",
    "Planned",
    "SharedAlso",
    "SharedView",
    "Shares",
    "TakenAlso",
    "add_shares",
    "drop_shares",
    "unwritten",
]

Shares = dict[DeviceID, dict[tuple[str, str], Mapping[str, Fraction] | None]]  # device -> (holder, shareID) -> consumed
# A device's holding: held whole, its shares, their summed consumedCapacity (``dra_extended.Held``)
HeldTotals = tuple[bool, int, Mapping[str, Fraction] | None]
DeviceShares = Mapping[tuple[str, str], Mapping[str, Fraction] | None]  # one device's: (holder, shareID) -> consumed


def add_shares(into: Shares, holder: str, shares: Iterable[AllocatedShare]) -> None:
    """Record ``holder``'s shares in ``into``."""
    for share in shares:
        into.setdefault(share.device, {})[(holder, share.share_id)] = share.consumed


def drop_shares(into: Shares, holder: str, shares: Iterable[AllocatedShare]) -> None:
    """Remove ``holder``'s shares from ``into`` (a device left with none goes)."""
    for share in shares:
        held = into.get(share.device)
        if held is None:
            continue
        held.pop((holder, share.share_id), None)
        if not held:
            del into[share.device]


def unwritten(inflight: DeviceShares | None, claimed: DeviceShares | None) -> DeviceShares | None:
    """A device's in-flight shares less those its claims already hold (same shareID): between a
    bind's claim write and the end of its in-flight entry, the share is one share, not two."""
    if not inflight or not claimed:
        return inflight
    written = {share_id for _, share_id in claimed}
    if all(share_id not in written for _, share_id in inflight):
        return inflight
    return {key: consumed for key, consumed in inflight.items() if key[1] not in written}


@dataclass(frozen=True, slots=True)
class AllocatedDevices:
    """The allocator's view of devices in use; a pod's own in-flight devices do not block it."""

    claimed: Mapping[DeviceID, str]
    inflight: Mapping[DeviceID, str]
    pod_uid: str
    own_claims: frozenset[str] = frozenset()  # claim keys that do not block this pod

    def __contains__(self, device: object) -> bool:
        claim = self.claimed.get(device)  # type: ignore[call-overload]
        if claim is not None and claim not in self.own_claims:
            return True
        owner = self.inflight.get(device)  # type: ignore[call-overload]
        return owner is not None and owner != self.pod_uid

    def __iter__(self) -> Iterator[Any]:
        yield from (d for d, claim in self.claimed.items() if claim not in self.own_claims)
        yield from (d for d, owner in self.inflight.items() if owner != self.pod_uid)


@dataclass(frozen=True, slots=True)
class Planned:
    """The devices a gang's plan gave the members placed on a node so far: held whole, and shares
    (consumed capacity). Not written anywhere yet: the allocator counts them for the next member."""

    whole: frozenset[DeviceID] = frozenset()
    shares: tuple[tuple[DeviceID, Mapping[str, Fraction]], ...] = ()

    def add(self, results: Iterable[AllocationResult]) -> Planned:
        whole, shares = set(self.whole), list(self.shares)
        for result in results:
            whole.update(allocated_device_ids(result))
            for share in allocated_shares(result):
                if share.consumed is None:  # a share recording no consumption holds its device whole
                    whole.add(share.device)
                else:
                    shares.append((share.device, share.consumed))
        return Planned(frozenset(whole), tuple(shares))


@dataclass(frozen=True, slots=True)
class SharedAlso:
    """Shares in use plus those a gang's plan gave earlier members (``Planned.shares``)."""

    base: SharedView
    extra: tuple[tuple[DeviceID, Mapping[str, Fraction]], ...]

    def __contains__(self, device: object) -> bool:
        return any(d == device for d, _ in self.extra) or device in self.base

    def __bool__(self) -> bool:
        return bool(self.extra) or bool(self.base)

    def consumed(self, device: DeviceID) -> Mapping[str, Fraction] | None:
        base = self.base.consumed(device)
        extra = [consumed for planned, consumed in self.extra if planned == device]
        if not extra:
            return base
        total = dict(base or {})
        for consumed in extra:
            for name, amount in consumed.items():
                total[name] = total.get(name, Fraction(0)) + amount
        return total


@dataclass(frozen=True, slots=True)
class TakenAlso:
    """Devices in use plus ``extra`` ones: what a gang's planner gave members placed before."""

    base: AllocatedDevices
    extra: frozenset[DeviceID]

    def __contains__(self, device: object) -> bool:
        return device in self.extra or device in self.base

    def __iter__(self) -> Iterator[Any]:
        yield from self.base
        yield from (d for d in self.extra if d not in self.base)


@dataclass(frozen=True, slots=True)
class SharedView:
    """The allocator's view of shares (``allocator.SharedDevices``): claims' shares plus other
    pods' in-flight ones; a pod's own in-flight shares do not count against it."""

    claimed: Shares
    inflight: Shares
    pod_uid: str
    own_claims: frozenset[str] = frozenset()  # claim keys whose shares do not count against this pod
    # How each device is held, counted as devices change hands (``DraState``): for a pod that holds
    # nothing itself, a device's shares and their sum, read instead of summed on every look.
    totals: Mapping[DeviceID, HeldTotals] | None = None

    def _claimed(self, device: object) -> Iterator[Mapping[str, Fraction] | None]:
        for (holder, _), consumed in (self.claimed.get(device) or {}).items():  # type: ignore[call-overload]
            if holder not in self.own_claims:
                yield consumed

    def _inflight_others(self, device: object) -> Iterator[Mapping[str, Fraction] | None]:
        inflight = unwritten(self.inflight.get(device), self.claimed.get(device))  # type: ignore[call-overload]
        for (holder, _), consumed in (inflight or {}).items():
            if holder != self.pod_uid:
                yield consumed

    def __contains__(self, device: object) -> bool:
        if self.totals is not None:
            found = self.totals.get(device)  # type: ignore[call-overload]
            return found is not None and found[1] > 0
        return any(True for _ in self._claimed(device)) or any(True for _ in self._inflight_others(device))

    def __bool__(self) -> bool:
        if self.claimed and not self.own_claims:  # a device is kept only while some share holds it
            return True
        return any(holder not in self.own_claims for held in self.claimed.values() for holder, _ in held) or any(
            holder != self.pod_uid for held in self.inflight.values() for holder, _ in held
        )

    def consumed(self, device: DeviceID) -> Mapping[str, Fraction] | None:
        if self.totals is not None:
            found = self.totals.get(device)
            return None if found is None else found[2]
        total: dict[str, Fraction] | None = None
        for consumed in [*self._claimed(device), *self._inflight_others(device)]:
            if consumed is None:
                continue
            if total is None:
                total = {}
            for name, amount in consumed.items():
                before = total.get(name)  # one share (the common case): no Fraction sum
                total[name] = amount if before is None else before + amount
        return total
