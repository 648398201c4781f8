"""Batch: the table rows of one request's candidate nodes, gathered once and read by every plugin.

``NodeTable.batch`` gathers a request's candidate names into one; ``subset``, ``take`` and ``part``
narrow it without gathering again (the best nodes, the rows a memo computes). Columns read through a
batch are the table's at these rows, with the pod's own assumption taken out where kube-scheduler
retries a pod (``discount``), and values several plugins need are computed once per batch
(``shared``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import numpy.typing as npt

from scoring.framework import MAX_NODE_DEVICES, MILLI_DEVICES
from scoring.resources import CPU, MEMORY, PodResources

if TYPE_CHECKING:
    from scoring.table import NodeTable

__all__ = ["EXACT_LIMIT", "Batch", "BoolArray", "Int64Array", "UInt64Array"]

Int64Array = npt.NDArray[np.int64]
UInt64Array = npt.NDArray[np.uint64]
BoolArray = npt.NDArray[np.bool_]

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
