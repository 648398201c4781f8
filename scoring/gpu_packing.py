"""GpuPacking: the FGD artifact's GPU packing baseline (``gpu_packing_score.go``), on the placement
the allocator makes (the profile's device choice, ``scoring.devices``; first fit by default)
instead of the artifact's least-left-first pick.

For a pod that asks for devices of ``resource``:

* every device of the node entirely free (n of them): ``max(33 - n, n)`` (an idle node, last);
* the pod would take k ≥ 1 entirely free devices: ``max(50 - k, 33)``;
* it only takes devices already in use: ``max(100 - s // 10, 50)`` with ``s`` the sum over those
  devices of ``free · 100 // 1000`` (fuller devices first).

A pod asking for no devices, or one that does not fit, scores 0. Integer arithmetic throughout.
"""

from __future__ import annotations

import numpy as np

from scoring.devices import FIRST_FIT, DeviceResourceArgs, Placer, cpu_free, cpu_free_batch, pod_devices
from scoring.framework import (
    MAX_NODE_SCORE,
    MILLI_DEVICES,
    MIN_NODE_SCORE,
    NodeInfo,
    PodInfo,
)
from scoring.table import Batch, Int64Array

__all__ = ["NAME", "GpuPacking", "GpuPackingArgs"]

NAME = "GpuPacking"
_IDLE = MAX_NODE_SCORE // 3
_FRESH = MAX_NODE_SCORE // 2


GpuPackingArgs = DeviceResourceArgs  # only ``resource``


class GpuPacking:
    name = NAME

    def __init__(self, args: GpuPackingArgs, placer: Placer = FIRST_FIT) -> None:
        self.args = args
        self.placer = placer.for_resource(args.resource)

    def score(self, pod: PodInfo, node: NodeInfo) -> int:
        demand = pod_devices(pod, self.args.resource)
        if demand.count == 0:
            return MIN_NODE_SCORE
        free = node.devices_free(self.args.resource)
        whole = sum(1 for amount in free if amount == MILLI_DEVICES)
        if whole == len(free):
            return max(_IDLE - whole, whole)
        chosen = self.placer.chosen(free, cpu_free(node), demand)
        if chosen is None:
            return MIN_NODE_SCORE
        taken = [free[index] for index in chosen]
        fresh = sum(1 for amount in taken if amount == MILLI_DEVICES)
        if fresh:
            return max(_FRESH - fresh, _IDLE)
        spare = sum(amount * 100 // MILLI_DEVICES for amount in taken)
        return max(MAX_NODE_SCORE - spare // 10, _FRESH)

    def score_batch(self, pod: PodInfo, batch: Batch) -> Int64Array | None:
        demand = pod_devices(pod, self.args.resource)
        if demand.count == 0:
            return np.zeros(len(batch), dtype=np.int64)
        free = batch.devices_free(self.args.resource)
        devices = (free >= 0).sum(axis=1)
        whole = (free == MILLI_DEVICES).sum(axis=1)
        fits, after = self.placer.place_batch(free, cpu_free_batch(batch), demand)
        taken = after != free
        fresh = (taken & (free == MILLI_DEVICES)).sum(axis=1)
        spare = np.where(taken, free * 100 // MILLI_DEVICES, 0).sum(axis=1)
        used = np.where(fresh > 0, np.maximum(_FRESH - fresh, _IDLE), np.maximum(MAX_NODE_SCORE - spare // 10, _FRESH))
        scores = np.where(fits, used, MIN_NODE_SCORE)
        return np.where(whole == devices, np.maximum(_IDLE - whole, whole), scores).astype(np.int64)
