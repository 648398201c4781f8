"""Many runs at once: policies x seeds in a process pool, summarised per policy over the seeds.

Each run is independent (its own cache, service and seeded draw), so the runs of
``--seeds N`` go to a ``ProcessPoolExecutor``; the trace, nodes and configuration are handed to
each worker once. A summary gives, per policy and figure, the median and the range over seeds.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from app.config import ExtenderConfiguration
from simulator.metrics import CHECKPOINTS, KINDS
from simulator.result import LEFTOVER_SHOWN, PolicyResult
from simulator.schedconfig import SchedulerConfig
from simulator.simulate import simulate
from simulator.trace import SimNode, SimPod

__all__ = ["Experiment", "Run", "run_pool", "summarise"]

_R = TypeVar("_R", covariant=True)
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Run:
    """What every run of one experiment shares."""

    base: ExtenderConfiguration
    nodes: Sequence[SimNode]
    pods: Sequence[SimPod]
    mode: str
    sharing: str
    target: float
    shuffle: bool
    scheduler: SchedulerConfig | None
    tie_break: str = "random"

    def run(self, policy: str, seed: int) -> PolicyResult:
        result = simulate(
            policy,
            self.base,
            self.nodes,
            self.pods,
            mode=self.mode,
            seed=seed,
            scheduler=self.scheduler,
            sharing=self.sharing,
            shuffle=self.shuffle,
            target=self.target,
            tie_break=self.tie_break,
        )
        result.placements.clear()  # not reported; keeps what goes back to the parent small
        return result


class Experiment(Protocol[_R]):
    """What the runs of one comparison share, and one run of it (a pod trace's ``Run``, a job trace's
    ``simulator.jobsim.JobExperiment``)."""

    def run(self, policy: str, seed: int) -> _R: ...


_shared: Experiment[Any] | None = None  # in a worker process: the experiment's shared inputs


def _init(experiment: Experiment[Any]) -> None:
    global _shared
    _shared = experiment


def _one(policy: str, seed: int) -> Any:
    assert _shared is not None
    return _shared.run(policy, seed)


def run_pool(
    experiment: Experiment[_T],
    policies: Sequence[str],
    seeds: Sequence[int],
    workers: int,
    done: Callable[[_T], None] | None = None,
) -> list[_T]:
    """Every (policy, seed) of ``experiment``, in ``workers`` processes (1: in this process); results
    in policy-then-seed order, ``done`` called as each finishes."""
    tasks = [(policy, seed) for policy in policies for seed in seeds]
    results: dict[tuple[str, int], _T] = {}
    if workers <= 1 or len(tasks) == 1:
        for policy, seed in tasks:
            results[(policy, seed)] = result = experiment.run(policy, seed)
            if done is not None:
                done(result)
    else:
        with ProcessPoolExecutor(max_workers=workers, initializer=_init, initargs=(experiment,)) as pool:
            futures = {pool.submit(_one, policy, seed): (policy, seed) for policy, seed in tasks}
            for future in as_completed(futures):
                results[futures[future]] = result = future.result()
                if done is not None:
                    done(result)
    return [results[task] for task in tasks]


def _spread(values: Sequence[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarise(results: Sequence[PolicyResult]) -> list[dict[str, Any]]:
    """Per policy (in first-seen order): median, min and max over seeds of every checkpoint figure,
    failures by kind and wall time."""
    by_policy: dict[str, list[PolicyResult]] = {}
    for result in results:
        by_policy.setdefault(result.policy, []).append(result)
    out = []
    for policy, runs in by_policy.items():
        checkpoints: dict[str, dict[str, Any]] = {}
        per_run = [r.metrics.checkpoints() if r.metrics is not None else {} for r in runs]
        for point in CHECKPOINTS:
            figures: dict[str, Any] = {}
            for name in ("allocation", "unallocated", "unallocatedGpus", "fragmentation", "fragmentedGpus"):
                values = [f[name] for c in per_run if (f := c.get(point)) is not None and name in f]
                figures[name] = _spread(values)
            checkpoints[str(point)] = figures
        failed = {
            kind: _spread([float(r.metrics.failed[kind]) for r in runs if r.metrics is not None]) for kind in KINDS
        }
        out.append(
            {
                "policy": policy,
                "sharing": runs[0].sharing,
                "seeds": [r.seed for r in runs],
                "checkpoints": checkpoints,
                "failedByKind": failed,
                "wallSeconds": _spread([r.wall_seconds for r in runs]),
                "leftover": _leftover(runs),
            }
        )
    return out


def _leftover(runs: Sequence[PolicyResult]) -> list[dict[str, Any]]:
    """The groups of free GPUs at the end (``PolicyResult.leftover``, by the shares on them) with the
    most free GPUs at the median over the runs (0 in a run without the group), most first."""
    per_run = [{group.beside: group for group in run.leftover} for run in runs]
    rows = []
    for beside in {beside for groups in per_run for beside in groups}:
        free = statistics.median([g.free_milli / 1000 if (g := groups.get(beside)) else 0.0 for groups in per_run])
        gpus = statistics.median([g.gpus if (g := groups.get(beside)) else 0 for groups in per_run])
        rows.append((free, beside, gpus))
    rows.sort(key=lambda row: (-row[0], row[1]))
    return [{"beside": list(beside), "freeGpus": free, "gpus": gpus} for free, beside, gpus in rows[:LEFTOVER_SHOWN]]
