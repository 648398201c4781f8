"""bench.throughput's verdict against the null extenders: the extender phase over each null phase,
per round, met only when every round reaches the target."""

from __future__ import annotations

from typing import Any

from bench.throughput import NULL_TARGET, null_ratios


def _round(extender: float, **nulls: float) -> dict[str, Any]:
    phases = {"extender": extender, **{name.replace("_", "-"): rate for name, rate in nulls.items()}}
    return {name: {"pods_per_second": rate} for name, rate in phases.items()}


def test_each_null_phase_gets_its_ratios_and_a_verdict_over_every_round() -> None:
    rounds = [_round(95.0, extender_null=100.0, extender_null_raw=190.0), _round(99.0, extender_null=110.0)]
    lines = null_ratios(rounds)
    # the raw null ran in one round only: no verdict for it
    assert lines == ["", f"extender / extender-null: 0.95 / 0.90 (target {NULL_TARGET} in every round: met)"]


def test_one_round_below_the_target_misses_it() -> None:
    rounds = [_round(95.0, extender_null=100.0), _round(80.0, extender_null=100.0)]
    assert null_ratios(rounds)[-1].endswith("0.95 / 0.80 (target 0.9 in every round: missed)")


def test_without_a_null_phase_nothing_is_said() -> None:
    assert null_ratios([_round(95.0)]) == []
    assert null_ratios([]) == []
