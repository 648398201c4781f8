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

from collections.abc import Iterable, Mapping
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


@dataclass(slots=True)
class _Sums:
    """What the shares are summed from, kept between table writes: the label codes they were counted
    under, each row's stamp, and per model its total and used milli-devices. A write touches a few
    rows (a bind, one); only those are counted again, each as a (total, used) pair per row."""

    codes: Int64Array
    stamps: Int64Array
    rows: list[tuple[int, int]]
    per_total: list[int]
    per_used: list[int]


class GpuModelBalance:
    name = NAME

    def __init__(self, args: GpuModelBalanceArgs) -> None:
        self.args = args
        self._table: NodeTable | None = None
        self._shares: _Shares | None = None
        self._sums: _Sums | None = None

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
        sums = self._sums if shares is not None and shares.stamp[0] == stamp[0] else None
        recounted = sums is None or sums.codes is not codes  # another table, or labels or rows changed
        if sums is None or recounted:
            sums = self._sums = self._count_all(table, codes, len(values))
        else:
            self._count_written(table, sums)
        per_total = sums.per_total
        per_free = [total - min(used, total) for total, used in zip(per_total, sums.per_used, strict=True)]
        if not recounted and shares is not None and shares.free == tuple(per_free) and shares.total == tuple(per_total):
            shares = self._shares = _Shares(stamp, values, shares.free, shares.total, shares.row_scores)
            return shares  # the writes moved no model's sums
        cluster_free, cluster_total = sum(per_free), sum(per_total)
        by_model = [
            model_balance(free, all_, cluster_free, cluster_total)
            for free, all_ in zip(per_free, per_total, strict=True)
        ]
        lookup = np.array([*by_model, NEUTRAL], dtype=np.int64)  # code -1: the last entry
        row_scores = lookup[codes]
        row_scores.flags.writeable = False
        shares = _Shares(stamp, values, tuple(per_free), tuple(per_total), row_scores)
        self._shares = shares
        return shares

    def _count_all(self, table: NodeTable, codes: Int64Array, models: int) -> _Sums:
        rows = len(codes)
        resource = self.args.resource
        total = _column(table.dra_allocatable, resource, rows)
        used = _column(table.dra_requested, resource, rows)
        plugin = total <= 0  # as _count, for every row at once
        total = np.where(plugin, _column(table.allocatable, resource, rows) * MILLI_DEVICES, total)
        used = np.where(plugin, _column(table.requested, resource, rows) * MILLI_DEVICES, used)
        labelled = codes >= 0
        total, used = np.where(labelled, total, 0), np.where(labelled, used, 0)
        per_total = np.bincount(codes[labelled], weights=total[labelled], minlength=models).astype(np.int64)
        per_used = np.bincount(codes[labelled], weights=used[labelled], minlength=models).astype(np.int64)
        by_row = list(zip(total.tolist(), used.tolist(), strict=True))
        return _Sums(codes, table.stamps[:rows].copy(), by_row, per_total.tolist(), per_used.tolist())

    def _count_written(self, table: NodeTable, sums: _Sums) -> None:
        """Count again the rows written since ``sums`` saw them (same rows, same labels)."""
        stamps = table.stamps[: len(sums.codes)]
        written = (stamps != sums.stamps).nonzero()[0]
        sums.stamps[written] = stamps[written]
        self._count(table, sums, written.tolist())

    def _count(self, table: NodeTable, sums: _Sums, rows: Iterable[int]) -> None:
        """Replace what ``rows`` add to their model's sums by their devices now: DRA milli-devices, or
        a device plugin's whole devices where DRA serves none (unlabelled rows add nothing)."""
        resource = self.args.resource
        no_column = _NO_COLUMN
        dra_total = table.dra_allocatable.get(resource, no_column)
        dra_used = table.dra_requested.get(resource, no_column)
        whole_total = table.allocatable.get(resource, no_column)
        whole_used = table.requested.get(resource, no_column)
        codes = sums.codes
        for row in rows:
            model = int(codes[row])
            if model < 0:
                continue
            total = int(dra_total[row]) if len(dra_total) > row else 0
            if total > 0:
                used = int(dra_used[row]) if len(dra_used) > row else 0
            else:
                total = MILLI_DEVICES * int(whole_total[row]) if len(whole_total) > row else 0
                used = MILLI_DEVICES * int(whole_used[row]) if len(whole_used) > row else 0
            old_total, old_used = sums.rows[row]
            sums.per_total[model] += total - old_total
            sums.per_used[model] += used - old_used
            sums.rows[row] = (total, used)


_NO_COLUMN: Int64Array = np.zeros(0, dtype=np.int64)


def _column(columns: Mapping[str, Int64Array], resource: str, rows: int) -> Int64Array:
    column = columns.get(resource)
    if column is None:
        return np.zeros(rows, dtype=np.int64)
    return column[:rows]
