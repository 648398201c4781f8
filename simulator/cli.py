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

DEFAULT_JOB_SCORING = "shipped"


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
    simulate.add_argument("--pods", help="pod list: openb CSV, or a YAML/JSON list of Pods (submitted in file order)")
    simulate.add_argument(
        "--jobs",
        metavar="CSV",
        help="job trace instead of --pods: groups of pods placed pod by pod or as gangs "
        "(name, size, gpus_per_pod, cpu_milli, memory_mib, arrival, duration[, topology])",
    )
    simulate.add_argument(
        "--job-policy",
        action="append",
        metavar="NAME",
        help="with --jobs: pod-by-pod, gang, gang-topology or gang-topology-preferred (repeatable; default: all)",
    )
    simulate.add_argument(
        "--rack-size",
        type=int,
        default=16,
        help="with --jobs: nodes per example.com/rack, in node-list order (default 16)",
    )
    simulate.add_argument(
        "--give-up",
        type=float,
        metavar="SECONDS",
        help="with --jobs: withdraw a job not running this long after its arrival (default: never)",
    )
    simulate.add_argument(
        "--make-jobs",
        type=int,
        metavar="N",
        help="print a job trace of N jobs derived from --pods (openb) for the cluster of --nodes, at --target "
        "x its GPUs of offered load, seeded by --seed; then exit",
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
        help="inflate: arrived GPU demand to reach, as a share of the cluster's GPUs; --make-jobs: the GPU "
        "demand offered per unit of time, as a share of the cluster's GPUs (default 1.3)",
    )
    simulate.add_argument(
        "--seeds", type=int, default=1, help="runs per policy, seeds --seed .. --seed+N-1 (default 1)"
    )
    simulate.add_argument("--workers", type=int, help="processes for the runs (default: the CPUs, at most the runs)")
    simulate.add_argument("--seed", type=int, default=0, help="seed of the tie-break and random policy (default 0)")
    simulate.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    simulate.add_argument(
        "--plot",
        metavar="FILE.png",
        help="draw GPU allocation against submitted GPU demand (--jobs: against time)",
    )
    simulate.add_argument("--no-progress", action="store_true", help="no progress bar")
    simulate.add_argument(
        "--print-workload",
        action="store_true",
        help="print the pods' task types as GpuFragmentation's workload arg (YAML) and GpuCpuBalance's "
        "cpuPerGpu, and exit; no nodes needed",
    )
    from simulator.families import add_derive_arguments

    add_derive_arguments(simulate)


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


def _print_workload(path: str, args: argparse.Namespace | None = None) -> int:
    """The trace's task types, as ``workload:`` of GpuFragmentation's args (simulator.policies.workload),
    and GpuCpuBalance's ``cpuPerGpu`` (a comment, so the output stays GpuFragmentation's args); with
    ``--derive``, of the derived trace."""
    from simulator.families import derived_pods
    from simulator.policies import cpu_per_gpu, workload
    from simulator.trace import TraceError, load_nodes_csv, load_pods, load_snapshot_nodes

    try:
        pods = load_pods(path)
        if args is not None and args.derive:
            nodes = load_nodes_csv(args.nodes) if args.nodes else []
            pods = derived_pods(args, pods, load_snapshot_nodes(args.snapshot) if args.snapshot else nodes)
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
    from simulator.experiment import Run, run_pool, summarise
    from simulator.report import format_leftover, format_summary, write_unallocated_plot
    from simulator.schedconfig import SchedulerConfigError, load_scheduler_config_argument
    from simulator.simulate import POLICIES, check_order
    from simulator.trace import TraceError, load_nodes_csv, load_pods, load_snapshot_nodes

    if args.make_jobs is not None:
        return _make_jobs(args)
    if args.jobs:
        return _run_jobs(args)
    if not args.pods:
        print("error: one of --pods or --jobs is required", file=sys.stderr)
        return 2
    if args.job_policy:
        print("error: --job-policy needs --jobs", file=sys.stderr)
        return 2
    policies = list(dict.fromkeys(args.policy or POLICIES))
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        print(f"error: unknown policy {', '.join(unknown)} (known: {', '.join(POLICIES)})", file=sys.stderr)
        return 2
    if args.print_workload:
        return _print_workload(args.pods, args)
    if args.derive_out:
        from simulator.families import write_derived

        return write_derived(args)
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
        if args.derive:
            from simulator.families import derived_pods

            pods = derived_pods(args, pods, nodes)
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
        results = run_pool(run, policies, seeds, workers, lambda _: bar.update(1))
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
        if args.mode != "replay":  # replay ends after every departure: nothing is held
            print()
            print(format_leftover(summary))
    if args.plot:
        title = f"{len(nodes)} nodes, {len(pods)} pods, mode {args.mode}, sharing {args.sharing}, {len(seeds)} seed(s)"
        if args.mode == "inflate":
            write_unallocated_plot(results, args.plot, title)
        else:
            write_plot(results, args.plot, title)
    return 0


def _nodes(args: argparse.Namespace) -> Any:
    from simulator.trace import load_nodes_csv, load_snapshot_nodes

    return load_nodes_csv(args.nodes) if args.nodes else load_snapshot_nodes(args.snapshot)


