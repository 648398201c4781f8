"""RowShapes: an id per distinct node state, so a result computed for one node serves every node
that is in the same state later.

A bind moves a node into a new state, and where many pods have one shape (a job's workers, a
deployment's replicas) on machines of one type, other nodes were in that state a moment ago.
``NodeTable`` gives each row the id of its content (its *shape*: every value the table keeps for it
except the name and the labels); ``scoring.row_memo`` looks a written row's shape up before scoring
the row again. Ids start at 1 (0 is never a shape). They are numbered again, under a new ``epoch``,
once more states than ``limit`` were seen, so memory stays bounded however many states come and go;
what was kept under the old ids is dropped then.
"""

from __future__ import annotations

import marshal
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from scoring.framework import NodeInfo

__all__ = ["RowShapes", "signature"]

Int64Array = npt.NDArray[np.int64]

_LIMIT_MIN = 4096  # states kept before renumbering, at least (and 4 per row)


def signature(node: NodeInfo) -> bytes:
    """Everything ``NodeTable.upsert`` writes for ``node`` but its name and labels, as the marshalled
    tuple of its sorted items: equal signatures, equal rows (unequal signatures may still write equal
    rows: then a result is computed twice). Bytes are compact and the garbage collector never traverses
    them: a table of 15,000 nodes keeps one a row. (``marshal`` rather than ``repr``: under half the
    time, on every node written. Version 2 writes no back-references, so equal content gives equal
    bytes whichever objects hold it.)"""
    return marshal.dumps(
        (
            _items(node.allocatable),
            _items(node.requested),
            node.non_zero_cpu,
            node.non_zero_memory,
            sorted(node.allocatable_types),
            _items(node.dra_allocatable),
            _items(node.dra_requested),
            _items(node.dra_devices),
            sorted((resource, _items(kinds)) for resource, kinds in node.pod_kinds.items()),
        ),
        2,
    )


def _items(values: Mapping[Any, Any]) -> list[tuple[Any, Any]]:
    return sorted(values.items())


class RowShapes:
    """Each row's shape id (``ids``), kept as rows are written (``set``) and freed (``clear``)."""

    def __init__(self, capacity: int, limit: int | None = None) -> None:
        self.ids: Int64Array = np.zeros(capacity, dtype=np.int64)  # per row; 0 for a free row
        self.epoch = 0
        self._limit = limit
        self._numbers: dict[bytes, int] = {}
        self._signatures: list[bytes | None] = [None] * capacity

    def grow(self, capacity: int) -> None:
        ids = np.zeros(capacity, dtype=np.int64)
        ids[: len(self.ids)] = self.ids
        self.ids = ids
        self._signatures.extend([None] * (capacity - len(self._signatures)))

    def set(self, row: int, node: NodeInfo) -> None:
        key = signature(node)
        self._signatures[row] = key
        number = self._numbers.get(key)
        if number is None:
            limit = self._limit if self._limit is not None else max(_LIMIT_MIN, 4 * len(self.ids))
            if len(self._numbers) >= limit:
                self._renumber()
                number = self._numbers[key]
            else:
                number = self._numbers[key] = len(self._numbers) + 1
        self.ids[row] = number

    def clear(self, row: int) -> None:
        self._signatures[row] = None
        self.ids[row] = 0

    def _renumber(self) -> None:
        """Only the states rows hold now, under new ids (results kept under the old ones are dropped)."""
        self.epoch += 1
        self._numbers = {}
        for row, key in enumerate(self._signatures):
            if key is not None:
                number = self._numbers.get(key)
                if number is None:
                    number = self._numbers[key] = len(self._numbers) + 1
                self.ids[row] = number
