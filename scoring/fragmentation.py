"""GpuFragmentation: Fragmentation Gradient Descent (FGD; Weng et al., "Beware of Fragmentation",
USENIX ATC'23), scored on the placement the allocator makes (the profile's device choice,
``scoring.devices``); and ``LeastFragmentation``, the device choice that puts a share on the device
leaving the node least fragmented.

The *target workload* is a list of task types (cpu, per-device milli, device count) with their
popularity. A node's fragmentation for one task type, in milli-devices:

* a CPU-only type: every free milli-device of the node (GPUs no such task can use);
* a type the node cannot host (fewer than ``gpus`` devices with ``gpuMilli`` left, or less cpu
  left than it asks): all of the node's free milli-devices;
* otherwise the free milli-devices of the devices with less than ``gpuMilli`` left.

The node's fragmentation is the popularity-weighted sum over types (``F``, divided by the total
popularity ``W`` it is the expected fragment). FGD places a pod where ``F`` grows least:

* ``mapping: Sigmoid`` (the paper's plugin): ``int(100 · sigmoid(ΔF / (1000·W)))`` with ``ΔF`` =
  ``F`` before - ``F`` after the pod (a reduction scores above 50). Computed exactly as the count of
  the thresholds ``1000·W·logit(k/100)``, k = 1..99, that ``ΔF`` reaches, so the batch and the scalar
  paths agree to the integer.
* ``mapping: Linear``: ``clamp(50 + ΔF / (W · milliPerPoint), 0, 100)`` (floor division): the
  same order with an even resolution of ``milliPerPoint`` expected milli-devices per point.

The cpu left is allocatable minus requested (plain requests); the artifact ignores memory, so does
this. GPU models are not part of a task type here (the node's model is a label scoring does not
see; the openb default trace restricts no pod to a model). A node the pod does not fit scores 0.

``LeastFragmentation`` (``deviceChoice: LeastFragmentation``): a pod asking for a share of one
device takes, of the devices with enough left, the one whose use leaves the smallest ``F`` (the
lowest index among equals); every other demand takes devices by first fit (whole free devices are
alike). The FGD artifact's binder does the same with the sigmoid's integer score (the first device
among equal scores); the exact ``F`` decides here.
"""

from __future__ import annotations

import bisect
import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from scoring.devices import (
    FIRST_FIT,
    DeviceRowScorer,
    Placer,
    PodDevices,
    cpu_free,
    first_fit_batch,
    fit_demand_batch,
    parse_resource,
    pod_devices,
    taken,
)
from scoring.framework import (
    MAX_NODE_SCORE,
    MILLI_DEVICES,
    MIN_NODE_SCORE,
    ArgsError,
    NodeInfo,
    PodInfo,
    int_arg,
    parse_choice,
    reject_unknown_fields,
)
from scoring.table import Batch, BoolArray, Int64Array

__all__ = [
    "NAME",
    "FragmentationMeasure",
    "GpuFragmentation",
    "GpuFragmentationArgs",
    "LeastFragmentation",
    "ScoreMapping",
    "TaskType",
    "fragmentation",
]

_STATES_KEPT = 65_536  # FragmentationMeasure.of's results per workload (all dropped when full)

NAME = "GpuFragmentation"
_TASK_FIELDS = ("cpu", "gpuMilli", "gpus", "popularity")


class ScoreMapping(enum.Enum):
    SIGMOID = "Sigmoid"
    LINEAR = "Linear"


@dataclass(frozen=True, slots=True)
class TaskType:
    cpu: int  # milli-CPU
    gpu_milli: int  # per device; 0 for a CPU-only type
    gpus: int
    popularity: int


@dataclass(frozen=True, slots=True)
class GpuFragmentationArgs:
    resource: str
    workload: tuple[TaskType, ...]
    mapping: ScoreMapping = ScoreMapping.SIGMOID
    milli_per_point: int = 10

    @classmethod
    def parse(cls, raw: Any, path: str = "args") -> GpuFragmentationArgs:
        if not isinstance(raw, Mapping):
            raise ArgsError(f"{path}: must be a mapping with a 'workload' field (the target task types)")
        reject_unknown_fields(raw, path, ("resource", "workload", "mapping", "milliPerPoint"))
        resource = parse_resource(raw.get("resource"), path)
        workload = raw.get("workload")
        if not isinstance(workload, Sequence) or isinstance(workload, str) or not workload:
            raise ArgsError(f"{path}.workload: must be a non-empty list of {{cpu, gpuMilli, gpus, popularity}}")
        types = []
        for index, task in enumerate(workload):
            where = f"{path}.workload[{index}]"
            if not isinstance(task, Mapping):
                raise ArgsError(f"{where}: must be a mapping with {', '.join(_TASK_FIELDS)}")
            reject_unknown_fields(task, where, _TASK_FIELDS)
            cpu = int_arg(task, "cpu", where, low=0, default=0)
            milli = int_arg(task, "gpuMilli", where, low=0, high=MILLI_DEVICES, default=0)
            gpus = int_arg(task, "gpus", where, low=0, default=0)
            if (milli == 0) != (gpus == 0):
                raise ArgsError(f"{where}: gpuMilli and gpus must both be 0 (a CPU-only type) or both > 0")
            popularity = int_arg(task, "popularity", where, low=1)
            types.append(TaskType(cpu, milli, gpus, popularity))
        mapping = parse_choice(ScoreMapping, raw.get("mapping", ScoreMapping.SIGMOID.value), f"{path}.mapping")
        step = int_arg(raw, "milliPerPoint", path, above=0, default=10)
        return cls(resource, tuple(types), mapping, step)


