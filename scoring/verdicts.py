"""BatchVerdicts: a filter's verdicts for a batch of candidate nodes, as arrays.

Thousands of rejected nodes never become thousands of Python objects until the wire answer is
built: per node a ``Code`` (by its index in ``CODES``) and the index of its reason.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from scoring.framework import SUCCESS, Code, Status
from scoring.table import Int64Array

__all__ = ["CODES", "BatchVerdicts"]


@dataclass(slots=True)
class BatchVerdicts:
    """Filter verdicts for a batch: per node a ``Code`` (by ``CODES`` index) and a reason index.

    Kept as arrays so thousands of rejected nodes never become thousands of Python objects until
    the wire answer is built.
    """

    codes: npt.NDArray[np.int8]
    reason_index: Int64Array
    reasons: list[Status]
    rows: npt.NDArray[np.intp] | None = None  # table rows of the nodes, when all are known

    @classmethod
    def passing(cls, size: int) -> BatchVerdicts:
        return cls(np.zeros(size, dtype=np.int8), np.full(size, -1, dtype=np.int64), [])

    def set_many(self, positions: npt.NDArray[np.intp] | Sequence[int], status: Status) -> None:
        """``set`` for several nodes at once, with one reason between them."""
        if len(positions) == 0:
            return
        index = -1
        if not status.passed:
            self.reasons.append(status)
            index = len(self.reasons) - 1
        self.codes[positions] = CODES.index(status.code)
        self.reason_index[positions] = index

    def set(self, position: int, status: Status) -> None:
        self.codes[position] = CODES.index(status.code)
        if status.passed:
            self.reason_index[position] = -1
        else:
            self.reasons.append(status)
            self.reason_index[position] = len(self.reasons) - 1

    def merge_later(self, later: BatchVerdicts) -> None:
        """Take ``later``'s failures where this one passes (the first failing check wins)."""
        take = (self.codes == 0) & (later.codes != 0)
        self.codes[take] = later.codes[take]
        self.reason_index[take] = later.reason_index[take] + len(self.reasons)
        self.reasons.extend(later.reasons)

    def failed(self, names: Sequence[str], code: Code) -> dict[str, str]:
        """``{node name: reason}`` of the nodes with ``code``, built at C speed."""
        positions = (self.codes == CODES.index(code)).nonzero()[0]
        reasons = [status.reason for status in self.reasons]
        return dict(
            zip(
                map(names.__getitem__, positions.tolist()),
                map(reasons.__getitem__, self.reason_index[positions].tolist()),
                strict=True,
            )
        )

    def failed_at(self, code: Code) -> tuple[npt.NDArray[np.intp], Int64Array]:
        """Positions of the nodes with ``code`` and the index of each one's reason in ``reasons``."""
        positions = (self.codes == CODES.index(code)).nonzero()[0]
        return positions, self.reason_index[positions]

    def reason_counts(self) -> dict[str, int]:
        """How many nodes failed for each reason (for metrics and the decision log)."""
        failing = self.reason_index[self.reason_index >= 0]
        counts: dict[str, int] = {}
        for index, count in enumerate(np.bincount(failing, minlength=len(self.reasons)).tolist()):
            if count:
                reason = self.reasons[index].reason
                counts[reason] = counts.get(reason, 0) + count
        return counts

    def passed(self, names: Sequence[str], array: npt.NDArray[np.object_] | None = None) -> list[str]:
        """The passing names in order; ``array``: ``names`` as an object array, which picks them fastest
        (``NodeTable.names_array``)."""
        passing = self.codes == 0
        count = int(np.count_nonzero(passing))
        if count == len(names):
            return list(names)
        if array is not None:
            picked: list[str] = array[passing].tolist()
            return picked
        if 4 * count < len(names):  # few pass (a filling cluster): index them, not compress all
            return list(map(names.__getitem__, passing.nonzero()[0].tolist()))
        return list(itertools.compress(names, passing.tolist()))

    def status(self, position: int) -> Status:
        index = int(self.reason_index[position])
        return self.reasons[index] if index >= 0 else SUCCESS


# Code by position: the int8 stored in BatchVerdicts.codes.
CODES = (Code.SUCCESS, Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)
