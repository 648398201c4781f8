"""The per-device view the GPU-sharing plugins score on: each device's free milli-devices, and the
devices a pod would get on a node.

The placement is the one the allocator makes. A ``Placer`` decides which devices of a node a pod's
demand takes; the plugins score "the node after the pod" on that placement, and the DRA allocator
honours it (``deviceChoice``: the extender hands the chosen devices to the allocator as its
preference among devices of equal priority):

* ``FirstFit`` (``FIRST_FIT``, the default): for each of the pod's devices the *first* device in
  search order with enough capacity left (distinct devices for one request), what the allocator
  takes without a preference; a device plugin hands out whole free GPUs (all alike);
* ``LeastFragmentation`` (``scoring.fragmentation.LeastFragmentation``): a share of one device goes
  to the device that leaves the node least fragmented for the profile's workload, as the FGD
  artifact's binder; whole devices by first fit (free whole devices are alike).

Free amounts are milli-devices (``MILLI_DEVICES`` = a whole device); -1 pads the rows of nodes with
fewer devices in a batch.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from scoring.framework import MILLI_DEVICES, ArgsError, NodeInfo, PodInfo, reject_unknown_fields
from scoring.resources import CPU
from scoring.row_memo import RowMemo
from scoring.table import Batch, BoolArray, Int64Array

__all__ = [
    "DEFAULT_RESOURCE",
    "FIRST_FIT",
    "DeviceChoice",
    "DeviceResourceArgs",
    "DeviceRowScorer",
    "FirstFit",
    "Fit",
    "FitBatch",
    "Placer",
    "PodDevices",
    "cpu_free",
    "cpu_free_batch",
    "first_fit",
    "first_fit_batch",
    "fit",
    "fit_batch",
    "fit_demand_batch",
    "parse_resource",
    "pod_devices",
    "taken",
]

DEFAULT_RESOURCE = "nvidia.com/gpu"


class DeviceChoice(enum.Enum):
    """Which devices of the chosen node a pod's demand takes (the configuration's ``deviceChoice``)."""

    FIRST_FIT = "FirstFit"
    LEAST_FRAGMENTATION = "LeastFragmentation"


def parse_resource(raw: object, path: str) -> str:
    """The ``resource`` arg: an extended resource name, ``nvidia.com/gpu`` when omitted."""
    if raw is None:
        return DEFAULT_RESOURCE
    if not isinstance(raw, str) or not raw:
        raise ArgsError(f"{path}.resource: must be a non-empty resource name, got {raw!r}")
    return raw


@dataclass(frozen=True, slots=True)
class DeviceResourceArgs:
    """Args of the plugins that name only the device resource (BestFit, DotProduct, GpuClustering,
    GpuPacking)."""

    resource: str

    @classmethod
    def parse(cls, raw: Any, path: str = "args") -> DeviceResourceArgs:
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            raise ArgsError(f"{path}: must be a mapping (optional field 'resource')")
        reject_unknown_fields(raw, path, ("resource",))
        return cls(parse_resource(raw.get("resource"), path))


@dataclass(frozen=True, slots=True)
class PodDevices:
    """What a pod asks of the devices of one resource, and its cpu (plain requests, milli-CPU)."""

    count: int
    milli: int  # per device
    cpu: int

    @property
    def total(self) -> int:
        return self.count * self.milli


def pod_devices(pod: PodInfo, resource: str) -> PodDevices:
    count, milli = pod.device_request(resource)
    if count <= 0 or milli <= 0:
        count = milli = 0
    return PodDevices(count, min(milli, MILLI_DEVICES), max(pod.resources.requests.get(CPU, 0), 0))


class Placer(ABC):
    """Which devices of a node a pod's demand takes. ``resource`` is the device resource it decides
    for (None: any); other resources are placed by first fit (``for_resource``). ``key`` tells
    placers apart in shared per-batch values."""

    key: Hashable = "FirstFit"
    resource: str | None = None

    def for_resource(self, resource: str) -> Placer:
        return self if self.resource is None or self.resource == resource else FIRST_FIT

    @abstractmethod
    def chosen(self, free: Sequence[int], cpu_left: int, demand: PodDevices) -> tuple[int, ...] | None:
        """The indices of the devices the demand takes, in the order taken; None when fewer than
        ``demand.count`` devices have ``demand.milli`` left (the definition). ``cpu_left`` is the
        node's cpu left before the pod."""

    def place(self, free: Sequence[int], cpu_left: int, demand: PodDevices) -> tuple[int, ...] | None:
        """The devices' free amounts after the pod, or None when it does not fit."""
        chosen = self.chosen(free, cpu_left, demand)
        return None if chosen is None else taken(free, chosen, demand.milli)

    @abstractmethod
    def place_batch(self, free: Int64Array, cpu_left: Int64Array, demand: PodDevices) -> tuple[BoolArray, Int64Array]:
        """``place`` per row: whether the demand fits the row's devices, and the rows after it
        (unchanged where it does not fit)."""


class FirstFit(Placer):
    """The first devices in search order with enough left (``first_fit``)."""

    def chosen(self, free: Sequence[int], cpu_left: int, demand: PodDevices) -> tuple[int, ...] | None:
        if demand.count <= 0:
            return ()
        picked = [index for index, amount in enumerate(free) if amount >= demand.milli][: demand.count]
        return tuple(picked) if len(picked) == demand.count else None

    def place_batch(self, free: Int64Array, cpu_left: Int64Array, demand: PodDevices) -> tuple[BoolArray, Int64Array]:
        return first_fit_batch(free, demand.count, demand.milli)


