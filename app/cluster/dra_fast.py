"""Free device capacity per node and DeviceClass, kept at cache-update time, so DynamicResources
can decide simple claims on every candidate node at once (numpy) instead of searching node by node.

A *simple* pod: one unallocated claim, no allocated ones, one ``exactly`` request of
``ExactCount`` devices of one class, no request selectors (the class's are memoised per device),
no admin access, no constraints. For such a request the allocator's search takes ``count``
*distinct* devices (a slot resumes after the previous device), each of which must be selectable,
not held whole, and able to take one more allocation of what the request consumes next to the
shares that exist (``allocator.capacity``). So the node passes iff at least ``count`` devices
qualify one by one, which is what ``DeviceTable.passing`` counts.

A node is decided here only when nothing else can matter there: no DeviceTaintRule anywhere, and
among the node's devices of the class no taints, binding conditions, shared counters,
per-device node selection or multi-term node selectors, and integral capacities below 2**53 (exact
in int64). Every other node, and every other pod, goes to the full allocator. The property test
``tests/app/test_dra_fast.py`` compares both on random slices, claims and allocations.

The table of a class is built on first use and dropped whenever slices, classes or node labels
change; allocations only update the rows of the devices that changed hands.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from allocator import REASON_CANNOT_ALLOCATE, REASON_INVALID_POOLS, DeviceClass, DeviceID, NodeRef, SelectorCache
from allocator.capacity import consumption
from allocator.cel import SelectorError
from allocator.pools import SliceIndex
from allocator.requests import Alternative
from allocator.types import Device

__all__ = ["DeviceTable", "FastDevices", "decide", "node_index", "simple_request"]

Held = tuple[bool, int, Mapping[str, Fraction] | None]  # as app.cluster.dra_extended.Held
_LIMIT = 2**53
IntArray = npt.NDArray[np.int64]


def _integral(value: Fraction) -> bool:
    return value.denominator == 1 and abs(value) < _LIMIT


@dataclass
class DeviceTable:
    """One DeviceClass over every known node: the class's devices as rows, their capacity and use."""

    nodes: dict[str, int]  # node name -> node index
    simple: npt.NDArray[np.bool_]  # per node: decided here
    reasons: list[str]  # distinct reasons a node fails for when too few devices qualify
    reason_of: npt.NDArray[np.intp]  # per node: index into reasons
    node_of: npt.NDArray[np.intp]  # per device: node index
    names: list[str]  # capacity names (columns)
    value: IntArray  # devices x capacities; 0 where the device lacks the capacity
    has: npt.NDArray[np.bool_]  # devices x capacities
    held_whole: npt.NDArray[np.bool_]
    used: IntArray  # devices x capacities: what existing shares consume
    devices: list[Device]
    rows: dict[DeviceID, int]
    _signatures: list[int] = field(default_factory=list)  # per device: index into _capacities
    _capacities: list[Device] = field(default_factory=list)  # one device per distinct capacity map
    _needs: dict[tuple[object, ...], tuple[npt.NDArray[np.bool_], IntArray]] = field(default_factory=dict)
    # ``counts`` per capacity key, kept up to date row by row: per device whether it qualifies, the
    # per-node counts, and the stamp of each device's use they were computed at (``update`` bumps it).
    _counted: dict[tuple[object, ...], tuple[npt.NDArray[np.bool_], IntArray, IntArray]] = field(default_factory=dict)
    _stamps: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    _stamp: int = 0

    def __post_init__(self) -> None:
        self._stamps = np.zeros(len(self.held_whole), dtype=np.int64)

    def need(self, alt: Alternative) -> tuple[npt.NDArray[np.bool_], IntArray]:
        """Per device whether it can serve ``alt``'s capacity requests at all, and what one
        allocation consumes per capacity; computed once per distinct capacity map and request."""
        found = self._needs.get(alt.capacity_key)
        if found is None:
            serves, need = [], []
            for device in self._capacities:
                consumed = consumption(device, alt.capacity)
                row = [0] * len(self.names)
                ok = consumed is not None
                if consumed is not None:
                    for name, amount in consumed.items():
                        if not _integral(amount.value):
                            raise _NotSimple
                        row[self.names.index(name)] = int(amount.value)
                serves.append(ok)
                need.append(row)
            by_signature = np.array(self._signatures, dtype=np.intp)
            signature_serves = np.array(serves, dtype=bool)
            signature_need = np.array(need, dtype=np.int64).reshape(len(need), len(self.names))
            found = (signature_serves[by_signature], signature_need[by_signature])
            self._needs[alt.capacity_key] = found
        return found

    def counts(self, alt: Alternative) -> IntArray:
        """Per node, how many devices could each take one allocation for ``alt`` (only the devices
        whose use changed since the last call for the same capacity requests are judged again)."""
        serves, need = self.need(alt)
        kept = self._counted.get(alt.capacity_key)
        if kept is None:
            ok = self._qualifies(serves, need, slice(None))
            counts: IntArray = np.bincount(self.node_of[ok], minlength=len(self.simple)).astype(np.int64)
            self._counted[alt.capacity_key] = (ok, counts, self._stamps.copy())
            return counts.copy()
        ok, counts, seen = kept
        changed = np.flatnonzero(seen != self._stamps)
        if changed.size:
            now = self._qualifies(serves, need, changed)
            np.add.at(counts, self.node_of[changed], now.astype(np.int64) - ok[changed])
            ok[changed] = now
            seen[changed] = self._stamps[changed]
        return counts.copy()

    def _qualifies(
        self, serves: npt.NDArray[np.bool_], need: IntArray, rows: slice | npt.NDArray[np.intp]
    ) -> npt.NDArray[np.bool_]:
        """Whether each device at ``rows`` can take one more allocation of ``need``."""
        fits = (np.where(self.has[rows], need[rows] + self.used[rows], 0) <= self.value[rows]).all(axis=1)
        qualifies: npt.NDArray[np.bool_] = serves[rows] & ~self.held_whole[rows] & fits
        return qualifies

    def update(self, device: DeviceID, held: Held) -> None:
        row = self.rows.get(device)
        if row is None:
            return
        whole, _, consumed = held
        self._stamp += 1
        self._stamps[row] = self._stamp
        self.held_whole[row] = whole
        used = self.used[row]
        used[:] = 0
        for name, amount in (consumed or {}).items():
            if name in self.names:
                used[self.names.index(name)] = int(amount)


