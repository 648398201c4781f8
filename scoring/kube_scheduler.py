"""How kube-scheduler turns scores into a node (``schedule_one.go``: prioritizeNodes, selectHost).

For the nodes that passed every filter (its own and the extenders'):

* if only one node is left, it is chosen and nothing is scored (no extender prioritize call);
* otherwise each node's total is ``Σ plugin score (0..100) · plugin weight`` over the profile's
  enabled score plugins (a plugin whose PreScore skips the pod adds nothing), plus, per extender
  with a prioritize verb, ``priority (0..10) · extender weight · MaxNodeScore / MaxExtenderPriority``;
  extender priorities are neither clamped nor range-checked;
* the highest total wins; ties are broken uniformly at random (reservoir sampling in selectHost).

This module holds that arithmetic for the plugins the simulator models (NodeResourcesFit,
NodeResourcesBalancedAllocation); the adapter (``simulator.simulate``) supplies the extender's priorities
and the random choice. Score plugins that give every node the same score for the pods it simulates
are left out: adding a constant to every total cannot change the winner.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from scoring.framework import MAX_EXTENDER_PRIORITY, MAX_NODE_SCORE, MIN_NODE_SCORE, NodeInfo, PodInfo, ScorePlugin
from scoring.table import Batch, Int64Array

__all__ = ["EXTENDER_SCORE_SCALE", "KubeSchedulerScore", "WeightedPlugin", "select_host", "select_host_batch"]

# extenderv1.MaxExtenderPriority onto framework.MaxNodeScore: one priority step is 10 points per weight.
EXTENDER_SCORE_SCALE = MAX_NODE_SCORE // MAX_EXTENDER_PRIORITY


@dataclass(frozen=True, slots=True)
class WeightedPlugin:
    plugin: ScorePlugin
    weight: int


def _applies(plugin: ScorePlugin, pod: PodInfo) -> bool:
    applies = getattr(plugin, "applies", None)
    return applies is None or bool(applies(pod))


def _checked(name: str, score: int) -> int:
    if not MIN_NODE_SCORE <= score <= MAX_NODE_SCORE:  # kube-scheduler fails the cycle on this
        raise ValueError(f"plugin {name} returned score {score}, outside [{MIN_NODE_SCORE}, {MAX_NODE_SCORE}]")
    return score


class KubeSchedulerScore:
    """Totals of modelled in-tree score plugins (with their weights) and one extender's priorities."""

    def __init__(self, plugins: Sequence[WeightedPlugin], extender_weight: int) -> None:
        self.plugins = tuple(plugins)
        self.extender_weight = extender_weight

    def extender_points(self, priority: int) -> int:
        return priority * self.extender_weight * EXTENDER_SCORE_SCALE

    def applies(self, pod: PodInfo) -> bool:
        """Whether any modelled plugin scores ``pod`` (else every plugin total is 0)."""
        return any(_applies(entry.plugin, pod) for entry in self.plugins)

    def plugin_total(self, pod: PodInfo, node: NodeInfo) -> int:
        """``Σ score · weight`` of the modelled plugins that apply to ``pod``, for one node."""
        return sum(
            _checked(entry.plugin.name, entry.plugin.score(pod, node)) * entry.weight
            for entry in self.plugins
            if _applies(entry.plugin, pod)
        )

    def plugin_totals_batch(self, pod: PodInfo, batch: Batch) -> Int64Array | None:
        """``plugin_total`` for every node of ``batch``; None when a plugin cannot batch."""
        total = np.zeros(len(batch), dtype=np.int64)
        for entry in self.plugins:
            if not _applies(entry.plugin, pod):
                continue
            scores = entry.plugin.score_batch(pod, batch)
            if scores is None:
                return None
            if len(scores):
                _checked(entry.plugin.name, int(scores.min()))
                _checked(entry.plugin.name, int(scores.max()))
            total += scores * entry.weight
        return total

    def totals(self, plugin_totals: Sequence[int], priorities: Sequence[int]) -> list[int]:
        """Each node's final score from its plugin total and its extender priority."""
        return [
            total + self.extender_points(priority) for total, priority in zip(plugin_totals, priorities, strict=True)
        ]

    def totals_batch(self, plugin_totals: Int64Array, priorities: Int64Array) -> Int64Array:
        """``totals`` over arrays."""
        result: Int64Array = plugin_totals + priorities * (self.extender_weight * EXTENDER_SCORE_SCALE)
        return result


def select_host(names: Sequence[str], totals: Sequence[int], choose: Callable[[Sequence[str]], str]) -> str:
    """The node with the highest total; ``choose`` picks uniformly among ties (called only for ties)."""
    if not names:
        raise ValueError("no nodes to choose from")
    best = max(totals)
    ties = [name for name, total in zip(names, totals, strict=True) if total == best]
    return ties[0] if len(ties) == 1 else choose(ties)


def select_host_batch(names: Sequence[str], totals: Int64Array, choose: Callable[[Sequence[str]], str]) -> str:
    """``select_host`` over an array of totals (the same ties, in the same order, for ``choose``)."""
    if not names:
        raise ValueError("no nodes to choose from")
    ties = (totals == totals.max()).nonzero()[0]
    return names[ties[0]] if len(ties) == 1 else choose(_Tied(names, ties))


class _Tied(Sequence[str]):
    """The tied names, read only where ``choose`` reads them (a random pick reads one of a thousand)."""

    __slots__ = ("_names", "_ties")

    def __init__(self, names: Sequence[str], ties: npt.NDArray[np.intp]) -> None:
        self._names, self._ties = names, ties

    def __len__(self) -> int:
        return len(self._ties)

    def __getitem__(self, index: int) -> str:  # type: ignore[override]  # no slices: choose reads one
        return self._names[int(self._ties[index])]

    def __iter__(self) -> Iterator[str]:
        return map(self._names.__getitem__, self._ties.tolist())
