"""``kube-gpu-extender simulate``: arguments, progress bar, table, JSON and plot around simulator.simulate.

Kept apart from app.cli so the simulator's imports (the service, numpy, matplotlib) load only when
the command runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["add_simulate_parser", "format_table", "run_simulate", "write_plot"]


def add_simulate_parser(commands: Any) -> None:
    simulate = commands.add_parser(
        "simulate",
        help="schedule a pod trace through the extender's verbs and compare policies",
        description="Schedules pods in creation order through the same filter, prioritize and bind path the "
        "service uses (in process) and reports placement quality per policy.",
    )
    nodes = simulate.add_mutually_exclusive_group()
    nodes.add_argument("--nodes", help="node list CSV (openb: sn, cpu_milli, memory_mib, gpu, model)")
    nodes.add_argument("--snapshot", help="nodes from a snapshot file (kubectl get nodes -o yaml)")
    simulate.add_argument(
        "--pods", required=True, help="pod list: openb CSV, or a YAML/JSON list of Pods (submitted in file order)"
    )
    simulate.add_argument("--config", help="extender configuration for fitplus-sra; built-in defaults when omitted")
    simulate.add_argument(
        "--scheduler-config",
        metavar="FILE|none",
        help="KubeSchedulerConfiguration whose profile chooses the node as kube-scheduler would (in-tree scores "
        "+ extender priority x weight x 10); default: the shipped deploy/kube-scheduler-config.yaml; "
        "none: the extender's priority alone",
    )
    simulate.add_argument("--profile", help="schedulerName of the profile to use (default: the first)")
    simulate.add_argument(
        "--policy",
        action="append",
        help="policy to run (repeatable; default: all of fitplus-sra, least-allocated, most-allocated, random)",
    )
    simulate.add_argument(
        "--mode",
        choices=["fill", "replay", "inflate"],
        default="fill",
        help="fill: creation order, deletions ignored (default); replay: creations and deletions in time; "
        "inflate: the FGD paper's experiment (seeded shuffled draw up to --target x the cluster's GPUs)",
    )
    simulate.add_argument(
        "--sharing",
        choices=["dra", "none"],
        default="dra",
        help="dra (default): each GPU a shareable DRA device, GPU pods with ResourceClaims (gpu_milli < 1000 "
        "takes a share); none: whole GPUs of the device plugin (nvidia.com/gpu)",
    )
    simulate.add_argument("--shuffle", action="store_true", help="fill mode: submit the pods in a seeded random order")
    simulate.add_argument(
        "--tie-break",
        choices=["random", "lowest-name"],
        default="random",
        help="among nodes with the same total: random (kube-scheduler, default) or lowest-name (the FGD "
        "paper's artifact, whose selectHost took the lexicographically smallest node name)",
    )
    simulate.add_argument(
        "--target",
        type=float,
        default=1.3,
        help="inflate: arrived GPU demand to reach, as a share of the cluster's GPUs (default 1.3)",
    )
    simulate.add_argument(
        "--seeds", type=int, default=1, help="runs per policy, seeds --seed .. --seed+N-1 (default 1)"
    )
    simulate.add_argument("--workers", type=int, help="processes for the runs (default: the CPUs, at most the runs)")
    simulate.add_argument("--seed", type=int, default=0, help="seed of the tie-break and random policy (default 0)")
    simulate.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    simulate.add_argument("--plot", metavar="FILE.png", help="draw GPU allocation against submitted GPU demand")
    simulate.add_argument("--no-progress", action="store_true", help="no progress bar")
    simulate.add_argument(
        "--print-workload",
        action="store_true",
        help="print the pods' task types as GpuFragmentation's workload arg (YAML) and GpuCpuBalance's "
        "cpuPerGpu, and exit; no nodes needed",
    )


def _percent(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def format_table(results: Sequence[Any]) -> str:
    """One column per policy, one row per figure."""
    from simulator.trace import KIND_CPU, KIND_MULTI_GPU, KIND_ONE_GPU

    def first(result: Any, attribute: str) -> str:
        failure = result.first_gpu_failure
        if failure is None:
            return "no failure"
        value = getattr(failure, attribute)
        return f"{value} ({_percent(value, result.total_gpus)})"

    rows: list[tuple[str, list[str]]] = [("policy", [r.policy for r in results])]
    for kind, label in ((KIND_CPU, "CPU-only"), (KIND_ONE_GPU, "1 GPU"), (KIND_MULTI_GPU, "multi-GPU")):
        rows.append((f"{label} placed / failed", [f"{r.placed[kind]} / {r.failed[kind]}" for r in results]))
    rows += [
        (
            "GPU demand placed",
            [f"{r.gpu_placed}/{r.gpu_demand} ({_percent(r.gpu_placed, r.gpu_demand)})" for r in results],
        ),
        ("alloc. at 1st GPU failure", [first(r, "allocated_gpus") for r in results]),
        ("fragmented GPUs then", [first(r, "fragmented_gpus") for r in results]),
        (
            "peak GPU allocation",
            [f"{r.peak_allocated_gpus} ({_percent(r.peak_allocated_gpus, r.total_gpus)})" for r in results],
        ),
        (
            "final GPU allocation",
            [f"{r.final_allocated_gpus} ({_percent(r.final_allocated_gpus, r.total_gpus)})" for r in results],
        ),
        ("CPU-only pods on GPU nodes", [str(r.cpu_pods_on_gpu_nodes) for r in results]),
        ("wall time", [f"{r.wall_seconds:.1f} s" for r in results]),
    ]
    from simulator.report import aligned

    return aligned(rows)


def write_plot(results: Sequence[Any], path: str, title: str) -> None:
    """GPU allocation (share of cluster GPUs) against submitted GPU demand (same unit), per policy."""
    from simulator.report import new_figure, save_figure

    figure, axes = new_figure(7)
    for result in results:
        total = result.total_gpus or 1
        xs = [100 * submitted / total for submitted, _ in result.curve]
        ys = [100 * allocated / total for _, allocated in result.curve]
        axes.plot(xs, ys, label=result.policy, linewidth=1.4)
    axes.set_xlabel("submitted GPU demand (% of cluster GPUs)")
    axes.set_ylabel("allocated GPUs (% of cluster GPUs)")
    save_figure(figure, axes, title, path)


def _sampling_note(scheduler: Any, nodes: int) -> str:
    """kube-scheduler scores only a sample of feasible nodes on clusters of 100+ nodes unless the
    profile asks for 100 %; the simulator always scores every feasible node."""
    percentage = scheduler.percentage_of_nodes_to_score if scheduler is not None else 100
    if nodes < 100 or (percentage is not None and percentage >= 100):
        return ""
    shown = "adaptive (unset)" if not percentage else f"{percentage}%"
    return (
        f"note: percentageOfNodesToScore is {shown}: kube-scheduler would stop filtering after a sample of "
        f"the {nodes} nodes; the simulator filters and scores all of them"
    )


def _print_workload(path: str) -> int:
    """The trace's task types, as ``workload:`` of GpuFragmentation's args (simulator.policies.workload),
    and GpuCpuBalance's ``cpuPerGpu`` (a comment, so the output stays GpuFragmentation's args)."""
    from simulator.policies import cpu_per_gpu, workload
    from simulator.trace import TraceError, load_pods

    try:
        pods = load_pods(path)
    except TraceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("workload:")
    for task in workload(pods):
        print("- {" + ", ".join(f"{key}: {value}" for key, value in task.items()) + "}")
    print(f"# GpuCpuBalance: cpuPerGpu: {cpu_per_gpu(pods)}  (milli-CPU the GPU pods ask per whole GPU)")
    return 0


def run_simulate(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from app.config import load_config
    from simulator.experiment import Run, run_all, summarise
    from simulator.report import format_summary, write_unallocated_plot
    from simulator.schedconfig import SchedulerConfigError, load_scheduler_config_argument
    from simulator.simulate import POLICIES, check_order
    from simulator.trace import TraceError, load_nodes_csv, load_pods, load_snapshot_nodes

    policies = list(dict.fromkeys(args.policy or POLICIES))
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        print(f"error: unknown policy {', '.join(unknown)} (known: {', '.join(POLICIES)})", file=sys.stderr)
        return 2
    if args.print_workload:
        return _print_workload(args.pods)
    if not args.nodes and not args.snapshot:
        print("error: one of --nodes or --snapshot is required", file=sys.stderr)
        return 2
    config = load_config(args.config)
    try:
        scheduler = load_scheduler_config_argument(args.scheduler_config, args.profile)
    except SchedulerConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        nodes = load_nodes_csv(args.nodes) if args.nodes else load_snapshot_nodes(args.snapshot)
        pods = load_pods(args.pods)
    except TraceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    note = _sampling_note(scheduler, len(nodes))
    if note:
        print(note, file=sys.stderr)
    try:
        check_order(pods, args.mode)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.mode == "fill" and not args.shuffle and any(pod.file_ordered for pod in pods):
        print(
            "warning: the trace has no creation_time, so fill mode submits the pods in file order; "
            "--shuffle submits them in a seeded random order (or use --mode inflate)",
            file=sys.stderr,
        )
    if args.seeds < 1:
        print("error: --seeds must be >= 1", file=sys.stderr)
        return 2
    run = Run(config, nodes, pods, args.mode, args.sharing, args.target, args.shuffle, scheduler, args.tie_break)
    seeds = list(range(args.seed, args.seed + args.seeds))
    runs = len(policies) * len(seeds)
    workers = min(args.workers or os.cpu_count() or 1, runs)
    quiet = args.no_progress or not sys.stderr.isatty()
    with tqdm(total=runs, desc="runs", unit="run", file=sys.stderr, disable=quiet) as bar:
        results = run_all(run, policies, seeds, workers, lambda _: bar.update(1))
    summary = summarise(results)
    used = scheduler.describe() if scheduler is not None else "none (the extender's priority alone decides)"
    if args.json:
        report = {
            "nodes": len(nodes),
            "pods": len(pods),
            "schedulerConfig": scheduler.to_json() if scheduler is not None else None,
            "sharing": args.sharing,
            "summary": summary,
            "results": [r.to_json() for r in results],
        }
        print(json.dumps(report, indent=2))
    else:
        gpus = sum(r.total_gpus for r in results[:1])
        print(f"{len(nodes)} nodes, {gpus} GPUs, {len(pods)} pods, mode {args.mode}, sharing {args.sharing}")
        print(f"scheduler config: {used}")
        if args.mode != "inflate" and len(seeds) == 1:
            print(format_table(results))
            print()
        print(f"per policy over seeds {seeds[0]}..{seeds[-1]}: median [min-max]")
        print(format_summary(summary))
    if args.plot:
        title = f"{len(nodes)} nodes, {len(pods)} pods, mode {args.mode}, sharing {args.sharing}, {len(seeds)} seed(s)"
        if args.mode == "inflate":
            write_unallocated_plot(results, args.plot, title)
        else:
            write_plot(results, args.plot, title)
    return 0
