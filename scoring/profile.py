"""A scheduling profile: the Filter checks and the weighted Score plugins, built from validated args.

This is the single pipeline behind /filter, /prioritize, /preempt, /debug/explain and (later)
the simulator, so every caller gets the same decisions.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from scoring import (
    best_fit,
    clustering,
    cpu_balance,
    dot_product,
    fitplus,
    fragmentation,
    gpu_packing,
    idle_avoidance,
    model_balance,
    scarce,
)
from scoring.devices import FIRST_FIT, DeviceChoice, Placer
from scoring.framework import (
    SUCCESS,
    ArgsError,
    FilterPlugin,
    NodeInfo,
    PodInfo,
    RowScorer,
    ScorePlugin,
    Status,
    combine_scores,
)
from scoring.row_memo import RowMemo
from scoring.table import Batch, Int64Array
from scoring.verdicts import BatchVerdicts

__all__ = [
    "SCALAR_ROWS",
    "SCORE_PLUGINS",
    "NodeScore",
    "Profile",
    "ScorePluginSpec",
    "build_placer",
    "build_score_plugin",
]

# Registry: plugin name -> factory from raw args (validates, raising ArgsError naming the field) and
# the profile's device choice (used by the plugins that place a pod on a node's devices).
SCORE_PLUGINS: Mapping[str, Callable[[Any, str, Placer], ScorePlugin]] = {
    fitplus.NAME: lambda raw, path, _: fitplus.NodeResourcesFitPlus(fitplus.NodeResourcesFitPlusArgs.parse(raw, path)),
    scarce.NAME: lambda raw, path, _: scarce.ScarceResourceAvoidance(
        scarce.ScarceResourceAvoidanceArgs.parse(raw, path)
    ),
    # GPU sharing: placement on the per-device view (scoring.devices), the FGD paper's policies
    fragmentation.NAME: lambda raw, path, placer: fragmentation.GpuFragmentation(
        fragmentation.GpuFragmentationArgs.parse(raw, path), placer
    ),
    gpu_packing.NAME: lambda raw, path, placer: gpu_packing.GpuPacking(
        gpu_packing.GpuPackingArgs.parse(raw, path), placer
    ),
    best_fit.NAME: lambda raw, path, placer: best_fit.BestFit(best_fit.BestFitArgs.parse(raw, path), placer),
    dot_product.NAME: lambda raw, path, _: dot_product.DotProduct(dot_product.DotProductArgs.parse(raw, path)),
    clustering.NAME: lambda raw, path, _: clustering.GpuClustering(clustering.GpuClusteringArgs.parse(raw, path)),
    cpu_balance.NAME: lambda raw, path, placer: cpu_balance.GpuCpuBalance(
        cpu_balance.GpuCpuBalanceArgs.parse(raw, path), placer
    ),
    model_balance.NAME: lambda raw, path, _: model_balance.GpuModelBalance(
        model_balance.GpuModelBalanceArgs.parse(raw, path)
    ),
    idle_avoidance.NAME: lambda raw, path, placer: idle_avoidance.IdleGpuAvoidance(
        idle_avoidance.IdleGpuAvoidanceArgs.parse(raw, path), placer
    ),
}


def build_score_plugin(name: str, raw_args: Any, path: str, placer: Placer = FIRST_FIT) -> ScorePlugin:
    factory = SCORE_PLUGINS.get(name)
    if factory is None:
        raise ArgsError(f"{path}.name: unknown plugin {name!r} (known: {', '.join(sorted(SCORE_PLUGINS))})")
    return factory(raw_args, f"{path}.args", placer)


def build_placer(choice: DeviceChoice, plugins: Sequence[tuple[str, Any]], path: str = "deviceChoice") -> Placer:
    """The device choice ``choice`` for a profile of ``plugins`` ((name, raw args) in order):
    ``LeastFragmentation`` takes the workload and resource of the profile's GpuFragmentation."""
    if choice is DeviceChoice.FIRST_FIT:
        return FIRST_FIT
    for index, (name, raw) in enumerate(plugins):
        if name == fragmentation.NAME:
            args = fragmentation.GpuFragmentationArgs.parse(raw, f"plugins[{index}].args")
            return fragmentation.LeastFragmentation(args.workload, args.resource)
    raise ArgsError(
        f"{path}: {choice.value} needs a {fragmentation.NAME} plugin in the profile (its workload tells "
        "which device a share fragments least)"
    )


