"""A job trace's results: one job policy's run (``JobResult``), and the comparison per job policy: a
summary over seeds (median, min, max of each figure), the text table, and the plot of GPU allocation
over time."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from simulator.report import aligned

__all__ = ["FIGURES", "JobResult", "format_jobs_table", "summarise_jobs", "write_jobs_plot"]


@dataclass(slots=True)
class JobResult:
    """One job policy's run over a job trace."""

    policy: str
    scoring: str
    seed: int
    total_gpus: int
    jobs: int
    job_gpus: int  # GPUs all jobs ask for together
    placed: int = 0  # jobs that ran
    spanning: int = 0  # placed jobs whose pods ran in more than one rack
    partial_gpu_seconds: float = 0.0  # bound GPUs of jobs not yet running, integrated over time
    partial_at_end: int = 0  # jobs with some, not all, pods bound when the run ended
    partly_placed: int = 0  # jobs left with some, not all, pods bound after a try
    gave_up: int = 0
    gpu_seconds_run: float = 0.0  # GPUs x duration of the jobs that ran
    allocated_gpu_seconds: float = 0.0  # bound GPUs integrated over the arrival window
    window: float = 0.0  # first to last arrival (s)
    peak_allocated_gpus: int = 0
    waits: list[float] = field(default_factory=list)  # arrival to running, per placed job (s)
    makespan: float = 0.0  # when the last event happened (s)
    attempts: int = 0  # pods put through filter
    bind_errors: int = 0  # binds /bind refused (the pod stayed pending)
    expired_holds: int = 0  # gang holds that ran out before their member bound
    skipped: int = 0  # retries skipped (module docstring)
    wall_seconds: float = 0.0
    curve: list[tuple[float, int, int]] = field(default_factory=list)  # (s, GPUs bound, of them partly placed)
    placements: dict[str, str] = field(default_factory=dict)  # pod -> node of every job that ran

    @property
    def partial_gpu_hours(self) -> float:
        return self.partial_gpu_seconds / 3600

    @property
    def mean_allocation(self) -> float:
        """Mean bound GPUs over the arrival window, as a share of the cluster's GPUs."""
        if not self.total_gpus:
            return 0.0
        if self.window <= 0:
            return (self.curve[0][1] if self.curve else 0) / self.total_gpus
        return self.allocated_gpu_seconds / self.window / self.total_gpus

    def to_json(self) -> dict[str, Any]:
        waits = self.waits
        return {
            "jobPolicy": self.policy,
            "policy": self.scoring,
            "seed": self.seed,
            "totalGpus": self.total_gpus,
            "jobs": self.jobs,
            "jobGpus": self.job_gpus,
            "placed": self.placed,
            "placedShare": round(self.placed / self.jobs, 4) if self.jobs else 0.0,
            "spanningRacks": self.spanning,
            "partlyPlacedGpuHours": round(self.partial_gpu_hours, 3),
            "partlyPlacedAtEnd": self.partial_at_end,
            "partlyPlacedJobs": self.partly_placed,
            "gaveUp": self.gave_up,
            "gpuHoursRun": round(self.gpu_seconds_run / 3600, 3),
            "meanAllocation": round(self.mean_allocation, 4),
            "peakAllocatedGpus": self.peak_allocated_gpus,
            "meanWaitSeconds": round(statistics.fmean(waits), 1) if waits else None,
            "medianWaitSeconds": round(statistics.median(waits), 1) if waits else None,
            "makespanSeconds": self.makespan,
            "attempts": self.attempts,
            "bindErrors": self.bind_errors,
            "expiredHolds": self.expired_holds,
            "skippedRetries": self.skipped,
            "wallSeconds": round(self.wall_seconds, 3),
            "allocationCurve": [[t, gpus, partial] for t, gpus, partial in self.curve],
        }


# Figure name -> how a run gives it (JobResult.to_json keys, or computed).
FIGURES = (
    "placed",
    "placedShare",
    "partlyPlacedGpuHours",
    "partlyPlacedJobs",
    "partlyPlacedAtEnd",
    "gaveUp",
    "spanningRacks",
    "meanAllocation",
    "peakAllocatedGpus",
    "gpuHoursRun",
    "meanWaitSeconds",
    "medianWaitSeconds",
    "makespanSeconds",
    "attempts",
    "bindErrors",
    "expiredHolds",
    "wallSeconds",
)


