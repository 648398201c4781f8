"""The throughput target in ``bench.throughput``'s report: the extender phase against the null
extenders' phases of the same run."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from typing import Any

__all__ = [
    "AGAIN",
    "BOUNDS",
    "BURN",
    "BURN_AFTER",
    "NAMELESS",
    "NULL_TARGET",
    "PRICES",
    "RAW_NULL",
    "UNSCORED",
    "VERBS",
    "WAIT",
    "cpu_per_pod",
    "null_ratios",
    "report",
]

NULL_TARGET = 0.9  # the extender phase against a null extender's, in every round
VERBS = ("filter", "prioritize", "bind", "preempt")
UNSCORED = "extender-unscored"  # the shipped /filter keeping the first node that passes (bench.extender_unscored)
NAMELESS = "extender-nameless"  # the shipped /filter over every node, the names unread (no bound: see its module)
RAW_NULL = "extender-null-raw"
AGAIN = "-again"  # a phase's second run in a round (``--order bracket``: after the extender's)
BURN = "extender-null-raw-burn"  # the raw null spending a fixed CPU time in each /filter, before its answer
BURN_AFTER = "extender-null-raw-burn-after"  # ... after its answer is written
WAIT = "extender-null-raw-wait"  # the same time held before the answer, without CPU
# Null extenders that are not floors: what a known amount of extender CPU costs, against the raw null.
PRICES = {
    BURN: "CPU spent in /filter before its answer",
    BURN_AFTER: "the same CPU spent after the answer is written",
    WAIT: "the same time waited before the answer, without CPU",
}
# Phases that bound what one kind of speed-up could reach, and what each bound says.
BOUNDS = {
    UNSCORED: "no scoring: what no cheaper scoring can exceed",
}


def null_ratios(rounds: list[dict[str, Any]], nulls: Iterable[str]) -> list[str]:
    """Per null extender phase of ``nulls`` that ran in every round: the extender phase's pods/s over
    it in each round, and whether every round reaches ``NULL_TARGET``; with a phase of ``BOUNDS`` in
    every round (``extender-unscored``: the most a cheaper scoring could reach), its pods/s over the
    null's too. A phase of ``PRICES`` is no floor: its pods/s over the raw null's instead. A phase run
    twice in a round, before and after the extender's (``--order bracket``), counts as the geometric
    mean of both runs."""
    lines = []
    for name in nulls:
        if not rounds or any(name not in r for r in rounds):
            continue
        if name in PRICES:
            if all(RAW_NULL in r for r in rounds):
                lines.append(f"{name} / {RAW_NULL}: {_shown(_over(rounds, name, RAW_NULL))} ({PRICES[name]})")
            continue
        ratios = _over(rounds, "extender", name)
        verdict = "met" if all(ratio >= NULL_TARGET for ratio in ratios) else "missed"
        both = " (its runs before and after)" if all(f"{name}{AGAIN}" in r for r in rounds) else ""
        lines.append(f"extender / {name}{both}: {_shown(ratios)} (target {NULL_TARGET} in every round: {verdict})")
        for bound, meaning in BOUNDS.items():
            if all(bound in r for r in rounds):
                lines.append(f"{bound} / {name}: {_shown(_over(rounds, bound, name))} ({meaning})")
    return ["", *lines] if lines else []


def _over(rounds: list[dict[str, Any]], phase: str, null: str) -> list[float]:
    return [_rate(r, phase) / max(_rate(r, null), 1e-9) for r in rounds]


def _rate(round_: dict[str, Any], phase: str) -> float:
    """A phase's pods/s in a round; for a phase run on both sides of the extender's (``AGAIN``), the
    geometric mean of its two runs."""
    rate = float(round_[phase]["pods_per_second"])
    again = round_.get(f"{phase}{AGAIN}")
    return math.sqrt(rate * float(again["pods_per_second"])) if again is not None else rate


def _shown(ratios: list[float]) -> str:
    """Each round's ratio; from three rounds on, their median too (rounds of one run move by 0.1)."""
    shown = " / ".join(f"{ratio:.2f}" for ratio in ratios)
    return f"{shown}, median {statistics.median(ratios):.2f}" if len(ratios) > 2 else shown


PROCESSES = ("extender", "kube-scheduler", "kube-apiserver", "etcd", "driver")


def cpu_per_pod(rounds: list[dict[str, Any]]) -> list[str]:
    """Per phase (in the order of the first round), the median over rounds of the CPU milliseconds a
    pod of every process together and of each one. Why: a phase keeps both cores busy, so its pods/s
    is the cores over that total; the table says which process a slower phase spent more in."""
    if not rounds:
        return []
    lines = ["", "| phase | pods/s | CPU ms a pod, all |" + "".join(f" {name} |" for name in PROCESSES)]
    lines.append("|---|---|---|" + "---|" * len(PROCESSES))
    for phase in rounds[0]:
        runs = [r[phase] for r in rounds if isinstance(r.get(phase), dict) and r[phase].get("cpu_seconds")]
        if not runs:
            continue
        per_pod = [{k: 1000 * v / max(run["pods"], 1) for k, v in run["cpu_seconds"].items()} for run in runs]
        total = statistics.median(sum(cpu.values()) for cpu in per_pod)
        each = "".join(f" {statistics.median(cpu.get(name, 0.0) for cpu in per_pod):.2f} |" for name in PROCESSES)
        rate = statistics.median(float(run["pods_per_second"]) for run in runs)
        lines.append(f"| {phase} | {rate:.1f} | {total:.2f} |{each}")
    return lines


def report(results: dict[str, Any], extra_phases: Iterable[str], nulls: Iterable[str]) -> None:
    """The run's tables: pods/s per round and phase, the extender's verb latencies, the null ratios."""
    print()
    ran = results["rounds"][0] if results["rounds"] else {}
    extra = [n for name in extra_phases for n in (name, f"{name}{AGAIN}") if n in ran]
    print("| round | baseline pods/s | extender pods/s | ratio | CPU bound |" + "".join(f" {n} |" for n in extra))
    print("|---|---|---|---|---|" + "---|" * len(extra))
    for i, r in enumerate(results["rounds"]):
        cells = "".join(f" {r[n]['pods_per_second']} |" for n in extra)
        print(
            f"| {i} | {r['baseline']['pods_per_second']} | {r['extender']['pods_per_second']} | {r['ratio']} "
            f"| {r['cpuBound']} |{cells}"
        )
    if results["rounds"]:
        verbs = results["rounds"][-1]["extender"]["verbs"]
        print("\n| verb | calls | mean ms | p50 ms | p99 ms |\n|---|---|---|---|---|")
        for verb in VERBS:
            if verb in verbs:
                v = verbs[verb]
                print(f"| {verb} | {int(v['count'])} | {v['mean_ms']:.2f} | {v['p50_ms']:.2f} | {v['p99_ms']:.2f} |")
    for line in [*cpu_per_pod(results["rounds"]), *null_ratios(results["rounds"], nulls)]:
        print(line)
    for key in ("packing", "fill"):
        if key in results:
            print(f"\n{key}: {results[key]}")
