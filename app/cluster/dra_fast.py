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
from allocator.requests import Alternative
from allocator.slice_index import SliceIndex
from allocator.types import Device
from scoring.row_lookup import RowLookup

__all__ = [
    "DeviceTable",
    "FastDevices",
    "Selection",
    "decide",
    "own_selectors",
    "select",
    "select_at",
    "simple_request",
]

Held = tuple[bool, int, Mapping[str, Fraction] | None]  # as app.cluster.dra_extended.Held
_LIMIT = 2**53
_LOG_MIN = 4096  # changes kept for ``DeviceTable.counts`` at least (more on tables with more devices)
_FEW = 32
_ONE_BY_ONE = 4  # changed rows judged one by one (pure Python) up to this many
IntArray = npt.NDArray[np.int64]


def _integral(value: Fraction) -> bool:
    return value.denominator == 1 and -_LIMIT < value.numerator < _LIMIT  # (ints: no Fraction arithmetic)


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
    # per-node counts, and how far into the change log they are (``update`` appends the device's row).
    _counted: dict[tuple[object, ...], tuple[npt.NDArray[np.bool_], IntArray, int]] = field(default_factory=dict)
    _changed: list[int] = field(default_factory=list)  # rows whose use changed, oldest first
    _changed_before: int = 0  # changes dropped from the front of ``_changed`` (its first one's number)
    # ``eligible`` per set of a request's own selectors (None: one failed on some device)
    _eligible: dict[tuple[str, ...], npt.NDArray[np.bool_] | None] = field(default_factory=dict)
    # the node index above per row of the scheduling cache's node table (``select`` by rows)
    by_row: RowLookup = field(default_factory=RowLookup)

    def eligible(self, expressions: tuple[str, ...], selectors: SelectorCache) -> npt.NDArray[np.bool_] | None:
        """Per device whether every one of a request's own selector ``expressions`` accepts it; None
        when one fails on some device (the full search reports that). Kept per expression set: a
        table's devices never change (new slices build a new table), and results are memoised per
        device by the selector cache."""
        if expressions in self._eligible:
            return self._eligible[expressions]
        accepted = np.ones(len(self.devices), dtype=bool)
        found: npt.NDArray[np.bool_] | None = accepted
        try:
            for device_id, row in self.rows.items():
                device = self.devices[row]
                if not all(selectors.matches(e, device, device_id.driver) for e in expressions):
                    accepted[row] = False
        except SelectorError:
            found = None
        self._eligible[expressions] = found
        return found

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

    def counts(
        self, alt: Alternative, eligible: npt.NDArray[np.bool_] | None = None, own: tuple[str, ...] = ()
    ) -> IntArray:
        """Per node, how many devices could each take one allocation for ``alt`` (read-only; only the
        devices whose use changed since the last call for the same capacity requests are judged
        again, found in the change log); ``eligible``: the devices the request's own selectors
        ``own`` accept (None: every device)."""
        serves, need = self.need(alt)
        if eligible is not None:
            serves = serves & eligible
        key = (alt.capacity_key, own)
        logged = self._changed_before + len(self._changed)
        kept = self._counted.get(key)
        if kept is None or kept[2] < self._changed_before:  # new, or behind what the log still holds
            ok = self._qualifies(serves, need, slice(None))
            counts: IntArray = np.bincount(self.node_of[ok], minlength=len(self.simple)).astype(np.int64)
        else:
            ok, counts, seen = kept
            if seen < logged:
                pending = set(self._changed[seen - self._changed_before :])
                if len(pending) <= _ONE_BY_ONE:
                    for row in pending:  # a bind's device or two: element reads beat a dozen array calls
                        qualifies = self._qualifies_row(serves, need, row)
                        if qualifies != ok[row]:
                            ok[row] = qualifies
                            counts[self.node_of[row]] += 1 if qualifies else -1
                else:
                    changed = np.array(sorted(pending), dtype=np.intp)  # few: cheaper than np.unique
                    now = self._qualifies(serves, need, changed)
                    delta = now.astype(np.int64) - ok[changed]
                    if len(changed) > _FEW:
                        np.add.at(counts, self.node_of[changed], delta)
                    else:
                        for node, step in zip(self.node_of[changed].tolist(), delta.tolist(), strict=True):
                            counts[node] += step  # few rows: cheaper than np.add.at
                    ok[changed] = now
        self._counted[key] = (ok, counts, logged)
        view = counts.view()
        view.flags.writeable = False
        return view

    def _qualifies(
        self, serves: npt.NDArray[np.bool_], need: IntArray, rows: slice | npt.NDArray[np.intp]
    ) -> npt.NDArray[np.bool_]:
        """Whether each device at ``rows`` can take one more allocation of ``need``."""
        fits = (np.where(self.has[rows], need[rows] + self.used[rows], 0) <= self.value[rows]).all(axis=1)
        qualifies: npt.NDArray[np.bool_] = serves[rows] & ~self.held_whole[rows] & fits
        return qualifies

    def _qualifies_row(self, serves: npt.NDArray[np.bool_], need: IntArray, row: int) -> bool:
        """``_qualifies`` of one row, element by element."""
        if not serves[row] or self.held_whole[row]:
            return False
        has, value, used, wanted = self.has[row], self.value[row], self.used[row], need[row]
        return all((wanted[c] + used[c] if has[c] else 0) <= value[c] for c in range(len(self.names)))

    def update(self, device: DeviceID, held: Held) -> None:
        row = self.rows.get(device)
        if row is None:
            return
        whole, _, consumed = held
        self._changed.append(row)
        if len(self._changed) > max(_LOG_MIN, len(self.rows)):  # bounded: a key this far behind counts anew
            drop = len(self._changed) // 2
            del self._changed[:drop]
            self._changed_before += drop
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
    # Devices parsed once and published on many nodes share their capacity map: hashed once (the
    # maps stay alive in ``rows`` while this runs, so their ids are theirs).
    by_map: dict[int, int] = {}
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
        index = by_map.get(id(device.capacity))
        if index is None:
            signature = tuple(sorted(device.capacity.items()))
            index = signatures.get(signature)
            if index is None:
                index = signatures[signature] = len(table._capacities)
                table._capacities.append(device)
            by_map[id(device.capacity)] = index
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
    """An ``exactly`` ExactCount request without admin access (its own selectors: ``own_selectors``)."""
    return not alt.all_devices and not alt.admin_access and alt.request == alt.result_name


