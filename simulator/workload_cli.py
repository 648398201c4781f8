"""``kube-gpu-extender workload``: GpuFragmentation's ``workload`` and GpuCpuBalance's ``cpuPerGpu``
from a cluster's pods (simulator.cluster_workload), as a YAML fragment to paste into the extender's
configuration. Kept light: the API client and the simulator load only when the command runs."""

from __future__ import annotations

import argparse
import datetime
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_workload_parser", "default_kubeconfig", "run_workload"]


def add_workload_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "workload",
        help="derive GpuFragmentation's workload and GpuCpuBalance's cpuPerGpu from a cluster's pods",
        description="Reads the cluster's pods (bound and pending) and prints the args of GpuFragmentation "
        "(workload) and GpuCpuBalance (cpuPerGpu) as YAML, ready to paste into the extender's configuration.",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--from-cluster", action="store_true", help="list the pods, ResourceClaims and templates of the cluster"
    )
    source.add_argument(
        "--pods",
        metavar="FILE",
        help="a kubectl get pods,resourceclaims,resourceclaimtemplates -A -o yaml file (List, multi-document "
        "YAML or JSON), or an openb pod list CSV",
    )
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="with --from-cluster: the kubeconfig (default: $KUBECONFIG, then ~/.kube/config, then the "
        "in-cluster ServiceAccount)",
    )
    parser.add_argument(
        "--scheduler-name",
        action="append",
        metavar="NAME",
        help="count only pods with this spec.schedulerName (repeatable; default: every scheduler)",
    )
    parser.add_argument(
        "--gpu-class",
        action="append",
        metavar="NAME",
        help="DeviceClass whose devices are GPUs in ResourceClaims (repeatable; default gpu.nvidia.com)",
    )
    parser.add_argument(
        "--include-finished", action="store_true", help="count Succeeded and Failed pods too (default: left out)"
    )


def default_kubeconfig(environ: Any = os.environ, home: Path | None = None) -> str | None:
    """--kubeconfig's default: the first file of $KUBECONFIG, then ~/.kube/config; None (in-cluster)
    when neither exists."""
    for candidate in (environ.get("KUBECONFIG") or "").split(os.pathsep):
        if candidate and Path(candidate).is_file():
            return candidate
    config = (home or Path.home()) / ".kube" / "config"
    return str(config) if config.is_file() else None


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def run_workload(args: argparse.Namespace) -> int:
    import asyncio

    from app.cluster.kube import ApiError, CredentialsError, KubeClient
    from app.cluster.snapshot import SnapshotError, iter_objects
    from simulator.cluster_workload import DEFAULT_GPU_CLASSES, Collector, Selection, collect_cluster, render
    from simulator.trace import TraceError, load_pods_csv

    if args.kubeconfig and not args.from_cluster:
        return _fail("--kubeconfig needs --from-cluster")
    gpu_classes = frozenset(args.gpu_class or DEFAULT_GPU_CLASSES)
    selection = Selection(frozenset(args.scheduler_name or ()), args.include_finished, gpu_classes)
    collector = Collector(selection)
    trace = None  # an openb CSV's pods, taken as they are
    if args.from_cluster:
        path = args.kubeconfig or default_kubeconfig()
        try:
            client = KubeClient.from_kubeconfig(path)
        except CredentialsError as exc:
            return _fail(str(exc))

        async def read() -> None:
            try:
                await collect_cluster(client, collector)
            finally:
                await client.close()

        try:
            asyncio.run(read())
        except ApiError as exc:
            return _fail(f"cannot list the cluster's pods at {client.base_url}: {exc}")
        source = f"cluster {client.base_url}"
        if collector.tally.claims_unlisted:
            print(
                f"warning: cannot list {collector.tally.claims_unlisted}; GPUs from ResourceClaims are not counted",
                file=sys.stderr,
            )
    elif args.pods.lower().endswith(".csv"):
        try:
            trace = load_pods_csv(args.pods)
        except TraceError as exc:
            return _fail(str(exc))
        source = f"trace {args.pods}"
    else:
        try:
            for obj in iter_objects(args.pods):
                collector.add(obj)
        except SnapshotError as exc:
            return _fail(str(exc))
        source = f"file {args.pods}"
    pods = trace if trace is not None else collector.pods()
    tally = collector.tally
    for problem in tally.unreadable[:5]:
        print(f"warning: pod {problem}: left out", file=sys.stderr)
    if tally.missing_claims:
        print(
            f"warning: {tally.missing_claims} claim reference(s) of counted pods name no ResourceClaim or "
            "ResourceClaimTemplate that was read; their GPUs are not counted",
            file=sys.stderr,
        )
    if not pods:
        return _fail(f"{source}: no pod to count (bound or pending, of the schedulers asked)")
    if not any(pod.gpus for pod in pods):
        return _fail(
            f"{source}: none of the {len(pods):,} pods counted asks for GPUs (nvidia.com/gpu in a container, or a "
            f"ResourceClaim of class {', '.join(sorted(gpu_classes))}): nothing to derive"
        )
    cpu_only = sum(1 for pod in pods if not pod.gpus)
    if cpu_only * 2 > len(pods):
        print(
            f"note: {100 * cpu_only / len(pods):.0f} % of the pods counted ask for no GPU and take most of the "
            "workload's popularity; --scheduler-name can limit the count to the extender's profile",
            file=sys.stderr,
        )
    today = datetime.datetime.now(datetime.UTC).date()
    sys.stdout.write(render(pods, tally, source, gpu_classes, today))
    return 0
