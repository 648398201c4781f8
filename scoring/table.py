"""NodeTable: every node's scheduling state as columns, for scoring thousands of nodes per request.

kube-scheduler's extender call carries up to all node names of the cluster, and scoring them one
``NodeInfo`` at a time costs microseconds each in Python. The cache keeps this table in step with
its snapshots at update time (one row write per change), so a request only gathers rows and runs
the plugins' vectorised ``*_batch`` functions. The scalar functions remain the definition; tests
check that both agree.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from scoring.framework import MAX_NODE_DEVICES, MILLI_DEVICES, NodeInfo
from scoring.resources import CPU, MEMORY, PodResources
from scoring.row_shapes import RowShapes

__all__ = ["EXACT_LIMIT", "MAX_TYPE_BITS", "Batch", "NodeTable"]

Int64Array = npt.NDArray[np.int64]
UInt64Array = npt.NDArray[np.uint64]
BoolArray = npt.NDArray[np.bool_]

# Resource types are tracked as bits of one uint64 per node (ScarceResourceAvoidance counts types).
MAX_TYPE_BITS = 64
# Lists shorter than this are cheaper to look up than to compare; a few slots cover filter's input
# and its survivors for the pod in flight.
_RECALL_MIN = 64
_RECALL_SLOTS = 4
# Amounts at or above this could overflow int64 once multiplied by MaxNodeScore; the scalar path
# (Python integers) takes over when any value reaches it.
EXACT_LIMIT = 2**56
# A pod amount scored in milli-devices stays below EXACT_LIMIT when it is below this.
_DRA_POD_LIMIT = EXACT_LIMIT // (2 * MILLI_DEVICES)

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Batch:
    """The rows of one request's candidate nodes, gathered once and shared by all plugins.

    ``known`` is False for names the table does not hold; their columns read as an empty node.
    """

    names: Sequence[str]
    rows: npt.NDArray[np.intp]
    known: BoolArray
    table: NodeTable
    # A pod retried by kube-scheduler must not compete with its own assumption: its contribution
    # is taken out at this position (as ``NodeInfo`` snapshots do with ``without``).
    discount_position: int = -1
    discount: PodResources | None = None
    # Values derived from these rows that several plugins need (``shared``), computed once.
    _shared: dict[Hashable, Any] = field(default_factory=dict, compare=False, repr=False)

    def __len__(self) -> int:
        return len(self.names)

    def shared(self, key: Hashable, compute: Callable[[Batch], _T]) -> _T:
        """``compute(self)``, once per batch and ``key``: every plugin scoring these rows in one request
        reads the same value (arrays in it must be treated as read-only). A batch lives for one
        request, in which the table does not change."""
        try:
            value: _T = self._shared[key]
        except KeyError:
            value = self._shared[key] = compute(self)
        return value

    def subset(self, keep: BoolArray, names: Sequence[str] | None = None) -> Batch:
        """These candidates where ``keep`` is True, in order, without gathering their rows again;
        ``names``: those candidates' names when the caller has them already."""
        if names is None:
            names = list(itertools.compress(self.names, keep.tolist()))
        position = -1
        if self.discount_position >= 0 and keep[self.discount_position]:
            position = int(np.count_nonzero(keep[: self.discount_position]))
        discount = self.discount if position >= 0 else None
        return self.part(names, self.rows[keep], self.known[keep], position, discount)

    def take(self, positions: npt.NDArray[np.intp]) -> Batch:
        """These candidates at ``positions`` (distinct), in that order, without gathering their rows
        again: what reads a few of many candidates (the best nodes' tie-break) gathers their columns
        alone."""
        names = list(map(self.names.__getitem__, positions.tolist()))
        position = -1
        if self.discount_position >= 0:
            hits = np.flatnonzero(positions == self.discount_position)
            position = int(hits[0]) if len(hits) else -1
        discount = self.discount if position >= 0 else None
        return self.part(names, self.rows[positions], self.known[positions], position, discount)

    def part(
        self,
        names: Sequence[str],
        rows: npt.NDArray[np.intp],
        known: BoolArray,
        position: int,
        discount: PodResources | None,
    ) -> Batch:
        """A batch of some of these candidates; every one known when all of these are (not checked again)."""
        shared: dict[Hashable, Any] = {"all_known": True} if self._shared.get("all_known") is True else {}
        return Batch(names, rows, known, self.table, position, discount, shared)

    @property
    def all_known(self) -> bool:
        """Every candidate is a node of the table (nearly always); worked out once per batch."""
        return self.shared("all_known", _every_known)

    def column(self, columns: Mapping[str, Int64Array], resource: str) -> Int64Array:
        """``columns[resource]`` (one of the table's) at these rows, 0 for names the table does not hold."""
        return self.table.gather(columns, resource, self.rows, None if self.all_known else self.known)

    def allocatable(self, resource: str) -> Int64Array:
        return self.column(self.table.allocatable, resource)

    def requested(self, resource: str) -> Int64Array:
        values = self.column(self.table.requested, resource)
        if self.discount is not None:
            values[self.discount_position] -= self.discount.requests.get(resource, 0)
        return values

    def requested_for_scoring(self, resource: str) -> Int64Array:
        """NonZeroRequested for cpu and memory, plain requests otherwise (as ``NodeInfo``)."""
        if resource not in (CPU, MEMORY):
            return self.requested(resource)
        values = self.column(self.table.non_zero, resource)
        if self.discount is not None:
            values[self.discount_position] -= self.discount.amount(resource)
        return values

    def fit_amounts(self, resource: str, pod_amount: int) -> tuple[Int64Array, Int64Array] | None:
        """``NodeInfo.fit_amounts`` per node: (requested with the pod, allocatable), in milli-devices
        where DRA serves ``resource``; None if the pod's amount could overflow in milli-devices."""
        requested = self.requested_for_scoring(resource) + pod_amount
        allocatable = self.allocatable(resource)
        if resource not in self.table.dra_allocatable:
            return requested, allocatable
        dra = self.column(self.table.dra_allocatable, resource)
        served = dra > 0
        if not served.any():
            return requested, allocatable
        if abs(pod_amount) >= _DRA_POD_LIMIT:
            return None
        dra_requested = self.column(self.table.dra_requested, resource)
        dra_requested += pod_amount * MILLI_DEVICES
        return np.where(served, dra_requested, requested), np.where(served, dra, allocatable)

    def devices_free(self, resource: str) -> Int64Array:
        """``NodeInfo.devices_free`` per node as rows of one array, padded with -1 (no such device);
        shared by the plugins that ask (read-only)."""
        return self.shared(("devices_free", resource), lambda batch: batch._devices_free(resource))

    def _devices_free(self, resource: str) -> Int64Array:
        allocatable = np.minimum(np.maximum(self.allocatable(resource), 0), MAX_NODE_DEVICES)
        dra_used = self.table.dra_devices.get(resource)
        width = int(allocatable.max(initial=0))
        served = np.zeros(len(self), dtype=np.bool_)
        if dra_used is not None:
            dra = self.column(self.table.dra_allocatable, resource)
            served = dra > 0
            if served.any():
                width = max(width, dra_used.shape[1])
            if width == dra_used.shape[1] and served.all():  # DRA serves every node: its rows alone
                every = dra_used[self.rows]
                return _read_only(np.where(every >= 0, MILLI_DEVICES - every, -1).astype(np.int64, copy=False))
        used = np.minimum(np.maximum(self.requested(resource), 0), allocatable)
        index = np.arange(width, dtype=np.int64)[None, :]
        free = np.where(index < used[:, None], 0, np.where(index < allocatable[:, None], MILLI_DEVICES, -1))
        if served.any() and dra_used is not None:
            rows = dra_used[self.rows[served]]
            dra_free = np.where(rows >= 0, MILLI_DEVICES - rows, -1)
            padded = np.full((int(served.sum()), width), -1, dtype=np.int64)
            padded[:, : dra_free.shape[1]] = dra_free
            free[served] = padded
        return _read_only(free.astype(np.int64, copy=False))

    def pod_kinds(self, resource: str) -> dict[int, Int64Array]:
        """``NodeInfo.pod_kinds[resource]`` per node: kind -> pods of that kind on each node."""
        out: dict[int, Int64Array] = {}
        for kind, column in self.table.pod_kinds.get(resource, {}).items():
            values = column[self.rows]
            values[~self.known] = 0
            out[kind] = values
        return out

    def type_masks(self) -> UInt64Array | None:
        """Per node, a bit per resource type with allocatable > 0; None if there are too many types."""
        if self.table.type_overflow:
            return None
        masks = self.table.types[self.rows]
        masks[~self.known] = 0
        return masks


