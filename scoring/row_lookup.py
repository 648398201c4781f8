"""RowLookup: a value kept per node name, read per row of the node table.

A request's candidates arrive as names, in a new order nearly every time (kube-scheduler's parallel
filter); the node table has already found each name's row. A per-name value another component keeps
(a node's flavor signature, its index in a DRA device table) is then read with one gather over those
rows, instead of a dictionary lookup per name per request: the names are walked once, when the
table's rows or the values change.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from scoring.table import Int64Array, NodeTable

__all__ = ["RowLookup"]


class RowLookup:
    def __init__(self) -> None:
        self._kept: tuple[NodeTable, int, Mapping[str, int], int, Int64Array] | None = None

    def by_row(self, table: NodeTable, values: Mapping[str, int], version: int = 0) -> Int64Array:
        """``values[name]`` per row of ``table`` (-1 for a free row or a name without a value;
        read-only). Computed again only after the table's name -> row mapping changed, or for another
        ``values`` mapping or ``version`` (the owner bumps it when it changes ``values`` in place)."""
        kept = self._kept
        if (
            kept is not None
            and kept[0] is table
            and kept[1] == table.version
            and kept[2] is values
            and kept[3] == version
        ):
            return kept[4]
        out = np.full(len(table.labels), -1, dtype=np.int64)
        get = values.get
        for name, row in table.index.items():
            out[row] = get(name, -1)
        out.flags.writeable = False
        self._kept = (table, table.version, values, version, out)
        return out
