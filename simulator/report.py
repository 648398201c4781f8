"""The FGD paper's figures per policy as a table (median [min-max] over seeds) and as its Figure 9a:
unallocated GPUs (% of cluster GPUs) against the arrived workload (% of cluster GPUs)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from simulator.metrics import CHECKPOINTS, KINDS

__all__ = ["aligned", "format_leftover", "format_summary", "write_unallocated_plot"]


def _cell(spread: Mapping[str, float] | None, digits: int = 1, suffix: str = "") -> str:
    if spread is None:
        return "-"
    median, low, high = spread["median"], spread["min"], spread["max"]
    if low == high:
        return f"{median:.{digits}f}{suffix}"
    return f"{median:.{digits}f}{suffix} [{low:.{digits}f}-{high:.{digits}f}]"


def format_summary(summary: Sequence[Mapping[str, Any]]) -> str:
    """One column per policy; rows: allocation, unallocated GPUs and fragmentation at each checkpoint,
    failed pods by kind, wall time."""
    rows: list[tuple[str, list[str]]] = [("policy", [s["policy"] for s in summary])]
    for point in CHECKPOINTS:
        rows.append(
            (f"GPU allocation @{point}%", [_cell(s["checkpoints"][str(point)]["allocation"], 1, "%") for s in summary])
        )
    for point in CHECKPOINTS:
        cells = [_cell(s["checkpoints"][str(point)]["unallocatedGpus"], 0) for s in summary]
        rows.append((f"unallocated GPUs @{point}%", cells))
    for point in CHECKPOINTS:
        cells = [_cell(s["checkpoints"][str(point)]["fragmentation"], 1, "%") for s in summary]
        rows.append((f"fragmentation rate @{point}%", cells))
    for kind in KINDS:
        rows.append((f"failed {kind} pods", [_cell(s["failedByKind"][kind], 0) for s in summary]))
    rows.append(("wall time per run", [_cell(s["wallSeconds"], 1, " s") for s in summary]))
    return aligned(rows)


def format_leftover(summary: Sequence[Mapping[str, Any]], shown: int = 3) -> str:
    """Per policy, where the free GPUs are at the end: the groups of GPUs holding the same shares
    with the most free (median over seeds), e.g. ``182.4 beside 810 on 960 GPUs``."""
    lines = ["free GPUs at the end (median over seeds), by the milli-GPU shares on the rest of their GPU:"]
    for entry in summary:
        groups = [_leftover_cell(group) for group in entry.get("leftover", [])[:shown]]
        lines.append(f"  {entry['policy']}: {'; '.join(groups) or 'none free'}")
    return "\n".join(lines)


def _leftover_cell(group: Mapping[str, Any]) -> str:
    free, gpus, beside = group["freeGpus"], group["gpus"], group["beside"]
    if not beside:
        return f"{free:.1f} on {gpus:g} idle GPUs"
    return f"{free:.1f} beside {'+'.join(map(str, beside))} on {gpus:g} GPUs"


def aligned(rows: Sequence[tuple[str, Sequence[str]]]) -> str:
    """A text table: labels left, one right-aligned column per policy, a rule under the first row."""
    width = max(len(label) for label, _ in rows)
    columns = [max(len(row[1][i]) for row in rows) for i in range(len(rows[0][1]))]
    lines = []
    for number, (label, cells) in enumerate(rows):
        lines.append("  ".join([label.ljust(width), *(c.rjust(w) for c, w in zip(cells, columns, strict=True))]))
        if number == 0:
            lines.append("-" * len(lines[0]))
    return "\n".join(lines)


def new_figure(width: float) -> tuple[Any, Any]:
    """A matplotlib figure and axes on the file-only backend (matplotlib comes with the plot extra)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(width, 4.5), dpi=100)


def save_figure(figure: Any, axes: Any, title: str, path: str) -> None:
    """Title, grid and legend, then the figure written to ``path`` and closed."""
    import matplotlib.pyplot as plt

    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def write_unallocated_plot(results: Sequence[Any], path: str, title: str) -> None:
    """Unallocated GPU % against arrived workload %, per policy the median over seeds with the
    min-max band, and the ideal line (everything that arrives is allocated)."""
    by_policy: dict[str, list[dict[int, float]]] = {}
    for result in results:
        if result.metrics is not None:
            by_policy.setdefault(result.policy, []).append(dict(result.metrics.curve()))
    figure, axes = new_figure(8)
    top = 100
    for policy, curves in by_policy.items():
        points = sorted(set.intersection(*(set(c) for c in curves)))
        if not points:
            continue
        top = max(top, points[-1])
        unallocated = np.array([[100.0 - c[p] for p in points] for c in curves])
        line = axes.plot(points, np.median(unallocated, axis=0), label=policy, linewidth=1.6)
        if len(curves) > 1:
            axes.fill_between(
                points, unallocated.min(axis=0), unallocated.max(axis=0), alpha=0.15, color=line[0].get_color()
            )
    axes.plot([0, 100], [100, 0], linestyle=":", color="grey", label="ideal")
    axes.set_xlim(75, top)
    axes.set_ylim(0, 25)
    axes.set_xlabel("arrived workload (% of cluster GPU capacity)")
    axes.set_ylabel("unallocated GPUs (%)")
    save_figure(figure, axes, title, path)