def fragmentation(free: Sequence[int], cpu_left: int, workload: Sequence[TaskType]) -> int:
    """``F``: the popularity-weighted fragmented milli-devices of a node (the definition)."""
    left = [amount for amount in free if amount > 0]
    idle = sum(left)
    total = 0
    for task in workload:
        fragment = idle
        if task.gpus and cpu_left >= task.cpu and sum(1 for a in free if a >= task.gpu_milli) >= task.gpus:
            fragment = sum(a for a in left if a < task.gpu_milli)
        total += task.popularity * fragment
    return total


class FragmentationMeasure:
    """``fragmentation`` of many nodes at once (the batch twin), for one workload."""

    def __init__(self, workload: Sequence[TaskType]) -> None:
        self.workload = tuple(workload)
        self.weight = sum(t.popularity for t in workload)
        self._cpu = np.array([t.cpu for t in workload], dtype=np.int64)
        self._milli = np.array([t.gpu_milli for t in workload], dtype=np.int64)
        self._gpus = np.array([t.gpus for t in workload], dtype=np.int64)
        self._needs_gpus = self._gpus > 0
        self._popularity = np.array([t.popularity for t in workload], dtype=np.int64)
        self._levels, self._level_of = np.unique(self._milli, return_inverse=True)
        # Per free amount a device can have (-1, no device, to MILLI_DEVICES): per distinct level, the
        # amount if 0 < amount < level (short of it) and whether amount >= level; then max(amount, 0).
        amounts = np.arange(-1, MILLI_DEVICES + 1, dtype=np.int64)[:, None]
        short = np.where((amounts > 0) & (amounts < self._levels[None, :]), amounts, 0)
        enough = (amounts >= self._levels[None, :]).astype(np.int64)
        self._per_amount = np.concatenate((short, enough, np.maximum(amounts, 0)), axis=1)
        self._count_column = len(self._levels) + self._level_of
        self._type_cpus = sorted({t.cpu for t in workload})
        self._kept: dict[tuple[tuple[int, ...], int], int] = {}

    def of(self, free: Sequence[int], cpu_left: int) -> int:
        """``fragmentation`` of one node, kept per state: it reads the devices' free amounts as a
        multiset and ``cpu_left`` only against the types' cpu, so nodes in one state (their amounts
        in any order, as many type cpus reached) share one result."""
        key = (tuple(sorted(free)), bisect.bisect_right(self._type_cpus, cpu_left))
        value = self._kept.get(key)
        if value is None:
            if len(self._kept) >= _STATES_KEPT:
                self._kept.clear()
            value = self._kept[key] = fragmentation(free, cpu_left, self.workload)
        return value

    def batch(self, free: Int64Array, cpu_left: Int64Array) -> Int64Array:
        """``fragmentation`` per row, by table lookup: ``self._per_amount[a + 1]`` holds what one device
        with ``a`` free milli-devices adds per distinct per-device milli of the types (its free amount if
        it is short of it, 1 if it has enough) and to the node's idle total, so a row's sums are one
        gather and one sum (a request computes few rows: numpy's per-call cost dominates)."""
        sums = self._per_amount[np.maximum(free, -1) + 1].sum(axis=1)  # rows x (2 levels + 1)
        return self._from_sums(sums, cpu_left)

    def after_each(self, free: Int64Array, cpu_after: Int64Array, milli: int) -> Int64Array:
        """rows x devices: ``fragmentation`` of the row after ``milli`` is taken from that one device
        (meaningless where the device has less than ``milli`` left), with ``cpu_after`` cpu left."""
        clipped = np.maximum(free, -1)
        before = self._per_amount[clipped + 1]  # rows x devices x sums
        change = self._per_amount[np.maximum(clipped - milli, -1) + 1] - before
        sums = before.sum(axis=1)[:, None, :] + change  # rows x devices x sums
        return self._from_sums(sums, cpu_after[:, None])

    def _from_sums(self, sums: Int64Array, cpu_left: Int64Array) -> Int64Array:
        short = sums[..., self._level_of]  # ... x types
        counts = sums[..., self._count_column]
        hosts = self._needs_gpus & (cpu_left[..., None] >= self._cpu) & (counts >= self._gpus)
        result: Int64Array = np.where(hosts, short, sums[..., -1:]) @ self._popularity
        return result


