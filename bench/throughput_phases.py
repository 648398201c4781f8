"""The phases of ``bench.throughput``: which can run besides baseline and extender, what each runs,
and their order in a round."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bench.throughput_report import AGAIN, BURN, BURN_AFTER, NAMELESS, UNSCORED, WAIT

__all__ = [
    "EXTENDER_MODULES",
    "EXTRA_PHASES",
    "EXTRA_PHASE_HELP",
    "NULL_EXTENDERS",
    "ORDERS",
    "SCHEDULER_EDITS",
    "phase_kind",
    "phase_order",
]

EXTRA_PHASES = (
    "baseline-nobatching",
    "baseline-go-shipped",
    "extender-go-defaults",
    "extender-sampled",
    "extender-parallelism-1",
    "extender-feasible",
    "extender-failures-always",
    "extender-ties-to-scheduler",
    "extender-log-warning",
    "extender-null",
    "extender-null-raw",
    "extender-null-raw-watch",
    "extender-null-raw-pack",
    BURN,
    BURN_AFTER,
    WAIT,
    "extender-null-filter",
    UNSCORED,
    NAMELESS,
)
BURN_US = 400  # CPU the burning null extenders spend per /filter (and the time the waiting one holds it)
# Null extender phases: module and arguments.
NULL_EXTENDERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "extender-null": ("bench.null_extender", ()),
    "extender-null-raw": ("bench.null_raw", ()),
    "extender-null-raw-watch": ("bench.null_raw", ("--watch-pods",)),
    "extender-null-raw-pack": ("bench.null_raw", ("--pack",)),
    BURN: ("bench.null_raw", ("--burn-us", str(BURN_US))),
    BURN_AFTER: ("bench.null_raw", ("--burn-us", str(BURN_US), "--burn-after")),
    WAIT: ("bench.null_raw", ("--wait-us", str(BURN_US))),
}
# Phases that run the extender with one verb replaced (the module's docstring says which).
EXTENDER_MODULES = {
    "extender-null-filter": "bench.extender_null_filter",
    UNSCORED: "bench.extender_unscored",
    NAMELESS: "bench.extender_nameless",
}


def _sampled(config: dict[str, Any]) -> None:
    for profile in config["profiles"]:
        profile.pop("percentageOfNodesToScore", None)


def _one_filter_worker(config: dict[str, Any]) -> None:
    config["parallelism"] = 1


# Phases that edit the shipped kube-scheduler config before it starts.
SCHEDULER_EDITS = {"extender-sampled": _sampled, "extender-parallelism-1": _one_filter_worker}


ORDERS = ("alternate", "fixed", "bracket")


def phase_order(extra: Sequence[str], round_index: int, order: str = "alternate") -> list[str]:
    """The phases of one round: baseline, the extra phases as given, extender; with ``alternate``,
    every odd round in reverse. Each phase ages the cluster for the next (the API server keeps the
    Events of every pod; etcd the history of every deleted one), so a phase that always ran last would
    always run on the oldest cluster. With ``bracket`` the extra phases run again after the extender,
    in reverse (named with ``AGAIN``): the machine's speed drifts by a fifth within minutes here, and a
    phase run on both sides of the extender's is compared with it at the same moment, on average."""
    phases = ["baseline", *extra, "extender"]
    if order == "bracket":
        return [*phases, *(f"{name}{AGAIN}" for name in reversed(extra))]
    return phases[::-1] if order == "alternate" and round_index % 2 else phases


def phase_kind(name: str) -> str:
    """The phase a name runs (a bracketing phase's second run runs the same)."""
    return name.removesuffix(AGAIN)


EXTRA_PHASE_HELP = (
    "also run: kube-scheduler alone without opportunistic batching; kube-scheduler alone with deploy/'s Go "
    "runtime settings (GOGC, GOMEMLIMIT); the shipped configuration with kube-scheduler on Go's defaults; "
    "the shipped profile with "
    "kube-scheduler's default percentageOfNodesToScore (the extender sees a sample of the nodes); the shipped "
    "configuration with kube-scheduler's parallelism 1 (one filter worker: candidates in node order); the shipped "
    "configuration with filterReturns: Feasible; the shipped configuration with filterFailures: Always; "
    "the shipped configuration with tieBreak.random off (equally scored nodes all pass; kube-scheduler scores "
    "them and calls /prioritize); "
    "the shipped extender at --log-level warning (no INFO line a bind: what its logging costs); "
    "kube-scheduler with the shipped profile behind bench.null_extender (passes the first candidate, binds); "
    "the same behind bench.null_raw, a second null extender without web framework or HTTP client library; "
    "that one also keeping the extender's pod watch open (its events read and dropped); "
    "that one passing the lowest-named candidate (pods fill nodes one after another, as packing places them); "
    f"the raw null spending {BURN_US} µs of CPU in each /filter before its answer, or after it (what extender "
    "CPU costs in pods/s, and whether it matters when it is spent); "
    "the shipped extender with a null /filter (bench.extender_null_filter: its machinery without scoring); "
    "the shipped extender whose /filter keeps the first node that passes instead of the best scored "
    "(bench.extender_unscored: the bound for any scoring speed-up); "
    "the shipped extender whose /filter judges every node of its cache without reading the names "
    "(bench.extender_nameless: its CPU without the names; some answers name a node kube-scheduler no "
    "longer lists, so its pods/s bounds nothing)"
)