FIRST_FIT: Placer = FirstFit()


def taken(free: Sequence[int], chosen: Sequence[int], milli: int) -> tuple[int, ...]:
    """``free`` after ``milli`` is taken from each device of ``chosen``."""
    after = list(free)
    for index in chosen:
        after[index] -= milli
    return tuple(after)


@dataclass(frozen=True, slots=True)
class Fit:
    """A pod that fits a node by first fit: its demand, and the node's free milli-devices (all of
    them, before the pod) and cpu left (before the pod)."""

    demand: PodDevices
    idle: int
    cpu_left: int


def fit(pod: PodInfo, node: NodeInfo, resource: str) -> Fit | None:
    """``Fit`` when the pod's devices fit the node and its cpu does; else None. Whether the devices
    fit does not depend on which ones a placer takes."""
    demand = pod_devices(pod, resource)
    free = node.devices_free(resource)
    left = cpu_free(node)
    if first_fit(free, demand.count, demand.milli) is None or left < demand.cpu:
        return None
    return Fit(demand, sum(a for a in free if a > 0), left)


@dataclass(frozen=True, slots=True)
class FitBatch:
    """``Fit`` per node of a batch, with where the pod fits: the devices' free milli-devices before
    (``free``) and after the placer's choice (``after``, unchanged where the pod does not fit)."""

    demand: PodDevices
    fits: BoolArray
    idle: Int64Array
    cpu_left: Int64Array
    free: Int64Array
    after: Int64Array


def fit_batch(pod: PodInfo, batch: Batch, resource: str, placer: Placer = FIRST_FIT) -> FitBatch:
    return fit_demand_batch(pod_devices(pod, resource), batch, resource, placer)


def fit_demand_batch(demand: PodDevices, batch: Batch, resource: str, placer: Placer = FIRST_FIT) -> FitBatch:
    """``fit_batch`` for a demand already worked out (what per-node memos are keyed by); computed
    once per batch and placer and shared by the plugins that score it (read-only)."""
    return batch.shared(
        ("fit", resource, demand, placer.key), lambda rows: _fit_demand_batch(demand, rows, resource, placer)
    )


def _fit_demand_batch(demand: PodDevices, batch: Batch, resource: str, placer: Placer) -> FitBatch:
    free = batch.devices_free(resource)
    left = cpu_free_batch(batch)
    fits, after = placer.place_batch(free, left, demand)
    fits &= left >= demand.cpu
    placed = FitBatch(demand, fits, np.maximum(free, 0).sum(axis=1), left, free, after)
    for values in (placed.fits, placed.idle, placed.cpu_left, placed.after):  # shared: no plugin may write
        values.flags.writeable = False
    return placed


class DeviceRowScorer(ABC):
    """A score plugin whose score on a node depends on the node's table row and the pod's demand of
    ``resource`` alone (a ``RowScorer``): ``score_batch`` keeps ``score_rows`` per row and demand.
    ``placer`` is the profile's device choice (``deviceChoice``) for ``resource``."""

    def __init__(self, resource: str, placer: Placer = FIRST_FIT) -> None:
        self._resource = resource
        self.placer = placer.for_resource(resource)
        self._memo = RowMemo()

    def score_batch(self, pod: PodInfo, batch: Batch) -> Int64Array | None:
        demand = self.row_key(pod)
        return self._memo.get(demand, batch, lambda rows: self.score_rows(demand, rows))

    def row_key(self, pod: PodInfo) -> PodDevices:
        return pod_devices(pod, self._resource)

    @abstractmethod
    def score_rows(self, demand: PodDevices, batch: Batch) -> Int64Array:
        """Scores of ``demand`` on ``batch``'s rows (what the memo keeps)."""


def cpu_free(node: NodeInfo) -> int:
    """Allocatable minus requested cpu (plain requests, as the FGD artifact's ``MilliCpuLeft``)."""
    return node.allocatable.get(CPU, 0) - node.requested.get(CPU, 0)


def cpu_free_batch(batch: Batch) -> Int64Array:
    return batch.allocatable(CPU) - batch.requested(CPU)


def first_fit(free: Sequence[int], count: int, milli: int) -> tuple[int, ...] | None:
    """The devices' free amounts after the pod takes ``count`` devices with ``milli`` each, first fit
    in order; None when fewer than ``count`` devices have that much left."""
    if count <= 0:
        return tuple(free)
    after = list(free)
    left = count
    for index, amount in enumerate(after):
        if left == 0:
            break
        if amount >= milli:
            after[index] = amount - milli
            left -= 1
    return tuple(after) if left == 0 else None


def first_fit_batch(free: Int64Array, count: int, milli: int) -> tuple[BoolArray, Int64Array]:
    """``first_fit`` per row of ``free``: whether the pod fits, and the rows after it (unchanged where
    it does not fit)."""
    if count <= 0:
        return np.ones(len(free), dtype=np.bool_), free
    enough = free >= milli
    rank = np.cumsum(enough, axis=1)
    taken = enough & (rank <= count)
    fits = (rank[:, -1] >= count) if free.shape[1] else np.zeros(len(free), dtype=np.bool_)
    after = np.where(fits[:, None] & taken, free - milli, free)
    return fits, after
