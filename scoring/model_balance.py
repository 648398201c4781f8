"""GpuModelBalance: keep every GPU model's free share in step with the cluster's, so that pods pinned
to a model (a nodeSelector or required node affinity on the model label) still find room on it.

ScarceResourceAvoidance one level down: a pod that may run on several GPU models takes the GPUs of
the model with the most room for its size, and leaves a model that is filling up faster than the
rest to the pods that can run nowhere else. A node's *model* is the value of its label ``label``
(``nvidia.com/gpu.product`` by default, the label NVIDIA's GPU feature discovery sets):

    free share of a model = free milli-devices of ``resource`` on its nodes / their milli-devices
    score = clamp(50 + floor(100 · (free share of the node's model - free share of all models)), 0, 100)

One point per percentage point. The shares count every node of the cluster that carries the label
(the scheduling cache's table), not only the candidates: a pod pinned to one model sees only nodes of
that model and so scores them alike. A node without the label, or a cluster whose labelled nodes
have no devices, scores 50. Devices are counted as ``NodeInfo.devices_free`` does (whole devices of a
device plugin, milli-devices of DRA devices). The plugin sits out (``applies``) for pods that ask
for no device of ``resource``: which model's nodes a CPU-only pod uses takes no GPU from anyone.

The score depends on the whole cluster, not on one node: ``score_batch`` reads the table of the
batch; ``score`` (one node, for /debug and the node-by-node fallback) the cluster as the last table
this plugin scored showed it (50 before any). ``model_balance`` is the definition both use.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from scoring.devices import parse_resource
from scoring.framework import (
    MAX_NODE_SCORE,
    MILLI_DEVICES,
    MIN_NODE_SCORE,
    ArgsError,
    NodeInfo,
    PodInfo,
    reject_unknown_fields,
)
from scoring.table import Batch, Int64Array, NodeTable

__all__ = ["DEFAULT_LABEL", "NAME", "GpuModelBalance", "GpuModelBalanceArgs", "model_balance"]

NAME = "GpuModelBalance"
DEFAULT_LABEL = "nvidia.com/gpu.product"
NEUTRAL = MAX_NODE_SCORE // 2


@dataclass(frozen=True, slots=True)
class GpuModelBalanceArgs:
    resource: str
    label: str = DEFAULT_LABEL

    @classmethod
    def parse(cls, raw: Any, path: str = "args") -> GpuModelBalanceArgs:
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            raise ArgsError(f"{path}: must be a mapping (resource, label)")
        reject_unknown_fields(raw, path, ("resource", "label"))
        label = raw.get("label", DEFAULT_LABEL)
        if not isinstance(label, str) or not label:
            raise ArgsError(f"{path}.label: must be a non-empty node label key, e.g. {DEFAULT_LABEL}")
        return cls(parse_resource(raw.get("resource"), path), label)


def model_balance(model_free: int, model_total: int, cluster_free: int, cluster_total: int) -> int:
    """The score of a node whose model has ``model_free`` of ``model_total`` milli-devices free, in a
    cluster with ``cluster_free`` of ``cluster_total`` free (the definition; exact integers)."""
    if model_total <= 0 or cluster_total <= 0:
        return NEUTRAL
    numerator = MAX_NODE_SCORE * (model_free * cluster_total - cluster_free * model_total)
    return max(MIN_NODE_SCORE, min(MAX_NODE_SCORE, NEUTRAL + numerator // (model_total * cluster_total)))


@dataclass(frozen=True, slots=True)
class _Shares:
    """Per model (the table's label values): free and total milli-devices; per row, its score."""

    stamp: tuple[int, int]
    values: tuple[str, ...]
    free: tuple[int, ...]
    total: tuple[int, ...]
    row_scores: Int64Array


class GpuModelBalance:
    name = NAME

    def __init__(self, args: GpuModelBalanceArgs) -> None:
        self.args = args
        self._table: NodeTable | None = None
        self._shares: _Shares | None = None

    def applies(self, pod: PodInfo) -> bool:
        """False for a pod that asks for no device of ``resource``."""
        return pod.device_request(self.args.resource)[0] > 0

    def score(self, pod: PodInfo, node: NodeInfo) -> int:
        shares = None if self._table is None else self._shares_of(self._table)
        model = node.labels.get(self.args.label)
        if shares is None or model is None or model not in shares.values:
            return NEUTRAL
        index = shares.values.index(model)
        return model_balance(shares.free[index], shares.total[index], sum(shares.free), sum(shares.total))

    def score_batch(self, pod: PodInfo, batch: Batch) -> Int64Array:
        self._table = batch.table
        scores = self._shares_of(batch.table).row_scores[batch.rows]
        if not batch.all_known:
            scores = np.where(batch.known, scores, NEUTRAL)
        return scores

    def _shares_of(self, table: NodeTable) -> _Shares:
        """The models' shares and every row's score, computed again only after the table changed."""
        stamp = (id(table), table.writes)
        shares = self._shares
        if shares is not None and shares.stamp == stamp:
            return shares
        codes, values = table.label_codes(self.args.label)
        rows = len(codes)
        resource = self.args.resource
        total = _column(table.dra_allocatable, resource, rows)
        used = _column(table.dra_requested, resource, rows)
        plugin = total <= 0  # a device plugin's whole devices where DRA serves none
        total = np.where(plugin, _column(table.allocatable, resource, rows) * MILLI_DEVICES, total)
        used = np.where(plugin, _column(table.requested, resource, rows) * MILLI_DEVICES, used)
        labelled = codes >= 0
        per_total = np.bincount(codes[labelled], weights=total[labelled], minlength=len(values)).astype(np.int64)
        per_used = np.bincount(codes[labelled], weights=used[labelled], minlength=len(values)).astype(np.int64)
        per_free = per_total - np.minimum(per_used, per_total)
        cluster_free, cluster_total = int(per_free.sum()), int(per_total.sum())
        by_model = [
            model_balance(int(free), int(all_), cluster_free, cluster_total)
            for free, all_ in zip(per_free, per_total, strict=True)
        ]
        lookup = np.array([*by_model, NEUTRAL], dtype=np.int64)  # code -1: the last entry
        row_scores = lookup[codes]
        row_scores.flags.writeable = False
        shares = _Shares(stamp, values, tuple(per_free.tolist()), tuple(per_total.tolist()), row_scores)
        self._shares = shares
        return shares


def _column(columns: Mapping[str, Int64Array], resource: str, rows: int) -> Int64Array:
    column = columns.get(resource)
    if column is None:
        return np.zeros(rows, dtype=np.int64)
    return column[:rows]