class _NotSimple(Exception):
    """A request or device the table does not decide (the full allocator does)."""


def _node_devices(
    ref: NodeRef, slices: SliceIndex, device_class: DeviceClass, selectors: SelectorCache
) -> tuple[bool, str, list[tuple[DeviceID, Device]]]:
    """Whether the node is simple for the class, its failure reason, and the class's devices there."""
    pools = slices.pools_for(ref)
    reason = REASON_CANNOT_ALLOCATE
    if pools.has_invalid:
        reason = f"{REASON_INVALID_POOLS} ({', '.join(p.id for p in pools.unusable if p.invalid)})"
    if pools.counters or pools.off_node:
        return False, reason, []
    found = []
    expressions = [s.expression for s in device_class.selectors]
    if any(e is None for e in expressions):
        return False, reason, []
    for candidate in pools.candidates:
        device = candidate.device
        if device.unsupported:
            continue
        try:
            if not all(selectors.matches(e, device, candidate.id.driver) for e in expressions if e is not None):
                continue
        except SelectorError:
            return False, reason, []
        simple = (
            not device.taints
            and not device.binding_conditions
            and not device.consumes_counters
            and not candidate.selector_error
            and all(_integral(c.value) for c in device.capacity.values())
        )
        if not simple:
            return False, reason, []
        found.append((candidate.id, device))
    return True, reason, found


