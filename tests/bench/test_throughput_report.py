"""bench.throughput's verdict against the null extenders: the extender phase over each null phase,
per round, met only when every round reaches the target."""

from __future__ import annotations

from typing import Any

from bench.throughput_phases import NULL_EXTENDERS, phase_kind, phase_order
from bench.throughput_report import NULL_TARGET, cpu_per_pod, null_ratios


def _round(extender: float, **nulls: float) -> dict[str, Any]:
    phases = {"extender": extender, **{name.replace("_", "-"): rate for name, rate in nulls.items()}}
    return {name: {"pods_per_second": rate} for name, rate in phases.items()}


def test_each_null_phase_gets_its_ratios_and_a_verdict_over_every_round() -> None:
    rounds = [_round(95.0, extender_null=100.0, extender_null_raw=190.0), _round(99.0, extender_null=110.0)]
    lines = null_ratios(rounds, NULL_EXTENDERS)
    # the raw null ran in one round only: no verdict for it
    assert lines == ["", f"extender / extender-null: 0.95 / 0.90 (target {NULL_TARGET} in every round: met)"]


def test_one_round_below_the_target_misses_it() -> None:
    rounds = [_round(95.0, extender_null=100.0), _round(80.0, extender_null=100.0)]
    assert null_ratios(rounds, NULL_EXTENDERS)[-1].endswith("0.95 / 0.80 (target 0.9 in every round: missed)")


def test_from_three_rounds_on_the_median_is_said_beside_the_rounds() -> None:
    rounds = [_round(rate, extender_null=100.0) for rate in (95.0, 70.0, 91.0)]
    assert null_ratios(rounds, NULL_EXTENDERS)[-1] == (
        "extender / extender-null: 0.95 / 0.70 / 0.91, median 0.91 (target 0.9 in every round: missed)"
    )


def test_without_a_null_phase_nothing_is_said() -> None:
    assert null_ratios([_round(95.0)], NULL_EXTENDERS) == []
    assert null_ratios([], NULL_EXTENDERS) == []


def test_an_unscored_phase_in_every_round_gets_its_bound_beside_each_verdict() -> None:
    rounds = [_round(80.0, extender_null=100.0, extender_unscored=88.0), _round(70.0, extender_null=100.0)]
    assert len(null_ratios(rounds, NULL_EXTENDERS)) == 2  # not in every round: no bound
    rounds[1]["extender-unscored"] = {"pods_per_second": 85.0}
    lines = null_ratios(rounds, NULL_EXTENDERS)
    assert lines[1].endswith("0.80 / 0.70 (target 0.9 in every round: missed)")
    assert lines[2] == "extender-unscored / extender-null: 0.88 / 0.85 (no scoring: what no cheaper scoring can exceed)"


def test_a_nameless_phase_is_reported_as_no_bound() -> None:
    # Its answers come from the cache alone, and kube-scheduler retries the pods whose answer names
    # a node it no longer lists: its pods/s bounds nothing, so no ratio is printed for it.
    rounds = [_round(80.0, extender_null=100.0, extender_unscored=88.0, extender_nameless=92.0)]
    lines = null_ratios(rounds, NULL_EXTENDERS)
    assert lines[2].startswith("extender-unscored / extender-null: 0.88")
    assert len(lines) == 3 and not any("extender-nameless" in line for line in lines)


def test_a_burning_null_is_priced_against_the_raw_null_and_is_no_floor() -> None:
    rounds = [
        _round(
            80.0,
            extender_null_raw=100.0,
            extender_null_raw_burn=88.0,
            extender_null_raw_burn_after=86.0,
            extender_null_raw_wait=91.0,
        ),
        _round(
            90.0,
            extender_null_raw=120.0,
            extender_null_raw_burn=96.0,
            extender_null_raw_burn_after=102.0,
            extender_null_raw_wait=108.0,
        ),
    ]
    lines = null_ratios(rounds, NULL_EXTENDERS)
    assert lines[1] == "extender / extender-null-raw: 0.80 / 0.75 (target 0.9 in every round: missed)"
    assert lines[2:] == [
        "extender-null-raw-burn / extender-null-raw: 0.88 / 0.80 (CPU spent in /filter before its answer)",
        "extender-null-raw-burn-after / extender-null-raw: 0.86 / 0.85"
        " (the same CPU spent after the answer is written)",
        "extender-null-raw-wait / extender-null-raw: 0.91 / 0.90 (the same time waited before the answer, without CPU)",
    ]
    del rounds[1]["extender-null-raw"]
    assert null_ratios(rounds, NULL_EXTENDERS) == []  # without the raw null in every round, nothing to price


