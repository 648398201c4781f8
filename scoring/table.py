"""NodeTable: every node's scheduling state as columns, for scoring thousands of nodes per request.

kube-scheduler's extender call carries up to all node names of the cluster, and scoring them one
``NodeInfo`` at a time costs microseconds each in Python. The cache keeps this table in step with
its snapshots at update time (one row write per change), so a request only gathers rows and runs
the plugins' vectorised ``*_batch`` functions. The scalar functions remain the definition; tests
check that both agree.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from scoring.batch import EXACT_LIMIT, Batch, BoolArray, Int64Array, UInt64Array
from scoring.framework import MAX_NODE_DEVICES, NodeInfo
from scoring.resources import CPU, MEMORY, PodResources
from scoring.row_shapes import RowShapes

# Batch and the array types live in scoring.batch; importers of this module find them here too.
__all__ = ["EXACT_LIMIT", "MAX_TYPE_BITS", "Batch", "BoolArray", "Int64Array", "NodeTable", "UInt64Array"]

# Resource types are tracked as bits of one uint64 per node (ScarceResourceAvoidance counts types).
MAX_TYPE_BITS = 64
# Lists shorter than this are cheaper to look up than to compare; a few slots cover filter's input
# and its survivors for the pod in flight.
_RECALL_MIN = 64
_RECALL_SLOTS = 4


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
        # Per row, the snapshot it was written from (None for a free row): what the plugins' scalar
        # definitions read where a request scores a few rows (``scoring.profile``).
        self.nodes: list[NodeInfo | None] = []
        self._labels_version = 0
        self._label_codes: dict[str, tuple[int, Int64Array, tuple[str, ...]]] = {}
        # Recent name lists and their rows. kube-scheduler sends the same candidates again (rotated
        # by its start index), and prioritize gets filter's survivors: comparing strings is several
        # times cheaper than hashing them into ``index``. Valid while ``_version`` is unchanged.
        self._version = 0
        self._recent: list[tuple[int, list[str], npt.NDArray[np.intp]]] = []
        self._prefixes: list[tuple[int, Sequence[str], list[bytes]]] = []
        self._name_arrays: list[tuple[list[str], npt.NDArray[np.object_] | None]] = []

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
                self.nodes.append(None)
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
        self.nodes[row] = node

    def remove(self, name: str) -> None:
        row = self.index.pop(name, None)
        if row is not None:
            self._free_rows.append(row)
            self._version += 1
            self._stamp += 1
            self._labels_version += 1
            self.labels[row] = {}
            self.nodes[row] = None
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

    def names_array(self, names: list[str]) -> npt.NDArray[np.object_] | None:
        """``names`` as an object array, for a list asked about before (filter's input, the same for
        every pod): the survivors are picked from it in a third of the time a list takes. None the
        first time (making the array costs more than it saves once). Names only: valid whatever rows
        change."""
        for index, (kept, array) in enumerate(self._name_arrays):
            if kept is names:
                if array is None:
                    array = np.array(names, dtype=object)
                    self._name_arrays[index] = (kept, array)
                return array
        self._name_arrays = [(names, None), *self._name_arrays[: _RECALL_SLOTS - 1]]
        return None

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
        for index, (version, seen, rows) in enumerate(self._recent):
            if version != self._version or len(seen) != len(names) or first is None:
                continue
            if seen is names:  # the very list seen before (the wire keeps decoded name lists)
                return self._used(index).copy()
            at = (rows == first).nonzero()[0]
            if not at.size:
                continue
            shift = int(at[0])
            if names[-1] != seen[shift - 1]:  # cheap: a list in another order differs here already
                continue
            if names == (seen[shift:] + seen[:shift] if shift else seen):
                return np.roll(self._used(index), -shift) if shift else self._used(index).copy()
        return None

    def _used(self, index: int) -> npt.NDArray[np.intp]:
        """The rows of recent list ``index``, which moves to the front: filter's input, asked about for
        every pod, outlives the survivor lists each pod adds (least recently used go first)."""
        if index:
            self._recent.insert(0, self._recent.pop(index))
        return self._recent[0][2]

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
