"""The job comparison per job policy: a summary over seeds (median, min, max of each figure), the text
table, and the plot of GPU allocation over time."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from simulator.jobsim import JobResult
from simulator.report import aligned

__all__ = ["FIGURES", "format_jobs_table", "summarise_jobs", "write_jobs_plot"]

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
