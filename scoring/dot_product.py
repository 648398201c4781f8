"""DotProduct: the FGD artifact's dot-product baseline (``dot_product_score.go`` with the run
scripts' ``dimExtMethod: merge``, ``normMethod: max``): the node's free vector and the pod's request
vector, (cpu, milli-devices) each divided by the largest node spec (128 cores, 8 GPUs), and

    score = int(100 · (1 - (free · request) / 2))

(a smaller product, i.e. less of what the pod needs left over, scores higher), in exact integers:
``(100·D - 50·(cpuLeft·cpu + 256·milliLeft·milli)) // D`` with ``D = 128000²``. A node the pod does
not fit (first fit) scores 0.
"""

from __future__ import annotations

import numpy as np

from scoring.best_fit import MAX_SPEC_CPU, MAX_SPEC_MILLI
from scoring.devices import DeviceResourceArgs, fit, fit_batch
from scoring.framework import MAX_NODE_SCORE, MIN_NODE_SCORE, NodeInfo, PodInfo
from scoring.table import Batch, Int64Array

__all__ = ["NAME", "DotProduct", "DotProductArgs"]

NAME = "DotProduct"
_D = MAX_SPEC_CPU * MAX_SPEC_CPU
_GPU_FACTOR = _D // (MAX_SPEC_MILLI * MAX_SPEC_MILLI)  # 256


DotProductArgs = DeviceResourceArgs  # only ``resource``


class DotProduct:
    name = NAME

    def __init__(self, args: DotProductArgs) -> None:
        self.args = args

    def score(self, pod: PodInfo, node: NodeInfo) -> int:
        placed = fit(pod, node, self.args.resource)
        if placed is None:
            return MIN_NODE_SCORE
        demand = placed.demand
        product = placed.cpu_left * demand.cpu + _GPU_FACTOR * placed.idle * demand.total
        numerator = MAX_NODE_SCORE * _D - MAX_NODE_SCORE // 2 * product
        return max(MIN_NODE_SCORE, min(MAX_NODE_SCORE, numerator // _D))

    def score_batch(self, pod: PodInfo, batch: Batch) -> Int64Array | None:
        placed = fit_batch(pod, batch, self.args.resource)
        demand, left = placed.demand, placed.cpu_left
        if int(np.abs(left).max(initial=0)) * max(demand.cpu, 1) >= 2**50:
            return None  # beyond exact int64 products: the scalar path
        product = left * demand.cpu + _GPU_FACTOR * placed.idle * demand.total
        numerator = MAX_NODE_SCORE * _D - MAX_NODE_SCORE // 2 * product
        scores = np.minimum(np.maximum(numerator // _D, MIN_NODE_SCORE), MAX_NODE_SCORE)
        return np.where(placed.fits, scores, MIN_NODE_SCORE).astype(np.int64)
