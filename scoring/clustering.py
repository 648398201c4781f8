"""GpuClustering: the FGD artifact's clustering baseline (``gpu_clustering_score.go``): GPU pods of one
kind together. A pod's kind (``scoring.framework.device_kind``) is a share of one device, or n whole
devices; a node's kinds are those of the pods counted on it (``NodeInfo.pod_kinds``, kept by the
cache). For a pod that asks for devices of ``resource``, in the artifact's integer arithmetic:

* the node runs pods of the pod's kind and of no other kind: ``75 + fill``;
* pods of the pod's kind among other kinds: ``50 + fill``;
* no pods using the resource's devices: ``25 + fill``;
* only pods of other kinds: ``fill``;

with ``fill = 100/4 · (8000 - left) / 8000`` (Go: ``25 · (8000 - left)`` first, then truncated), ``left``
the node's free milli-devices summed and 8000 the largest node spec (MaxSpecGpu). ``left`` is
clamped to 0..8000: for nodes of up to 8 devices this is the artifact's score, a larger node scores
as an idle 8-device one instead of leaving its band (the artifact would go below its band, or below 0).
A pod asking for no devices scores 0. Whether the pod fits is Filter's question, as in the artifact.
A pod kube-scheduler retries while it is assumed still counts as its kind on its assumed node (both
in ``NodeInfo`` and in the batch: only its requests are discounted there).
"""

from __future__ import annotations

import numpy as np

from scoring.best_fit import MAX_SPEC_MILLI
from scoring.devices import DeviceResourceArgs, pod_devices
from scoring.framework import MAX_NODE_SCORE, MILLI_DEVICES, MIN_NODE_SCORE, NodeInfo, PodInfo, device_kind
from scoring.table import Batch, Int64Array

__all__ = ["NAME", "GpuClustering", "GpuClusteringArgs"]

NAME = "GpuClustering"
_FILL = MAX_NODE_SCORE // 4  # the fill term's range: 0..25
_ONLY_KIND = MAX_NODE_SCORE * 3 // 4  # 75
_AMONG_KINDS = MAX_NODE_SCORE * 2 // 4  # 50
_IDLE = MAX_NODE_SCORE // 4  # 25
_OTHER_KINDS = MIN_NODE_SCORE


GpuClusteringArgs = DeviceResourceArgs  # only ``resource``


def _kind(pod: PodInfo, resource: str) -> int | None:
    demand = pod_devices(pod, resource)
    return device_kind(demand.count, demand.milli < MILLI_DEVICES)


class GpuClustering:
    name = NAME

    def __init__(self, args: GpuClusteringArgs) -> None:
        self.args = args

    def score(self, pod: PodInfo, node: NodeInfo) -> int:
        kind = _kind(pod, self.args.resource)
        if kind is None:
            return MIN_NODE_SCORE
        kinds = node.pod_kinds.get(self.args.resource, {})
        present = sum(1 for pods in kinds.values() if pods > 0)
        if kinds.get(kind, 0) > 0:
            band = _ONLY_KIND if present == 1 else _AMONG_KINDS
        else:
            band = _IDLE if present == 0 else _OTHER_KINDS
        left = sum(amount for amount in node.devices_free(self.args.resource) if amount > 0)
        return band + _FILL * (MAX_SPEC_MILLI - min(left, MAX_SPEC_MILLI)) // MAX_SPEC_MILLI

    def score_batch(self, pod: PodInfo, batch: Batch) -> Int64Array | None:
        kind = _kind(pod, self.args.resource)
        if kind is None:
            return np.zeros(len(batch), dtype=np.int64)
        kinds = batch.pod_kinds(self.args.resource)
        present = np.zeros(len(batch), dtype=np.int64)
        for pods in kinds.values():
            present += pods > 0
        same = kinds[kind] > 0 if kind in kinds else np.zeros(len(batch), dtype=np.bool_)
        band = np.where(
            same, np.where(present == 1, _ONLY_KIND, _AMONG_KINDS), np.where(present == 0, _IDLE, _OTHER_KINDS)
        )
        left = np.maximum(batch.devices_free(self.args.resource), 0).sum(axis=1)
        fill = _FILL * (MAX_SPEC_MILLI - np.minimum(left, MAX_SPEC_MILLI)) // MAX_SPEC_MILLI
        scores: Int64Array = (band + fill).astype(np.int64)
        return scores
