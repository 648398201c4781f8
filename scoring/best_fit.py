"""BestFit: the FGD artifact's best-fit baseline (``best_fit_score.go``): the node left with the
least cpu and devices after the pod, each normalised by the largest node spec of the trace
(128 cores, 8 GPUs) and weighted ½:

    score = int(100 · (1 - ½·(cpuLeft - cpu) / 128000 - ½·(milliLeft - milli) / 8000))

in exact integers (``(25_600_000 - 100·cpu' - 1600·milli') // 256_000``, clamped to 0..100).
``cpuLeft`` is allocatable minus requested cpu (plain requests), ``milliLeft`` the node's free
milli-devices of ``resource``, ``milli`` what the pod takes of them. A node the pod does not fit
(cpu or devices, first fit) scores 0. The artifact normalises the scores afterwards; that keeps
their order, which is all kube-scheduler's choice reads from the best node.
"""

from __future__ import annotations

import numpy as np

from scoring.devices import FIRST_FIT, DeviceResourceArgs, DeviceRowScorer, Placer, PodDevices, fit, fit_demand_batch
from scoring.framework import MAX_NODE_SCORE, MIN_NODE_SCORE, NodeInfo, PodInfo
from scoring.table import Batch, Int64Array

__all__ = ["MAX_SPEC_CPU", "MAX_SPEC_MILLI", "NAME", "BestFit", "BestFitArgs"]

NAME = "BestFit"
MAX_SPEC_CPU = 128_000  # the artifact's MaxSpecCpu (milli-CPU)
MAX_SPEC_MILLI = 8_000  # MaxSpecGpu (milli-GPUs)
_DENOMINATOR = 2 * MAX_SPEC_CPU
_CPU_FACTOR = MAX_NODE_SCORE * _DENOMINATOR // (2 * MAX_SPEC_CPU)  # 100
_GPU_FACTOR = MAX_NODE_SCORE * _DENOMINATOR // (2 * MAX_SPEC_MILLI)  # 1600 per milli at 1/2 weight


BestFitArgs = DeviceResourceArgs  # only ``resource``


def _value(cpu_after: int, milli_after: int) -> int:
    numerator = MAX_NODE_SCORE * _DENOMINATOR - _CPU_FACTOR * cpu_after - _GPU_FACTOR * milli_after
    return max(MIN_NODE_SCORE, min(MAX_NODE_SCORE, numerator // _DENOMINATOR))


class BestFit(DeviceRowScorer):
    name = NAME

    def __init__(self, args: BestFitArgs, placer: Placer = FIRST_FIT) -> None:
        super().__init__(args.resource, placer)  # which devices does not change the score: only shared
        self.args = args

    def score(self, pod: PodInfo, node: NodeInfo) -> int:
        placed = fit(pod, node, self.args.resource)
        if placed is None:
            return MIN_NODE_SCORE
        return _value(placed.cpu_left - placed.demand.cpu, placed.idle - placed.demand.total)

    def score_rows(self, demand: PodDevices, batch: Batch) -> Int64Array:
        placed = fit_demand_batch(demand, batch, self.args.resource, self.placer)
        milli_after = placed.idle - demand.total
        cpu_after = placed.cpu_left - demand.cpu
        numerator = MAX_NODE_SCORE * _DENOMINATOR - _CPU_FACTOR * cpu_after - _GPU_FACTOR * milli_after
        scores = np.minimum(np.maximum(numerator // _DENOMINATOR, MIN_NODE_SCORE), MAX_NODE_SCORE)
        return np.where(placed.fits, scores, MIN_NODE_SCORE).astype(np.int64)
