"""IdleGpuAvoidance: a pod that asks for no GPU goes where the GPUs are already in use, so the cpu it
takes is cpu no GPU pod was going to need.

On a node with idle GPUs, a CPU-only pod's cpu is cpu those GPUs' future pods lack; on a node whose
GPUs are all allocated, it takes cpu nobody else will ask for until they free up. So CPU-only pods
fill the nodes whose GPUs are busiest first (ScarceResourceAvoidance one step further: that plugin
keeps them off GPU nodes where there are others, this one chooses among GPU nodes):

    score = 100 - floor(100 · idle milli-devices / the node's milli-devices of ``resource``)

A node without devices of ``resource`` scores 100; a node the pod does not fit (cpu) scores 0.
Devices are counted as ``NodeInfo.devices_free`` does (whole devices of a device plugin, milli-devices
of DRA devices). The plugin sits out (``applies``) for pods that ask for a device of ``resource``:
where a GPU pod goes is GpuFragmentation's, GpuCpuBalance's and GpuModelBalance's to decide.
"""

from __future__ import annotations

import numpy as np

from scoring.devices import FIRST_FIT, DeviceResourceArgs, DeviceRowScorer, Placer, PodDevices, fit, fit_demand_batch
from scoring.framework import MAX_NODE_SCORE, MILLI_DEVICES, MIN_NODE_SCORE, NodeInfo, PodInfo
from scoring.table import Batch, Int64Array

__all__ = ["NAME", "IdleGpuAvoidance", "IdleGpuAvoidanceArgs", "idle_avoidance"]

NAME = "IdleGpuAvoidance"

IdleGpuAvoidanceArgs = DeviceResourceArgs  # only ``resource``


def idle_avoidance(idle: int, devices: int) -> int:
    """The score of a node with ``idle`` free milli-devices of its ``devices`` devices (the definition)."""
    if devices <= 0:
        return MAX_NODE_SCORE
    return MAX_NODE_SCORE - MAX_NODE_SCORE * idle // (devices * MILLI_DEVICES)


class IdleGpuAvoidance(DeviceRowScorer):
    name = NAME

    def __init__(self, args: IdleGpuAvoidanceArgs, placer: Placer = FIRST_FIT) -> None:
        super().__init__(args.resource, placer)  # which devices does not change the score: only shared
        self.args = args

    def applies(self, pod: PodInfo) -> bool:
        """False for a pod that asks for a device of ``resource``."""
        return pod.device_request(self.args.resource)[0] <= 0

    def score(self, pod: PodInfo, node: NodeInfo) -> int:
        placed = fit(pod, node, self.args.resource)
        if placed is None:
            return MIN_NODE_SCORE
        return idle_avoidance(placed.idle, len(node.devices_free(self.args.resource)))

    def score_rows(self, demand: PodDevices, batch: Batch) -> Int64Array:
        placed = fit_demand_batch(demand, batch, self.args.resource, self.placer)  # shared with the other plugins
        devices = (placed.free >= 0).sum(axis=1)
        idle_share = MAX_NODE_SCORE * placed.idle // np.maximum(devices * MILLI_DEVICES, 1)
        scores = np.where(devices > 0, MAX_NODE_SCORE - idle_share, MAX_NODE_SCORE)
        return np.where(placed.fits, scores, MIN_NODE_SCORE).astype(np.int64)