def build_table(
    refs: Mapping[str, NodeRef],
    slices: SliceIndex,
    device_class: DeviceClass,
    selectors: SelectorCache,
    holders: Callable[[DeviceID], Held],
) -> DeviceTable:
    nodes = {name: i for i, name in enumerate(refs)}
    simple = np.zeros(len(nodes), dtype=bool)
    reasons: dict[str, int] = {}
    reason_of = np.zeros(len(nodes), dtype=np.intp)
    rows: list[tuple[int, DeviceID, Device]] = []
    for i, ref in enumerate(refs.values()):
        ok, reason, devices = _node_devices(ref, slices, device_class, selectors)
        simple[i] = ok
        reason_of[i] = reasons.setdefault(reason, len(reasons))
        rows.extend((i, device_id, device) for device_id, device in devices)
    names = sorted({name for _, _, device in rows for name in device.capacity})
    signatures: dict[tuple[object, ...], int] = {}
    table = DeviceTable(
        nodes=nodes,
        simple=simple,
        reasons=list(reasons),
        reason_of=reason_of,
        node_of=np.array([i for i, _, _ in rows], dtype=np.intp),
        names=names,
        value=np.zeros((len(rows), len(names)), dtype=np.int64),
        has=np.zeros((len(rows), len(names)), dtype=bool),
        held_whole=np.zeros(len(rows), dtype=bool),
        used=np.zeros((len(rows), len(names)), dtype=np.int64),
        devices=[device for _, _, device in rows],
        rows={device_id: r for r, (_, device_id, _) in enumerate(rows)},
    )
    for r, (_, device_id, device) in enumerate(rows):
        for name, capacity in device.capacity.items():
            column = names.index(name)
            table.value[r, column] = int(capacity.value)
            table.has[r, column] = True
        signature = tuple(sorted(device.capacity.items()))
        index = signatures.get(signature)
        if index is None:
            index = signatures[signature] = len(table._capacities)
            table._capacities.append(device)
        table._signatures.append(index)
        table.update(device_id, holders(device_id))
    return table


@dataclass
class FastDevices:
    """The tables per DeviceClass name; ``DraState`` drops them on changes that can reorder or
    reselect devices and updates their rows when devices change hands."""

    tables: dict[str, DeviceTable] = field(default_factory=dict)

    def invalidate(self) -> None:
        self.tables.clear()

    def devices_changed(self, devices: Iterable[DeviceID], holders: Callable[[DeviceID], Held]) -> None:
        if not self.tables:
            return
        for device in set(devices):
            held = holders(device)
            for table in self.tables.values():
                table.update(device, held)

    def check(self, holders: Callable[[DeviceID], Held]) -> None:
        """Every table row as a fresh ``update`` would set it (tests and /debug?verify use it)."""
        for name, table in self.tables.items():
            for device, row in table.rows.items():
                whole, _, consumed = holders(device)
                used = [int((consumed or {}).get(capacity, 0)) for capacity in table.names]
                if bool(table.held_whole[row]) != whole or table.used[row].tolist() != used:
                    raise AssertionError(
                        f"fast table {name}: device {device} has whole={bool(table.held_whole[row])} "
                        f"used={table.used[row].tolist()}, want whole={whole} used={used}"
                    )

    def table(
        self,
        device_class: DeviceClass,
        refs: Mapping[str, NodeRef],
        slices: SliceIndex,
        selectors: SelectorCache,
        holders: Callable[[DeviceID], Held],
    ) -> DeviceTable:
        table = self.tables.get(device_class.name)
        if table is None:
            table = self.tables[device_class.name] = build_table(refs, slices, device_class, selectors, holders)
        return table


def simple_request(alt: Alternative) -> bool:
    """An ``exactly`` ExactCount request with only the class's selectors and no admin access."""
    return (
        not alt.all_devices
        and not alt.admin_access
        and alt.request == alt.result_name
        and len(alt.selectors) == len(alt.device_class.selectors)
    )


def node_index(table: DeviceTable, names: Sequence[str]) -> npt.NDArray[np.intp]:
    """Each name's node index in the table, -1 for a node DRA does not know."""
    return np.fromiter((table.nodes.get(n, -1) for n in names), dtype=np.intp, count=len(names))


def decide(
    table: DeviceTable, alt: Alternative, index: npt.NDArray[np.intp]
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_], npt.NDArray[np.intp]] | None:
    """For the nodes at ``index`` (``node_index``): whether decided here, whether each passes, and
    the index of its failure reason in ``table.reasons``; None when a capacity the request
    consumes is not simple (the full allocator decides every node)."""
    try:
        counts = table.counts(alt)
    except _NotSimple:
        return None
    known = index >= 0
    decided = np.zeros(len(index), dtype=bool)
    decided[known] = table.simple[index[known]]
    passes = np.zeros(len(index), dtype=bool)
    passes[decided] = counts[index[decided]] >= alt.count
    reason = np.zeros(len(index), dtype=np.intp)
    reason[known] = table.reason_of[index[known]]
    return decided, passes, reason
