"""GpuCpuBalance: keep each node's free cpu in step with its free GPUs, so that no GPU is left
without the cpu its pods need.

A GPU pod asks for cpu too, and the workload's cpu per GPU (``cpuPerGpu``, milli-CPU per whole
device: on the openb default trace 10,882) says how much. A node built with less cpu per device
than that is meant for pods that ask less, so a node's *cpu per device* is the smaller of
``cpuPerGpu`` and its allocatable cpu over its devices. Its free cpu *feeds*
``cpuLeft · 1000 // cpu per device`` milli-devices; the free milli-devices beyond that are
*stranded*: the pods that would use them find no cpu there.

    stranded = max(0, idle - max(cpuLeft, 0) · 1000 // min(cpuPerGpu, allocatable cpu // devices))
    score    = clamp(50 + (stranded before - stranded after) // milliPerPoint, 0, 100)

``idle`` is the node's free milli-devices of ``resource`` (``scoring.devices``), ``cpuLeft``
allocatable minus requested cpu (plain requests), both before and after the pod; a node the pod
does not fit (first fit, or cpu) scores 0. 50 is "no change", as GpuFragmentation's Linear
mapping on the same scale of ``milliPerPoint`` milli-devices per point. Stranding grows when a pod
takes much cpu for its devices (a share with many cores) where cpu per free device is already
short, and shrinks when a pod takes devices with little cpu where it is: pods
go to nodes whose cpu matches theirs. An empty node strands nothing, and nodes of one kind
stranding nothing score alike, so the plugin never spreads pods over equal nodes by itself.
GpuFragmentation asks whether each typical pod fits *now*; this counts the cpu the free devices
will need over time (docs/simulate.md).

The plugin sits out (``applies``) for pods that ask for no device of ``resource``: where a CPU-only
pod goes is ScarceResourceAvoidance's (nodes without GPUs first) and IdleGpuAvoidance's (among GPU
nodes, those whose GPUs are in use) to decide. Measured on the CPU-heavy workload family of
docs/simulate.md, judging CPU-only pods here as well left fewer GPUs allocated.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from scoring.devices import FIRST_FIT, DeviceRowScorer, Placer, PodDevices, fit, fit_demand_batch, parse_resource
from scoring.framework import (
    MAX_NODE_DEVICES,
    MAX_NODE_SCORE,
    MILLI_DEVICES,
    MIN_NODE_SCORE,
    ArgsError,
    NodeInfo,
    PodInfo,
    int_arg,
    reject_unknown_fields,
)
from scoring.resources import CPU
from scoring.table import Batch, Int64Array

__all__ = ["NAME", "GpuCpuBalance", "GpuCpuBalanceArgs", "node_cpu_per_gpu", "stranded"]

NAME = "GpuCpuBalance"
DEFAULT_MILLI_PER_POINT = 10
MAX_CPU_PER_GPU = 10**9  # a million cores per device: far past any node, and int64-safe below


@dataclass(frozen=True, slots=True)
class GpuCpuBalanceArgs:
    resource: str
    cpu_per_gpu: int  # milli-CPU the workload's pods ask per whole device
    milli_per_point: int = DEFAULT_MILLI_PER_POINT

    @classmethod
    def parse(cls, raw: Any, path: str = "args") -> GpuCpuBalanceArgs:
        if not isinstance(raw, Mapping) or "cpuPerGpu" not in raw:
            raise ArgsError(
                f"{path}.cpuPerGpu: required: the milli-CPU your GPU pods ask per whole device "
                "(kube-gpu-extender workload --from-cluster, or --pods <pod list>)"
            )
        reject_unknown_fields(raw, path, ("resource", "cpuPerGpu", "milliPerPoint"))
        return cls(
            parse_resource(raw.get("resource"), path),
            int_arg(raw, "cpuPerGpu", path, above=0, high=MAX_CPU_PER_GPU, unit=" (milli-CPU per whole device)"),
            int_arg(
                raw,
                "milliPerPoint",
                path,
                above=0,
                high=MAX_NODE_DEVICES * MILLI_DEVICES,
                default=DEFAULT_MILLI_PER_POINT,
            ),
        )


def node_cpu_per_gpu(cpu_per_gpu: int, allocatable_cpu: int, devices: int) -> int:
    """The cpu a node's device needs: ``cpu_per_gpu``, or less on a node built with less (at least 1)."""
    if devices <= 0:
        return cpu_per_gpu
    return max(1, min(cpu_per_gpu, allocatable_cpu // devices))


def stranded(idle: int, cpu_left: int, per_gpu: int) -> int:
    """Free milli-devices beyond what the free cpu feeds at ``per_gpu`` (the definition). Cpu beyond
    what a node's most devices need feeds nothing more (keeps the batch twin in int64)."""
    cpu = min(max(cpu_left, 0), per_gpu * MAX_NODE_DEVICES)
    return max(0, idle - cpu * MILLI_DEVICES // per_gpu)


class GpuCpuBalance(DeviceRowScorer):
    name = NAME

    def __init__(self, args: GpuCpuBalanceArgs, placer: Placer = FIRST_FIT) -> None:
        super().__init__(args.resource, placer)  # which devices does not change the score: only shared
        self.args = args

    def applies(self, pod: PodInfo) -> bool:
        """False for a pod that asks for no device of ``resource``."""
        return pod.device_request(self.args.resource)[0] > 0

    def score(self, pod: PodInfo, node: NodeInfo) -> int:
        placed = fit(pod, node, self.args.resource)
        if placed is None:
            return MIN_NODE_SCORE
        demand = placed.demand
        devices = len(node.devices_free(self.args.resource))
        per_gpu = node_cpu_per_gpu(self.args.cpu_per_gpu, node.allocatable.get(CPU, 0), devices)
        before = stranded(placed.idle, placed.cpu_left, per_gpu)
        after = stranded(placed.idle - demand.total, placed.cpu_left - demand.cpu, per_gpu)
        return max(
            MIN_NODE_SCORE, min(MAX_NODE_SCORE, MAX_NODE_SCORE // 2 + (before - after) // self.args.milli_per_point)
        )

    def score_rows(self, demand: PodDevices, batch: Batch) -> Int64Array:
        placed = fit_demand_batch(demand, batch, self.args.resource, self.placer)  # shared with the other plugins
        # per node: the cpu its device needs (a node without devices strands nothing at any value)
        devices = (placed.free >= 0).sum(axis=1)
        per_gpu = batch.allocatable(CPU) // np.maximum(devices, 1)
        per_gpu = np.maximum(np.minimum(per_gpu, self.args.cpu_per_gpu), 1)
        # before and after the pod in one pass (a request computes few rows: numpy's per-call cost dominates)
        cpu = np.array((placed.cpu_left, placed.cpu_left - demand.cpu))
        cpu = np.minimum(np.maximum(cpu, 0), per_gpu * MAX_NODE_DEVICES)
        stranded_both = np.array((placed.idle, placed.idle - demand.total)) - cpu * MILLI_DEVICES // per_gpu
        np.maximum(stranded_both, 0, out=stranded_both)
        change = (stranded_both[0] - stranded_both[1]) // self.args.milli_per_point
        scores = np.minimum(np.maximum(change + MAX_NODE_SCORE // 2, MIN_NODE_SCORE), MAX_NODE_SCORE)
        return np.where(placed.fits, scores, MIN_NODE_SCORE).astype(np.int64)