def test_alternate_rounds_run_the_phases_in_reverse_so_none_always_runs_on_the_oldest_cluster() -> None:
    extra = ["extender-null-raw", "extender-null-filter"]
    first, second, third = (phase_order(extra, index) for index in range(3))
    assert first == ["baseline", *extra, "extender"] == third
    assert second == first[::-1]
    assert phase_order(extra, 1, "fixed") == first


def test_bracket_runs_the_extra_phases_again_after_the_extender_in_reverse() -> None:
    extra = ["extender-null-raw", "extender-null-raw-burn"]
    for index in range(3):
        order = phase_order(extra, index, "bracket")
        assert order == [
            "baseline",
            "extender-null-raw",
            "extender-null-raw-burn",
            "extender",
            "extender-null-raw-burn-again",
            "extender-null-raw-again",
        ]
    assert [phase_kind(name) for name in order[-2:]] == ["extender-null-raw-burn", "extender-null-raw"]


def test_a_null_run_on_both_sides_of_the_extender_counts_as_the_geometric_mean_of_its_runs() -> None:
    rounds = [_round(90.0, extender_null_raw=80.0, extender_null_raw_again=125.0)]  # mean of both: 100
    assert null_ratios(rounds, NULL_EXTENDERS)[-1] == (
        "extender / extender-null-raw (its runs before and after): 0.90 (target 0.9 in every round: met)"
    )
    rounds[0]["extender-null-raw-burn"] = {"pods_per_second": 72.0}
    rounds[0]["extender-null-raw-burn-again"] = {"pods_per_second": 72.0}
    assert null_ratios(rounds, NULL_EXTENDERS)[-1].startswith("extender-null-raw-burn / extender-null-raw: 0.72 ")


def test_the_cpu_table_gives_each_phase_its_median_cpu_a_pod_by_process() -> None:
    def phase(rate: float, **cpu: float) -> dict[str, Any]:
        return {"pods_per_second": rate, "pods": 2000, "cpu_seconds": {k.replace("_", "-"): v for k, v in cpu.items()}}

    rounds = [
        {
            "ratio": 0.7,  # round-level figures are no phase
            "baseline": phase(190.0, kube_scheduler=7.0, kube_apiserver=8.0, etcd=2.0, driver=3.0),
            "extender": phase(130.0, extender=3.6, kube_scheduler=9.0, kube_apiserver=10.0, etcd=3.0, driver=4.0),
        },
        {
            "ratio": 0.8,
            "baseline": phase(180.0, kube_scheduler=8.0, kube_apiserver=8.0, etcd=2.0, driver=3.0),
            "extender": phase(150.0, extender=3.2, kube_scheduler=8.0, kube_apiserver=9.0, etcd=2.0, driver=4.0),
        },
    ]
    lines = cpu_per_pod(rounds)
    assert (
        lines[1]
        == "| phase | pods/s | CPU ms a pod, all | extender | kube-scheduler | kube-apiserver | etcd | driver |"
    )
    # medians of two rounds: baseline 10.0 and 10.5 ms a pod in all; the extender 14.3 and 13.1
    assert lines[3:] == [
        "| baseline | 185.0 | 10.25 | 0.00 | 3.75 | 4.00 | 1.00 | 1.50 |",
        "| extender | 140.0 | 13.95 | 1.70 | 4.25 | 4.75 | 1.25 | 2.00 |",
    ]
    assert cpu_per_pod([]) == []