class LeastFragmentation(Placer):
    """``deviceChoice: LeastFragmentation`` for ``resource``: a share of one device goes to the device
    that leaves the least ``fragmentation`` for ``workload`` (the lowest index among equals); every
    other demand by first fit."""

    def __init__(self, workload: Sequence[TaskType], resource: str) -> None:
        self.measure = FragmentationMeasure(workload)
        self.resource = resource
        self.key = ("LeastFragmentation", id(self))

    @staticmethod
    def _share(demand: PodDevices) -> bool:
        return demand.count == 1 and demand.milli < MILLI_DEVICES

    def chosen(self, free: Sequence[int], cpu_left: int, demand: PodDevices) -> tuple[int, ...] | None:
        if not self._share(demand):
            return FIRST_FIT.chosen(free, cpu_left, demand)
        best: tuple[int, int] | None = None
        tried: set[int] = set()  # a device with the same amount left as one before leaves the same node
        for index, amount in enumerate(free):
            if amount >= demand.milli and amount not in tried:
                tried.add(amount)
                left = self.measure.of(taken(free, (index,), demand.milli), cpu_left - demand.cpu)
                if best is None or left < best[0]:
                    best = (left, index)
        return None if best is None else (best[1],)

    def place_batch(self, free: Int64Array, cpu_left: Int64Array, demand: PodDevices) -> tuple[BoolArray, Int64Array]:
        if not self._share(demand) or not free.shape[1]:
            return first_fit_batch(free, demand.count, demand.milli)
        enough = free >= demand.milli
        left = np.where(enough, self.measure.after_each(free, cpu_left - demand.cpu, demand.milli), _NEVER)
        choice = left.argmin(axis=1)  # the first of equals
        fits: BoolArray = np.any(enough, axis=1)
        after = free.copy()
        rows = np.arange(len(free))
        after[rows, choice] -= np.where(fits, demand.milli, 0)
        return fits, after


_NEVER = np.iinfo(np.int64).max


class GpuFragmentation(DeviceRowScorer):
    name = NAME

    def __init__(self, args: GpuFragmentationArgs, placer: Placer = FIRST_FIT) -> None:
        super().__init__(args.resource, placer)
        self.args = args
        self.measure = FragmentationMeasure(args.workload)
        self.weight = self.measure.weight
        # ΔF reaching thresholds[k-1] scores at least k (Sigmoid): 1000·W·logit(k/100).
        scale = MILLI_DEVICES * self.weight
        self._thresholds = [scale * math.log(k / (MAX_NODE_SCORE - k)) for k in range(1, MAX_NODE_SCORE)]
        self._threshold_array = np.array(self._thresholds, dtype=np.float64)

    # ------------------------------------------------------------------ scalar (the definition)
    def score(self, pod: PodInfo, node: NodeInfo) -> int:
        demand = pod_devices(pod, self.args.resource)
        free = node.devices_free(self.args.resource)
        left = cpu_free(node)
        after = self.placer.place(free, left, demand)
        if after is None or left < demand.cpu:
            return MIN_NODE_SCORE
        # ``fragmentation`` of both states, kept per state by the measure (nodes pass through few)
        delta = self.measure.of(free, left) - self.measure.of(after, left - demand.cpu)
        return self._map(delta)

    def _map(self, delta: int) -> int:
        if self.args.mapping is ScoreMapping.SIGMOID:
            return bisect.bisect_right(self._thresholds, float(delta))
        step = self.weight * self.args.milli_per_point
        return max(MIN_NODE_SCORE, min(MAX_NODE_SCORE, MAX_NODE_SCORE // 2 + delta // step))

    # ------------------------------------------------------------------ batch twin
    def score_rows(self, demand: PodDevices, batch: Batch) -> Int64Array:
        placed = fit_demand_batch(demand, batch, self.args.resource, self.placer)  # shared with BestFit
        free, left = placed.free, placed.cpu_left
        # Before and after in one pass: a request computes few rows, so numpy's per-call cost dominates.
        both = self.measure.batch(np.concatenate((free, placed.after)), np.concatenate((left, left - demand.cpu)))
        delta = both[: len(free)] - both[len(free) :]
        if self.args.mapping is ScoreMapping.SIGMOID:
            scores = np.searchsorted(self._threshold_array, delta.astype(np.float64), side="right").astype(np.int64)
        else:
            step = self.weight * self.args.milli_per_point
            scores = np.minimum(np.maximum(MAX_NODE_SCORE // 2 + delta // step, MIN_NODE_SCORE), MAX_NODE_SCORE)
        return np.where(placed.fits, scores, MIN_NODE_SCORE).astype(np.int64)
