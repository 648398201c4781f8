"""GpuFragmentation: Fragmentation Gradient Descent (FGD; Weng et al., "Beware of Fragmentation",
USENIX ATC'23), scored on the placement the allocator makes (first fit, ``scoring.devices``).

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
    DeviceRowScorer,
    PodDevices,
    cpu_free,
    first_fit,
    fit_demand_batch,
    parse_resource,
    pod_devices,
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
from scoring.table import Batch, Int64Array

__all__ = ["NAME", "GpuFragmentation", "GpuFragmentationArgs", "ScoreMapping", "TaskType", "fragmentation"]

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


class GpuFragmentation(DeviceRowScorer):
    name = NAME

    def __init__(self, args: GpuFragmentationArgs) -> None:
        super().__init__(args.resource)
        self.args = args
        workload = args.workload
        self.weight = sum(t.popularity for t in workload)
        self._cpu = np.array([t.cpu for t in workload], dtype=np.int64)
        self._milli = np.array([t.gpu_milli for t in workload], dtype=np.int64)
        self._gpus = np.array([t.gpus for t in workload], dtype=np.int64)
        self._needs_gpus = self._gpus[None, :] > 0  # 1 x types
        self._popularity = np.array([t.popularity for t in workload], dtype=np.int64)
        self._levels, self._level_of = np.unique(self._milli, return_inverse=True)
        # Per free amount a device can have (-1, no device, to MILLI_DEVICES): per distinct level, the
        # amount if 0 < amount < level (short of it) and whether amount >= level; then max(amount, 0).
        amounts = np.arange(-1, MILLI_DEVICES + 1, dtype=np.int64)[:, None]
        short = np.where((amounts > 0) & (amounts < self._levels[None, :]), amounts, 0)
        enough = (amounts >= self._levels[None, :]).astype(np.int64)
        self._per_amount = np.concatenate((short, enough, np.maximum(amounts, 0)), axis=1)
        self._count_column = len(self._levels) + self._level_of
        # ΔF reaching thresholds[k-1] scores at least k (Sigmoid): 1000·W·logit(k/100).
        scale = MILLI_DEVICES * self.weight
        self._thresholds = [scale * math.log(k / (MAX_NODE_SCORE - k)) for k in range(1, MAX_NODE_SCORE)]
        self._threshold_array = np.array(self._thresholds, dtype=np.float64)

    # ------------------------------------------------------------------ scalar (the definition)
    def score(self, pod: PodInfo, node: NodeInfo) -> int:
        demand = pod_devices(pod, self.args.resource)
        free = node.devices_free(self.args.resource)
        after = first_fit(free, demand.count, demand.milli)
        left = cpu_free(node)
        if after is None or left < demand.cpu:
            return MIN_NODE_SCORE
        workload = self.args.workload
        delta = fragmentation(free, left, workload) - fragmentation(after, left - demand.cpu, workload)
        return self._map(delta)

    def _map(self, delta: int) -> int:
        if self.args.mapping is ScoreMapping.SIGMOID:
            return bisect.bisect_right(self._thresholds, float(delta))
        step = self.weight * self.args.milli_per_point
        return max(MIN_NODE_SCORE, min(MAX_NODE_SCORE, MAX_NODE_SCORE // 2 + delta // step))

    # ------------------------------------------------------------------ batch twin
    def _fragmentation_batch(self, free: Int64Array, cpu_left: Int64Array) -> Int64Array:
        """``fragmentation`` per row, by table lookup: ``self._per_amount[a + 1]`` holds what one device
        with ``a`` free milli-devices adds per distinct per-device milli of the types (its free amount if
        it is short of it, 1 if it has enough) and to the node's idle total, so a row's sums are one
        gather and one sum (a request computes few rows: numpy's per-call cost dominates)."""
        sums = self._per_amount[np.maximum(free, -1) + 1].sum(axis=1)  # rows x (2 levels + 1)
        short = sums[:, self._level_of]  # rows x types
        counts = sums[:, self._count_column]
        hosts = self._needs_gpus & (cpu_left[:, None] >= self._cpu[None, :]) & (counts >= self._gpus[None, :])
        result: Int64Array = np.where(hosts, short, sums[:, -1:]) @ self._popularity
        return result

    def score_rows(self, demand: PodDevices, batch: Batch) -> Int64Array:
        placed = fit_demand_batch(demand, batch, self.args.resource)  # shared with BestFit
        free, left = placed.free, placed.cpu_left
        # Before and after in one pass: a request computes few rows, so numpy's per-call cost dominates.
        both = self._fragmentation_batch(
            np.concatenate((free, placed.after)), np.concatenate((left, left - demand.cpu))
        )
        delta = both[: len(free)] - both[len(free) :]
        if self.args.mapping is ScoreMapping.SIGMOID:
            scores = np.searchsorted(self._threshold_array, delta.astype(np.float64), side="right").astype(np.int64)
        else:
            step = self.weight * self.args.milli_per_point
            scores = np.minimum(np.maximum(MAX_NODE_SCORE // 2 + delta // step, MIN_NODE_SCORE), MAX_NODE_SCORE)
        return np.where(placed.fits, scores, MIN_NODE_SCORE).astype(np.int64)
