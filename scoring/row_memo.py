"""RowMemo: per-node results of a batch function, kept while the node's table row is unchanged.

Between two requests only the nodes a bind (or a watch event) touched change, and pods come in a
few shapes. A plugin whose batch result for a node depends only on that node's row (its resources:
not its name or labels) and on a key derived from the pod (its demand) computes the rows written
since it last saw that key, and reads the others back. A row's stamp (``NodeTable.stamps``) changes
on every write, so a stale value is never read; nodes the table does not know and the position of a
discounted pod are never kept.

A written row is first looked up by its shape (``scoring.row_shapes``: the id of its content): when
the key has met a node in that state before, the result is that node's. Pods of one shape on
machines of one type (a job's workers) move nodes through a few states, and then a request scores
no row at all. A key that must score many rows (met for the first time) scores each state among them
once: a cluster's empty nodes of one type are one state.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable

import numpy as np

from scoring.table import Batch, Int64Array, NodeTable

__all__ = ["RowMemo"]

_SLOTS = 256  # keys kept (least recently used dropped first)
_SHAPES_KEPT = 1024  # per key, results kept by shape (all dropped when full)
_LOOKUP_MAX = 64  # more rows written than this since a key was last seen: computed without looking up
# Written rows have stamps >= 1. An entry's rows start at _EMPTY; a batch position that must not be
# kept (unknown name, discounted pod) reads as _NONE, which no entry ever holds: always computed.
_EMPTY, _NONE = 0, -1


class RowMemo:
    """``compute(batch) -> int64 per node`` memoised per (key, table row)."""

    def __init__(self, slots: int = _SLOTS) -> None:
        self._slots = slots
        self._table: NodeTable | None = None
        self._epoch = 0
        self._entries: OrderedDict[Hashable, tuple[Int64Array, Int64Array, dict[int, int]]] = OrderedDict()

    def get(self, key: Hashable, batch: Batch, compute: Callable[[Batch], Int64Array]) -> Int64Array:
        table = batch.table
        if table is not self._table:
            self._table, self._epoch, self._entries = table, table.shapes.epoch, OrderedDict()
        elif table.shapes.epoch != self._epoch:  # shapes numbered again: what was kept by shape goes
            self._epoch = table.shapes.epoch
            for kept_entry in self._entries.values():
                kept_entry[2].clear()
        capacity = len(table.stamps)
        entry = self._entries.get(key)
        if entry is None or len(entry[0]) != capacity:
            entry = self._entries[key] = self._entry(entry, capacity)
        self._entries.move_to_end(key)
        while len(self._entries) > self._slots:
            self._entries.popitem(last=False)
        kept, values, by_shape = entry
        rows = batch.rows
        stamps = table.stamps[rows]
        if not batch.all_known:
            stamps[~batch.known] = _NONE
        if batch.discount_position >= 0:
            stamps[batch.discount_position] = _NONE
        miss = kept[rows] != stamps
        result = values[rows]
        if not miss.any():
            return result
        positions = miss.nonzero()[0]
        keep = stamps[positions] != _NONE
        shapes = table.shapes.ids[rows[positions]]
        shapes[~keep] = 0  # no shape: never looked up, never kept by shape
        computed = np.empty(len(positions), dtype=np.int64)
        todo = np.ones(len(positions), dtype=np.bool_)
        if by_shape and len(positions) <= _LOOKUP_MAX:
            for index, shape in enumerate(shapes.tolist()):
                value = by_shape.get(shape)
                if value is not None:
                    computed[index], todo[index] = value, False
        if todo.any():
            at = todo.nonzero()[0]
            if len(at) > _LOOKUP_MAX:  # many rows (a key met for the first time): each state once
                fresh = _by_state(batch, positions[at], shapes[at], compute)
            else:
                fresh = compute(batch.take(positions[at]))
            computed[at] = fresh
            if len(at) <= _LOOKUP_MAX:  # a key meeting the whole table keeps its rows by stamp only
                if len(by_shape) + len(at) > _SHAPES_KEPT:
                    by_shape.clear()
                by_shape.update(zip(shapes[at].tolist(), fresh.tolist(), strict=True))
                by_shape.pop(0, None)
        result[positions] = computed
        kept_rows = rows[positions[keep]]
        kept[kept_rows] = stamps[positions[keep]]
        values[kept_rows] = computed[keep]
        return result

    @staticmethod
    def _entry(
        old: tuple[Int64Array, Int64Array, dict[int, int]] | None, capacity: int
    ) -> tuple[Int64Array, Int64Array, dict[int, int]]:
        """A new entry, or ``old`` widened to the table's grown capacity."""
        kept = np.full(capacity, _EMPTY, dtype=np.int64)
        values = np.zeros(capacity, dtype=np.int64)
        if old is None:
            return kept, values, {}
        kept[: len(old[0])] = old[0]
        values[: len(old[1])] = old[1]
        return kept, values, old[2]


def _by_state(
    batch: Batch, positions: Int64Array, shapes: Int64Array, compute: Callable[[Batch], Int64Array]
) -> Int64Array:
    """``compute`` at ``positions`` (ascending), run once per state: rows of one shape (a cluster's
    nodes of one type while they are empty, or full) take the result of the first of them. Rows
    without a shape (0: an unknown name, the discounted pod's node) are computed each."""
    shaped = (shapes != 0).nonzero()[0]
    _, first, inverse = np.unique(shapes[shaped], return_index=True, return_inverse=True)
    if 2 * len(first) > len(shaped):  # mostly distinct: not worth the detour
        return compute(batch.take(positions))
    chosen = np.ones(len(positions), dtype=np.bool_)
    chosen[shaped] = False
    chosen[shaped[first]] = True
    picked = chosen.nonzero()[0]  # ascending, so the positions stay ascending
    values = np.empty(len(positions), dtype=np.int64)
    values[picked] = compute(batch.take(positions[picked]))
    values[shaped] = values[shaped[first]][inverse]
    return values
