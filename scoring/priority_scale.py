"""How the profile's 0..100 node scores become the extender's 0..10 priorities.

kube-scheduler adds ``priority * extender weight * 10`` to the sum of its own score plugins and
takes the highest total, breaking ties at random. Mapping each node alone (``Absolute``: round to
the nearest ten) keeps 11 levels: an empty, a 1-used and a 2-used 8-GPU node can all land on the
same priority, and kube-scheduler's own scores then choose among them. ``Candidates`` maps relative
to the nodes of this request instead: the best node(s) get 10, the worst 0, and every node below the
best gets at most 9, so the extender's full-resolution ranking decides whenever kube-scheduler's
plugins tie, and one priority step separates the best node from the rest.

Each mapping has a scalar definition and a vectorised twin (``*_batch``); tests check they agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt

from scoring.framework import MAX_EXTENDER_PRIORITY, MIN_EXTENDER_PRIORITY
from scoring.tie_break import lowest_name, winners

__all__ = [
    "ABSOLUTE",
    "CANDIDATES",
    "PRIORITY_SCALES",
    "PriorityScale",
    "absolute",
    "absolute_batch",
    "break_ties",
    "break_ties_by_name",
    "candidates",
    "candidates_batch",
    "scale",
    "scale_batch",
]

PriorityScale = Literal["Candidates", "Absolute"]
CANDIDATES: PriorityScale = "Candidates"
ABSOLUTE: PriorityScale = "Absolute"
PRIORITY_SCALES: tuple[PriorityScale, ...] = (CANDIDATES, ABSOLUTE)

_SPAN = MAX_EXTENDER_PRIORITY - MIN_EXTENDER_PRIORITY


def absolute(node_score: int) -> int:
    """One node alone: 0..100 onto 0..10, rounding half up, clamped so the wire is always valid."""
    priority = (node_score + 5) // 10
    return max(MIN_EXTENDER_PRIORITY, min(MAX_EXTENDER_PRIORITY, priority))


def candidates(node_scores: Sequence[int | None]) -> list[int]:
    """Relative to the candidates: ``10 - ceil(10 * (best - score) / (best - worst))``.

    The best score gets 10, the worst 0, any score below the best at most 9; equal scores stay
    equal and all-equal candidates all get 10. ``None`` (a node the extender cannot score) gets 0
    and does not count as the worst.
    """
    known = [s for s in node_scores if s is not None]
    if not known:
        return [MIN_EXTENDER_PRIORITY] * len(node_scores)
    best, worst = max(known), min(known)
    if best == worst:
        return [MIN_EXTENDER_PRIORITY if s is None else MAX_EXTENDER_PRIORITY for s in node_scores]
    spread = best - worst
    # ceil(a / b) == -((-a) // b) for b > 0
    return [
        MIN_EXTENDER_PRIORITY if s is None else MAX_EXTENDER_PRIORITY + (-_SPAN * (best - s)) // spread
        for s in node_scores
    ]


def absolute_batch(node_scores: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    return np.minimum(np.maximum((node_scores + 5) // 10, MIN_EXTENDER_PRIORITY), MAX_EXTENDER_PRIORITY)


def candidates_batch(node_scores: npt.NDArray[np.int64], known: npt.NDArray[np.bool_]) -> npt.NDArray[np.int64]:
    """``candidates`` over an array; positions where ``known`` is False count as None."""
    every = bool(known.all())  # nearly always: then no masks (a mask is a copy of thousands)
    scores = node_scores if every else node_scores[known]
    if not len(scores):
        return np.full(len(node_scores), MIN_EXTENDER_PRIORITY, dtype=np.int64)
    best, worst = int(scores.max()), int(scores.min())
    if best == worst:
        scaled = np.full(len(scores), MAX_EXTENDER_PRIORITY, dtype=np.int64)
    else:
        scaled = MAX_EXTENDER_PRIORITY + (-_SPAN * (best - scores)) // (best - worst)
    if every:
        return scaled
    out = np.full(len(node_scores), MIN_EXTENDER_PRIORITY, dtype=np.int64)
    out[known] = scaled
    return out


def scale(kind: PriorityScale, node_scores: Sequence[int | None]) -> list[int]:
    if kind == ABSOLUTE:
        return [MIN_EXTENDER_PRIORITY if s is None else absolute(s) for s in node_scores]
    return candidates(node_scores)


def scale_batch(
    kind: PriorityScale, node_scores: npt.NDArray[np.int64], known: npt.NDArray[np.bool_]
) -> npt.NDArray[np.int64]:
    if kind == ABSOLUTE:
        return np.where(known, absolute_batch(node_scores), MIN_EXTENDER_PRIORITY)
    return candidates_batch(node_scores, known)


def break_ties(priorities: Sequence[int], keys: Sequence[int]) -> list[int]:
    """``Candidates`` priorities with the best nodes' tie broken (``scoring.tie_break``): of the nodes
    at 10, those without the highest key drop to 9, level with the best of the rest."""
    return _demote(priorities, winners([p == MAX_EXTENDER_PRIORITY for p in priorities], keys))


def break_ties_by_name(priorities: Sequence[int], names: Sequence[str]) -> list[int]:
    """``break_ties`` for ``tieBreak.lowestName``: of the nodes at 10, all but the smallest name drop to 9."""
    return _demote(priorities, lowest_name([p == MAX_EXTENDER_PRIORITY for p in priorities], names))


def _demote(priorities: Sequence[int], won: Sequence[bool]) -> list[int]:
    demoted = MAX_EXTENDER_PRIORITY - 1
    return [demoted if p == MAX_EXTENDER_PRIORITY and not w else p for p, w in zip(priorities, won, strict=True)]
