"""The throughput target in ``bench.throughput``'s report: the extender phase against the null
extenders' phases of the same run."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Any

__all__ = ["NULL_TARGET", "UNSCORED", "null_ratios"]

NULL_TARGET = 0.9  # the extender phase against a null extender's, in every round
UNSCORED = "extender-unscored"  # the shipped /filter keeping the first node that passes (bench.extender_unscored)


def null_ratios(rounds: list[dict[str, Any]], nulls: Iterable[str]) -> list[str]:
    """Per null extender phase of ``nulls`` that ran in every round: the extender phase's pods/s over
    it in each round, and whether every round reaches ``NULL_TARGET``; with an ``extender-unscored``
    phase in every round, its pods/s over the null's too (the most a cheaper scoring could reach)."""
    lines = []
    for name in nulls:
        if not rounds or any(name not in r for r in rounds):
            continue
        ratios = _over(rounds, "extender", name)
        verdict = "met" if all(ratio >= NULL_TARGET for ratio in ratios) else "missed"
        lines.append(f"extender / {name}: {_shown(ratios)} (target {NULL_TARGET} in every round: {verdict})")
        if all(UNSCORED in r for r in rounds):
            bound = _shown(_over(rounds, UNSCORED, name))
            lines.append(f"{UNSCORED} / {name}: {bound} (no scoring: what no cheaper scoring can exceed)")
    return ["", *lines] if lines else []


def _over(rounds: list[dict[str, Any]], phase: str, null: str) -> list[float]:
    return [r[phase]["pods_per_second"] / max(r[null]["pods_per_second"], 1e-9) for r in rounds]


def _shown(ratios: list[float]) -> str:
    """Each round's ratio; from three rounds on, their median too (rounds of one run move by 0.1)."""
    shown = " / ".join(f"{ratio:.2f}" for ratio in ratios)
    return f"{shown}, median {statistics.median(ratios):.2f}" if len(ratios) > 2 else shown