@dataclass(frozen=True, slots=True)
class ScorePluginSpec:
    plugin: ScorePlugin
    weight: int


@dataclass(frozen=True, slots=True)
class NodeScore:
    """Raw 0..100 score per configured plugin and the weighted mean of those that apply to the pod
    (``scoring.priority_scale`` maps it to 0..10). ``sat_out`` names the plugins that did not apply
    (PreScore Skip): their score is the one they would give, left out of ``node_score``."""

    plugin_scores: Mapping[str, int]
    node_score: int
    sat_out: tuple[str, ...] = ()


def _applies(spec: ScorePluginSpec, pod: PodInfo) -> bool:
    """A plugin with ``applies(pod)`` False sits out for this pod, like a PreScore that returns Skip:
    it is left out of the weighted mean instead of pulling every node's score down equally."""
    applies = getattr(spec.plugin, "applies", None)
    return applies is None or bool(applies(pod))


class _NotBatchable(Exception):
    """A plugin's ``score_rows`` cannot score these rows: the request scores node by node."""


class Profile:
    def __init__(
        self, filters: Sequence[FilterPlugin], scorers: Sequence[ScorePluginSpec], placer: Placer = FIRST_FIT
    ) -> None:
        self.filters = tuple(filters)
        self.scorers = tuple(scorers)
        self.placer = placer  # the device choice its plugins score (deviceChoice), for the allocator too
        self.scorer_names = tuple(s.plugin.name for s in scorers)
        self._position = {id(spec): index for index, spec in enumerate(self.scorers)}
        # The combined score per (active plugins' row keys, table row): one memo for the profile
        # instead of one per plugin and a weighted sum over every candidate each request.
        self._memo = RowMemo()

    def active(self, pod: PodInfo) -> tuple[ScorePluginSpec, ...]:
        """The score plugins that apply to ``pod``."""
        return tuple(spec for spec in self.scorers if _applies(spec, pod))

    def filter(self, pod: PodInfo, node: NodeInfo) -> Status:
        """First failing check wins, in configured order, as kube-scheduler's RunFilterPlugins."""
        for check in self.filters:
            status = check.filter(pod, node)
            if not status.passed:
                return status
        return SUCCESS

    def score(self, pod: PodInfo, node: NodeInfo) -> NodeScore:
        active = self.active(pod)
        raw = {spec.plugin.name: spec.plugin.score(pod, node) for spec in self.scorers}
        node_score = combine_scores((spec.weight, raw[spec.plugin.name]) for spec in active)
        sat_out = tuple(spec.plugin.name for spec in self.scorers if spec not in active)
        return NodeScore(raw, node_score, sat_out)

    def node_score(self, pod: PodInfo, node: NodeInfo, plugin: str | None = None) -> int:
        """The 0..100 score, of the whole profile or of one plugin alone."""
        if plugin is None:
            return self.score(pod, node).node_score
        for spec in self.scorers:
            if spec.plugin.name == plugin:
                return spec.plugin.score(pod, node)
        raise KeyError(plugin)

    def filter_batch(self, pod: PodInfo, batch: Batch) -> BatchVerdicts:
        """Verdicts for every node of ``batch`` (first failing check wins, as in ``filter``)."""
        verdicts: BatchVerdicts | None = None
        for check in self.filters:
            later = check.filter_batch(pod, batch)
            if verdicts is None:
                verdicts = later  # the first check's verdicts as they are: nothing to merge into yet
            else:
                verdicts.merge_later(later)
        return verdicts if verdicts is not None else BatchVerdicts.passing(len(batch))

    def node_scores_batch(self, pod: PodInfo, batch: Batch, plugin: str | None = None) -> npt.NDArray[np.int64] | None:
        """0..100 scores for every node of ``batch`` (as ``node_score``); None when a plugin cannot batch."""
        specs = self.active(pod) if plugin is None else [s for s in self.scorers if s.plugin.name == plugin]
        if plugin is not None and not specs:
            raise KeyError(plugin)
        total = np.zeros(len(batch), dtype=np.int64)
        weight_sum = 0
        if plugin is None and specs:
            by_row = [spec for spec in specs if getattr(spec.plugin, "row_key", None) is not None]
            keys = self._row_keys(pod, by_row) if by_row else None
            if keys is not None and len(by_row) == len(specs):
                try:
                    return self._memo.get(keys, batch, lambda rows: self._combined_rows(specs, keys, rows, pod))
                except _NotBatchable:
                    return None
            if keys is not None:
                # Plugins that read more than a node's row (GpuModelBalance: the whole cluster) add
                # their weighted scores to the memoised weighted sum of the others (which then share
                # one placement per row): the same integer mean.
                try:
                    total = self._memo.get(
                        ("sum", keys), batch, lambda rows: self._combined_rows(by_row, keys, rows, pod, mean=False)
                    )
                except _NotBatchable:
                    return None
                weight_sum = sum(spec.weight for spec in by_row)
                specs = [spec for spec in specs if getattr(spec.plugin, "row_key", None) is None]
        for spec in specs:
            scores = spec.plugin.score_batch(pod, batch)
            if scores is None:
                return None
            total += scores * (spec.weight if plugin is None else 1)
            weight_sum += spec.weight if plugin is None else 1
        return total // weight_sum if weight_sum else np.zeros(len(batch), dtype=np.int64)

    def _row_keys(self, pod: PodInfo, specs: Sequence[ScorePluginSpec]) -> tuple[tuple[int, Hashable], ...] | None:
        """Per active plugin its position and row key, when every one is a ``RowScorer``; else None."""
        keys: list[tuple[int, Hashable]] = []
        for spec in specs:
            row_key = getattr(spec.plugin, "row_key", None)
            if row_key is None:
                return None
            keys.append((self._position[id(spec)], row_key(pod)))
        return tuple(keys)

    @staticmethod
    def _combined_rows(
        specs: Sequence[ScorePluginSpec],
        keys: tuple[tuple[int, Hashable], ...],
        rows: Batch,
        pod: PodInfo,
        mean: bool = True,
    ) -> Int64Array:
        """The weighted mean of the plugins' ``score_rows`` on ``rows`` (what the memo keeps), or with
        ``mean`` False their weighted sum. Up to ``SCALAR_ROWS`` rows (a pod's shape met again after a
        few binds) are scored by the plugins' scalar definitions from the snapshots the rows were
        written from: a batch costs the same few dozen array calls whatever its size, several times
        what the scalar functions take for one row. The batch twins equal them (property tests)."""
        weight_sum = sum(spec.weight for spec in specs)
        if not weight_sum:
            return np.zeros(len(rows), dtype=np.int64)
        nodes = _snapshots(rows) if len(rows) <= SCALAR_ROWS else None
        if nodes is not None:
            totals = [sum(spec.weight * spec.plugin.score(pod, node) for spec in specs) for node in nodes]
            return np.array([t // weight_sum for t in totals] if mean else totals, dtype=np.int64)
        total = np.zeros(len(rows), dtype=np.int64)
        for spec, (_, key) in zip(specs, keys, strict=True):
            scores = cast(RowScorer, spec.plugin).score_rows(key, rows)
            if scores is None:
                raise _NotBatchable
            total += scores * spec.weight
        result: Int64Array = total // weight_sum if mean else total
        return result


SCALAR_ROWS = 4  # rows up to which the scalar definitions score faster than the batch twins


def _snapshots(rows: Batch) -> list[NodeInfo] | None:
    """The snapshots ``rows`` were written from; None when one is not a plain row of the table (a
    name it does not hold, the pod's own node with its assumption taken out)."""
    if rows.discount_position >= 0 or not rows.known.all():
        return None
    nodes = [rows.table.nodes[row] for row in rows.rows.tolist()]
    return None if any(node is None for node in nodes) else cast(list[NodeInfo], nodes)