def _spread(values: Sequence[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarise_jobs(results: Sequence[JobResult]) -> list[dict[str, Any]]:
    """Per job policy (first-seen order): every figure of ``FIGURES`` as median, min and max over seeds."""
    by_policy: dict[str, list[dict[str, Any]]] = {}
    for result in results:
        by_policy.setdefault(result.policy, []).append(result.to_json())
    out = []
    for policy, runs in by_policy.items():
        first = runs[0]
        figures = {name: _spread([float(run[name]) for run in runs if run.get(name) is not None]) for name in FIGURES}
        out.append(
            {
                "jobPolicy": policy,
                "policy": first["policy"],
                "jobs": first["jobs"],
                "totalGpus": first["totalGpus"],
                "seeds": [run["seed"] for run in runs],
                **figures,
            }
        )
    return out


def _cell(spread: Mapping[str, float] | None, digits: int = 0, scale: float = 1.0, suffix: str = "") -> str:
    if spread is None:
        return "-"
    median, low, high = (spread[k] * scale for k in ("median", "min", "max"))
    text = f"{median:,.{digits}f}{suffix}"
    return text if low == high else f"{text} [{low:,.{digits}f}-{high:,.{digits}f}]"


def format_jobs_table(summary: Sequence[Mapping[str, Any]]) -> str:
    """One column per job policy; with several seeds each cell is median [min-max]."""

    def row(label: str, name: str, digits: int = 0, scale: float = 1.0, suffix: str = "") -> tuple[str, list[str]]:
        return label, [_cell(s[name], digits, scale, suffix) for s in summary]

    jobs = summary[0]["jobs"] if summary else 0
    rows: list[tuple[str, list[str]]] = [
        ("job policy", [s["jobPolicy"] for s in summary]),
        row(f"jobs placed (of {jobs})", "placed"),
        row("jobs placed (%)", "placedShare", 1, 100, "%"),
        row("GPU-hours held by partly placed jobs", "partlyPlacedGpuHours", 1),
        row("jobs ever partly placed", "partlyPlacedJobs"),
        row("jobs partly placed at the end", "partlyPlacedAtEnd"),
        row("jobs given up", "gaveUp"),
        row("jobs spanning more than one rack", "spanningRacks"),
        row("mean GPU allocation (arrivals)", "meanAllocation", 1, 100, "%"),
        row("peak GPU allocation (GPUs)", "peakAllocatedGpus"),
        row("GPU-hours of jobs run", "gpuHoursRun"),
        row("mean wait (s)", "meanWaitSeconds"),
        row("median wait (s)", "medianWaitSeconds"),
        row("makespan (h)", "makespanSeconds", 2, 1 / 3600),
        row("pods through filter", "attempts"),
        row("bind errors", "bindErrors"),
        row("gang holds expired", "expiredHolds"),
        row("wall time (s)", "wallSeconds", 1),
    ]
    return aligned(rows)


def write_jobs_plot(results: Sequence[JobResult], path: str, title: str) -> None:
    """GPU allocation over time per job policy (the first seed of each), and below it the GPUs held
    by partly placed jobs; both as a share of the cluster's GPUs."""
    import matplotlib

    matplotlib.use("Agg")  # file output only (matplotlib comes with the plot extra)
    import matplotlib.pyplot as plt

    figure, (top, bottom) = plt.subplots(
        2, 1, figsize=(9, 6.5), dpi=100, sharex=True, gridspec_kw={"height_ratios": [3, 1.4]}
    )
    seen: set[str] = set()
    for result in results:
        if result.policy in seen or not result.curve:
            continue
        seen.add(result.policy)
        total = result.total_gpus or 1
        hours = [t / 3600 for t, _, _ in result.curve]
        top.plot(hours, [100 * g / total for _, g, _ in result.curve], label=result.policy, drawstyle="steps-post")
        bottom.plot(hours, [100 * p / total for _, _, p in result.curve], label=result.policy, drawstyle="steps-post")
    top.set_ylabel("allocated GPUs (% of cluster)")
    top.set_ylim(0, 100)
    bottom.set_ylabel("held by partly\nplaced jobs (%)")
    bottom.set_xlabel("simulated time (h)")
    top.set_title(title)
    for axes in (top, bottom):
        axes.grid(True, alpha=0.3)
    top.legend(loc="lower right")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
