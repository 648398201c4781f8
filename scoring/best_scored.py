"""Which feasible nodes /filter returns: all of them, or only those the profile scores highest.

kube-scheduler scores every node an extender's filter lets through (its own score plugins over all
of them, then /prioritize), but when a single node is left it takes it without scoring at all. With
the shipped profile the extender's best node always wins anyway (``priorityScale: Candidates`` and
weight 200: one priority step outweighs every in-tree score left), so returning only the nodes with
the highest 0..100 score changes no placement — kube-scheduler's plugins and its random tie-break
still choose among equally scored nodes — and saves, for most pods, the /prioritize round trip and
kube-scheduler's scoring of every candidate.

``Feasible`` (the default) returns every node that passes, as a plain extender does; use it when the
extender's weight lets kube-scheduler's soft preferences outweigh its ranking.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt

__all__ = ["BEST_SCORED", "FEASIBLE", "FILTER_RETURNS", "FilterReturns", "best_scored", "best_scored_batch"]

FilterReturns = Literal["Feasible", "BestScored"]
FEASIBLE: FilterReturns = "Feasible"
BEST_SCORED: FilterReturns = "BestScored"
FILTER_RETURNS: tuple[FilterReturns, ...] = (FEASIBLE, BEST_SCORED)


def best_scored(node_scores: Sequence[int | None]) -> list[bool]:
    """Per node, whether it is kept: its score equals the highest one. A node the extender cannot
    score (None) is kept only when no node can be scored (then all are: nothing to choose by)."""
    known = [s for s in node_scores if s is not None]
    if not known:
        return [True] * len(node_scores)
    best = max(known)
    return [s == best for s in node_scores]


def best_scored_batch(node_scores: npt.NDArray[np.int64], known: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
    """``best_scored`` over an array; positions where ``known`` is False count as None."""
    if not known.any():
        return np.ones(len(node_scores), dtype=np.bool_)
    best = node_scores[known].max()
    keep: npt.NDArray[np.bool_] = known & (node_scores == best)
    return keep