def _make_jobs(args: argparse.Namespace) -> int:
    """A job trace derived from --pods for the cluster of --nodes (simulator.jobs.make_jobs), on stdout."""
    from simulator.jobs import jobs_csv, make_jobs
    from simulator.trace import TraceError, load_pods

    if not args.pods or not (args.nodes or args.snapshot):
        print("error: --make-jobs needs --pods and one of --nodes or --snapshot", file=sys.stderr)
        return 2
    try:
        nodes, pods = _nodes(args), load_pods(args.pods)
        jobs = make_jobs(pods, args.make_jobs, sum(node.gpus for node in nodes), args.target, args.seed)
    except (TraceError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(jobs_csv(jobs))
    return 0


def _run_jobs(args: argparse.Namespace) -> int:
    """--jobs: every job policy over the job trace, one scoring policy (--policy, default shipped)."""
    from tqdm import tqdm

    from app.config import load_config
    from simulator.experiment import run_pool
    from simulator.jobreport import format_jobs_table, summarise_jobs, write_jobs_plot
    from simulator.jobsim import JOB_POLICIES, JobExperiment
    from simulator.policies import POLICIES
    from simulator.schedconfig import SchedulerConfigError, load_scheduler_config_argument
    from simulator.trace import TraceError

    def fail(message: str) -> int:
        print(f"error: {message}", file=sys.stderr)
        return 2

    if args.pods:
        return fail("--jobs replaces --pods: give one of them")
    job_policies = list(dict.fromkeys(args.job_policy or JOB_POLICIES))
    unknown = [p for p in job_policies if p not in JOB_POLICIES]
    if unknown:
        return fail(f"unknown job policy {', '.join(unknown)} (known: {', '.join(JOB_POLICIES)})")
    scoring = list(dict.fromkeys(args.policy or [DEFAULT_JOB_SCORING]))
    if len(scoring) > 1:
        return fail("--jobs runs one scoring --policy (the job policies are compared under it)")
    if scoring[0] not in POLICIES:
        return fail(f"unknown policy {scoring[0]} (known: {', '.join(POLICIES)})")
    if not args.nodes and not args.snapshot:
        return fail("one of --nodes or --snapshot is required")
    if args.rack_size < 1:
        return fail("--rack-size must be >= 1")
    if args.give_up is not None and args.give_up <= 0:
        return fail("--give-up must be > 0 seconds")
    if args.seeds < 1:
        return fail("--seeds must be >= 1")
    config = load_config(args.config)
    try:
        scheduler = load_scheduler_config_argument(args.scheduler_config, args.profile)
    except SchedulerConfigError as exc:
        return fail(str(exc))
    from simulator.jobs import load_jobs_csv

    try:
        nodes, jobs = _nodes(args), load_jobs_csv(args.jobs)
    except TraceError as exc:
        return fail(str(exc))
    note = _sampling_note(scheduler, len(nodes))
    if note:
        print(note, file=sys.stderr)
    experiment = JobExperiment(
        config, nodes, jobs, scoring[0], scheduler, args.sharing, args.tie_break, args.rack_size, args.give_up
    )
    seeds = list(range(args.seed, args.seed + args.seeds))
    runs = len(job_policies) * len(seeds)
    workers = min(args.workers or os.cpu_count() or 1, runs)
    quiet = args.no_progress or not sys.stderr.isatty()
    with tqdm(total=runs, desc="runs", unit="run", file=sys.stderr, disable=quiet) as bar:
        results = run_pool(experiment, job_policies, seeds, workers, lambda _: bar.update(1))
    summary = summarise_jobs(results)
    gpus = sum(node.gpus for node in nodes)
    racks = -(-len(nodes) // args.rack_size)
    used = scheduler.describe() if scheduler is not None else "none (the extender's priority alone decides)"
    if args.json:
        report = {
            "nodes": len(nodes),
            "racks": racks,
            "rackSize": args.rack_size,
            "jobs": len(jobs),
            "jobGpus": sum(job.gpus for job in jobs),
            "policy": scoring[0],
            "schedulerConfig": scheduler.to_json() if scheduler is not None else None,
            "sharing": args.sharing,
            "giveUpSeconds": args.give_up,
            "summary": summary,
            "results": [r.to_json() for r in results],
        }
        print(json.dumps(report, indent=2))
    else:
        print(
            f"{len(nodes)} nodes, {gpus} GPUs in {racks} racks of {args.rack_size} nodes, {len(jobs)} jobs asking "
            f"{sum(job.gpus for job in jobs)} GPUs, policy {scoring[0]}, sharing {args.sharing}"
        )
        print(f"scheduler config: {used}")
        if len(seeds) > 1:
            print(f"per job policy over seeds {seeds[0]}..{seeds[-1]}: median [min-max]")
        print(format_jobs_table(summary))
    if args.plot:
        title = f"{len(nodes)} nodes, {len(jobs)} jobs, policy {scoring[0]}, sharing {args.sharing}, seed {seeds[0]}"
        write_jobs_plot(results, args.plot, title)
    return 0