def own_selectors(alt: Alternative) -> tuple[str, ...]:
    """The request's own selector expressions (``Alternative.selectors`` lists the class's first)."""
    return alt.selectors[len(alt.device_class.selectors) :]


@dataclass(frozen=True, slots=True)
class Selection:
    """Candidate nodes as nodes of one table: what depends only on the table and the names (kept by
    the caller while both are the same; read-only arrays)."""

    index: npt.NDArray[np.intp]  # per name: node index, -1 for a node DRA does not know
    decided: npt.NDArray[np.bool_]  # per name: a node this table decides (``DeviceTable.simple``)
    reason: npt.NDArray[np.intp]  # per name: index of its failure reason in ``table.reasons``


def select(table: DeviceTable, names: Sequence[str]) -> Selection:
    return select_at(table, np.fromiter((table.nodes.get(n, -1) for n in names), dtype=np.intp, count=len(names)))


def select_at(table: DeviceTable, index: npt.NDArray[np.intp]) -> Selection:
    """``select`` for candidates already mapped to the table's node indices (-1: unknown)."""
    known = index >= 0
    decided = np.zeros(len(index), dtype=bool)
    decided[known] = table.simple[index[known]]
    reason = np.zeros(len(index), dtype=np.intp)
    reason[known] = table.reason_of[index[known]]
    for values in (index, decided, reason):
        values.flags.writeable = False
    return Selection(index, decided, reason)


def decide(
    table: DeviceTable, alt: Alternative, selection: Selection, selectors: SelectorCache
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_], npt.NDArray[np.intp]] | None:
    """For the nodes of ``selection`` (``select``): whether decided here, whether each passes, and
    the index of its failure reason in ``table.reasons``; None when a capacity the request
    consumes is not simple or one of its own selectors fails on a device (the full allocator
    decides every node)."""
    own = own_selectors(alt)
    eligible = table.eligible(own, selectors) if own else None
    if own and eligible is None:
        return None
    try:
        counts = table.counts(alt, eligible, own)
    except _NotSimple:
        return None
    # An unknown name's -1 reads some node's count, but it is not decided, so it does not pass.
    passes = selection.decided & (counts[selection.index] >= alt.count)
    return selection.decided, passes, selection.reason