def _every_known(batch: Batch) -> bool:
    return bool(batch.known.all())


def _read_only(values: Int64Array) -> Int64Array:
    """``values``, no longer writable: a value ``Batch.shared`` hands to several plugins."""
    values.flags.writeable = False
    return values


class NodeTable:
    def __init__(self, capacity: int = 1024, shape_limit: int | None = None) -> None:
        self._capacity = capacity
        self.index: dict[str, int] = {}
        self._free_rows: list[int] = []
        self._next_row = 0
        self.allocatable: dict[str, Int64Array] = {}
        self.requested: dict[str, Int64Array] = {}
        self.non_zero: dict[str, Int64Array] = {CPU: self._column(), MEMORY: self._column()}
        # Extended resources served by DRA devices (NodeInfo.dra_*), in milli-devices.
        self.dra_allocatable: dict[str, Int64Array] = {}
        self.dra_requested: dict[str, Int64Array] = {}
        # Per DRA-served resource, rows x devices: milli-devices in use per device (NodeInfo.dra_devices),
        # -1 past the node's last device; widened when a node has more devices.
        self.dra_devices: dict[str, Int64Array] = {}
        # Per extended resource and pod kind, the pods of that kind per node (NodeInfo.pod_kinds).
        self.pod_kinds: dict[str, dict[int, Int64Array]] = {}
        self.types: UInt64Array = np.zeros(capacity, dtype=np.uint64)
        # Per row, the stamp of its last write (0: never written): a row whose stamp is unchanged
        # holds the same values, so per-row results can be memoised (``scoring.row_memo``).
        self.stamps: Int64Array = self._column()
        self._stamp = 0
        # Per row, the id of its content: a row written into a state seen before (on any node) has
        # the same id, and memoised results are looked up by it (``scoring.row_memo``).
        self.shapes = RowShapes(capacity, shape_limit)
        self.type_bits: dict[str, int] = {}
        self.type_overflow = False
        self.exact = True
        # Per row, JSON fragments answers are assembled from without encoding names per request:
        # the start of the node's HostPriority, '{"Host":"<name>","Score":', and its name as the key
        # of a map of node name to reason, '"<name>":'.
        self.host_prefix: list[bytes] = []
        self.name_key: list[bytes] = []
        # Per row, the node's labels (NodeInfo.labels); ``label_codes`` turns one key into a column,
        # computed again only after some row's labels changed (``_labels_version``).
        self.labels: list[Mapping[str, str]] = []
        self._labels_version = 0
        self._label_codes: dict[str, tuple[int, Int64Array, tuple[str, ...]]] = {}
        # Recent name lists and their rows. kube-scheduler sends the same candidates again (rotated
        # by its start index), and prioritize gets filter's survivors: comparing strings is several
        # times cheaper than hashing them into ``index``. Valid while ``_version`` is unchanged.
        self._version = 0
        self._recent: list[tuple[int, list[str], npt.NDArray[np.intp]]] = []
        self._prefixes: list[tuple[int, Sequence[str], list[bytes]]] = []

    # ------------------------------------------------------------------ updates
    def _column(self) -> Int64Array:
        return np.zeros(self._capacity, dtype=np.int64)

    def _grow(self) -> None:
        self._capacity *= 2
        for columns in (self.allocatable, self.requested, self.non_zero, self.dra_allocatable, self.dra_requested):
            for name, column in columns.items():
                grown = np.zeros(self._capacity, dtype=np.int64)
                grown[: len(column)] = column
                columns[name] = grown
        for kinds in self.pod_kinds.values():
            for kind, column in kinds.items():
                grown = np.zeros(self._capacity, dtype=np.int64)
                grown[: len(column)] = column
                kinds[kind] = grown
        for name, devices in self.dra_devices.items():
            grown_devices = np.full((self._capacity, devices.shape[1]), -1, dtype=np.int64)
            grown_devices[: len(devices)] = devices
            self.dra_devices[name] = grown_devices
        types = np.zeros(self._capacity, dtype=np.uint64)
        types[: len(self.types)] = self.types
        self.types = types
        stamps = np.zeros(self._capacity, dtype=np.int64)
        stamps[: len(self.stamps)] = self.stamps
        self.stamps = stamps
        self.shapes.grow(self._capacity)

    def _row(self, name: str) -> int:
        row = self.index.get(name)
        if row is None:
            if self._free_rows:
                row = self._free_rows.pop()
            else:
                if self._next_row >= self._capacity:
                    self._grow()
                row = self._next_row
                self._next_row += 1
                self.host_prefix.append(b"")
                self.name_key.append(b"")
                self.labels.append({})
            self.index[name] = row
            self._version += 1
            self._labels_version += 1
            encoded = json.dumps(name).encode()
            self.host_prefix[row] = b'{"Host":' + encoded + b',"Score":'
            self.name_key[row] = encoded + b":"
        return row

    def _set(self, columns: dict[str, Int64Array], row: int, values: Mapping[str, int]) -> None:
        if any(abs(v) >= EXACT_LIMIT for v in values.values()):
            self.exact = False
            values = {k: max(-EXACT_LIMIT, min(EXACT_LIMIT, v)) for k, v in values.items()}
        for name, column in columns.items():
            column[row] = values.get(name, 0)
        for name, value in values.items():
            if name not in columns:
                columns[name] = column = self._column()
                column[row] = value

    def _set_devices(self, row: int, devices: Mapping[str, tuple[int, ...]]) -> None:
        for name, existing in self.dra_devices.items():
            if name not in devices:
                existing[row] = -1
        for name, used in devices.items():
            used = used[:MAX_NODE_DEVICES]
            found = self.dra_devices.get(name)
            if found is None or found.shape[1] < len(used):
                wider = np.full((self._capacity, max(len(used), 1)), -1, dtype=np.int64)
                if found is not None:
                    wider[:, : found.shape[1]] = found
                self.dra_devices[name] = found = wider
            found[row] = -1
            found[row, : len(used)] = used

    def _set_kinds(self, row: int, pod_kinds: Mapping[str, Mapping[int, int]]) -> None:
        for resource, kinds in self.pod_kinds.items():
            counts = pod_kinds.get(resource, {})
            for kind, column in kinds.items():
                column[row] = counts.get(kind, 0)
        for resource, counts in pod_kinds.items():
            kinds = self.pod_kinds.setdefault(resource, {})
            for kind, count in counts.items():
                if kind not in kinds:
                    kinds[kind] = column = self._column()
                    column[row] = count

    def type_bit(self, resource: str) -> int | None:
        bit = self.type_bits.get(resource)
        if bit is None:
            if len(self.type_bits) >= MAX_TYPE_BITS:
                self.type_overflow = True
                return None
            bit = self.type_bits[resource] = len(self.type_bits)
        return bit

    def mask_of(self, resources: Iterable[str]) -> int:
        """Bits of known types (a type no node offers cannot matter to set differences with nodes)."""
        mask = 0
        for resource in resources:
            bit = self.type_bits.get(resource)
            if bit is not None:
                mask |= 1 << bit
        return mask

    def upsert(self, node: NodeInfo) -> None:
        row = self._row(node.name)
        self._stamp += 1
        self.stamps[row] = self._stamp
        self._set(self.allocatable, row, node.allocatable)
        self._set(self.requested, row, node.requested)
        self.non_zero[CPU][row] = node.non_zero_cpu
        self.non_zero[MEMORY][row] = node.non_zero_memory
        if node.dra_allocatable or node.dra_requested or self.dra_allocatable or self.dra_requested:
            self._set(self.dra_allocatable, row, node.dra_allocatable)
            self._set(self.dra_requested, row, node.dra_requested)
            self._set_devices(row, node.dra_devices)
        if node.pod_kinds or self.pod_kinds:
            self._set_kinds(row, node.pod_kinds)
        mask = 0
        for resource in node.allocatable_types:
            bit = self.type_bit(resource)
            if bit is not None:
                mask |= 1 << bit
        self.types[row] = mask
        self.shapes.set(row, node)
        if self.labels[row] is not node.labels and self.labels[row] != node.labels:
            self._labels_version += 1
        self.labels[row] = node.labels

    def remove(self, name: str) -> None:
        row = self.index.pop(name, None)
        if row is not None:
            self._free_rows.append(row)
            self._version += 1
            self._stamp += 1
            self._labels_version += 1
            self.labels[row] = {}
            self.shapes.clear(row)

    def label_codes(self, key: str) -> tuple[Int64Array, tuple[str, ...]]:
        """Per row, the index of the node's value of label ``key`` in the returned values (sorted),
        -1 for a node without it or a free row. Read-only; recomputed only after labels changed."""
        entry = self._label_codes.get(key)
        if entry is not None and entry[0] == self._labels_version and len(entry[1]) == len(self.labels):
            return entry[1], entry[2]
        present = [labels.get(key) for labels in self.labels]
        values = tuple(sorted({value for value in present if value is not None}))
        position = {value: index for index, value in enumerate(values)}
        codes = np.fromiter((-1 if value is None else position[value] for value in present), np.int64, len(present))
        codes.flags.writeable = False
        self._label_codes[key] = (self._labels_version, codes, values)
        return codes, values

    # ------------------------------------------------------------------ reads
    def batch(self, names: Sequence[str], discount: tuple[str, PodResources] | None = None) -> Batch | None:
        """Gather the rows of ``names``; ``discount`` = (node, pod) whose contribution to take out.

        Returns None when ``names`` repeats a known node: the caller dedupes and asks again.
        """
        size = len(names)
        rows = self._recalled(names)
        if rows is not None:
            known = np.ones(size, dtype=np.bool_)
            return self._batch(names, rows, known, discount, every_known=True)
        every_known = True
        try:  # the common case: every name known, looked up at C speed
            rows = np.fromiter(map(self.index.__getitem__, names), dtype=np.intp, count=size)
            known = np.ones(size, dtype=np.bool_)
            self.remember(names if isinstance(names, list) else list(names), rows)  # kept as is, never modified
        except KeyError:
            found = [self.index.get(name, -1) for name in names]
            rows = np.array(found, dtype=np.intp)
            known = rows >= 0
            rows[~known] = 0
            every_known = False  # a name the table does not hold
        if size and np.bincount(rows[known], minlength=1).max(initial=0) > 1:
            return None
        return self._batch(names, rows, known, discount, every_known)

    def _batch(
        self,
        names: Sequence[str],
        rows: npt.NDArray[np.intp],
        known: BoolArray,
        discount: tuple[str, PodResources] | None,
        every_known: bool = False,
    ) -> Batch:
        """``every_known``: the caller knows ``known`` is all True (the batch need not check it)."""
        position = -1
        if discount is not None and discount[0] in self.index:
            matches = (known & (rows == self.index[discount[0]])).nonzero()[0]
            position = int(matches[0]) if matches.size else -1
        shared: dict[Hashable, Any] = {"all_known": True} if every_known else {}
        if position < 0:
            return Batch(names, rows, known, self, _shared=shared)
        return Batch(names, rows, known, self, position, discount[1] if discount else None, shared)

    @property
    def writes(self) -> int:
        """Grows with every row written or removed: what is derived from the whole table is valid
        while it is unchanged."""
        return self._stamp

    @property
    def version(self) -> int:
        """Changes whenever the name -> row mapping does (a node added, removed or its row reused)."""
        return self._version

    def host_prefixes(self, names: Sequence[str], rows: npt.NDArray[np.intp]) -> list[bytes]:
        """``host_prefix`` of each row, kept for the name list they were asked for: kube-scheduler asks
        /prioritize about the same candidates again and again (the wire hands back the same list)."""
        for version, seen, prefixes in self._prefixes:
            if seen is names and version == self._version:
                return prefixes
        prefixes = list(map(self.host_prefix.__getitem__, rows.tolist()))
        self._prefixes = [(self._version, names, prefixes), *self._prefixes[: _RECALL_SLOTS - 1]]
        return prefixes

    def remember(self, names: list[str], rows: npt.NDArray[np.intp]) -> None:
        """Keep ``names`` (all known, no repeats) with their rows for the next requests."""
        if len(names) < _RECALL_MIN:
            return
        for version, _, seen_rows in self._recent:  # equal rows mean equal names: keep one entry
            # (the ends first: kube-scheduler's parallel filter lists its nodes in a new order each time)
            if version == self._version and _same_ends(seen_rows, rows) and np.array_equal(seen_rows, rows):
                return
        self._recent = [(self._version, names, rows), *self._recent[: _RECALL_SLOTS - 1]]

    def _recalled(self, names: Sequence[str]) -> npt.NDArray[np.intp] | None:
        """Rows of ``names`` if it equals, or is a rotation of, a recently seen list."""
        if len(names) < _RECALL_MIN or not isinstance(names, list):
            return None
        first = self.index.get(names[0])
        for version, seen, rows in self._recent:
            if version != self._version or len(seen) != len(names) or first is None:
                continue
            if seen is names:  # the very list seen before (the wire keeps decoded name lists)
                return rows.copy()
            at = (rows == first).nonzero()[0]
            if not at.size:
                continue
            shift = int(at[0])
            if names[-1] != seen[shift - 1]:  # cheap: a list in another order differs here already
                continue
            if names == (seen[shift:] + seen[:shift] if shift else seen):
                return np.roll(rows, -shift) if shift else rows.copy()
        return None

    def gather(
        self, columns: Mapping[str, Int64Array], resource: str, rows: npt.NDArray[np.intp], known: BoolArray | None
    ) -> Int64Array:
        """``columns[resource]`` at ``rows``, 0 where ``known`` is False (None: every row is a node)."""
        column = columns.get(resource)
        if column is None:
            return np.zeros(len(rows), dtype=np.int64)
        values = column[rows]
        if known is not None and not known.all():  # cheaper than masking when every name is known
            values[~known] = 0
        return values


def _same_ends(a: npt.NDArray[np.intp], b: npt.NDArray[np.intp]) -> bool:
    """Whether two row arrays have the same length, first and last row (before comparing them all)."""
    return len(a) == len(b) and (not len(a) or bool(a[0] == b[0] and a[-1] == b[-1]))
