"""Scheduling throughput and GPU packing through a real kube-scheduler and API server (run by hand).

One control plane on loopback (tests/e2e/controlplane.py), 1,000 nodes (700 with 8 GPUs, 300
CPU-only), then in each round, one after the other on the same cluster:

* ``baseline``: kube-scheduler alone, its default profile (no extender), serving ``gpu-scheduler``,
  on Go's default runtime settings;
* ``extender``: kube-scheduler with the shipped deploy/kube-scheduler-config.yaml and the Go runtime
  settings of deploy/deployment.yaml (GOGC, GOMEMLIMIT), and the extender (the shipped deploy/
  config) as a process;
* with ``--extra-phase extender-go-defaults``, the same with kube-scheduler on Go's defaults, and with
  ``baseline-go-shipped`` kube-scheduler alone with deploy/'s settings: what those settings change;
* with ``--extra-phase extender-ties-to-scheduler``, the shipped configuration with ``tieBreak.random``
  off: equally scored nodes all pass /filter, and kube-scheduler scores them and calls /prioritize;
* with ``--extra-phase extender-log-warning``, the shipped extender at ``--log-level warning``: no
  INFO line a bind, so what the extender's logging costs;
* with ``--extra-phase extender-null``, also the shipped kube-scheduler config behind
  ``bench.null_extender`` (passes the first candidate, binds, nothing else): what the extender
  protocol costs kube-scheduler and the API server, which no extender can avoid; with
  ``extender-null-raw`` also behind ``bench.null_raw``, the same null extender without a web framework
  or an HTTP client library (a check that the floor is itself as cheap as the protocol allows), and
  with ``extender-null-raw-watch`` that one keeping the extender's pod watch open (the floor of any
  extender that keeps a pod cache), with ``extender-null-raw-pack`` that one passing the lowest-named
  candidate (pods fill nodes one after another, as packing places them);
* with ``--extra-phase extender-null-filter``, the shipped extender whose /filter answers the first
  candidate without scoring (``bench.extender_null_filter``): its HTTP server, watches, /bind and
  bookkeeping alone, between the null extenders and the shipped extender; with ``extender-unscored``
  the shipped extender whose /filter does all its work but keeps the first node that passes instead
  of scoring them (``bench.extender_unscored``): the most any cheaper scoring could reach; with
  ``extender-nameless`` the shipped extender whose /filter judges every node of its cache without
  reading the request's names (``bench.extender_nameless``): its CPU without the names; its pods/s
  bounds nothing (some answers name a node kube-scheduler no longer lists, and the pod is retried).

Odd rounds run the phases in reverse order (``--order alternate``, the default): each phase ages the
cluster for the next, and the extender phase should not always run on the oldest one. With ``--order
bracket`` the extra phases run again after the extender, in reverse, and a null's figure in a round
is the geometric mean of its two runs: the machine's speed drifts within minutes, and the two runs
bracket the extender's.

Each round also prints the ratio a zero-cost extender could reach when the cores are the limit:
every process's CPU seconds per pod in the baseline over those of the extender phase without the
extender's own (``cpu_bound``).

Each phase creates the same pods (by default 2,000: 85 % ask for 1 GPU, the rest are CPU-only) as
fast as the API server takes them and measures pods/s from the first create to the last bind (a
watch on the namespace sees the binds); the pods are then deleted. The ratio extender/baseline is
printed per round; compare figures as ratios within one run (everything shares the machine's cores).
Both phases run kube-scheduler with the same client rate limit (``--scheduler-qps``, default 1,000
requests/s): at kube-scheduler's default of 50/s the baseline, which binds through that client, is
capped near 50 pods/s while the extender binds through its own client, and the ratio would flatter us.
Beside it: CPU seconds each process used during the phase, the API server's requests and watch
events during it (``bench.apiserver_work``), and the extender's own verb latencies from its /metrics.

``--fill-to 0.9`` then keeps the extender phase's pods and adds 1-GPU pods until that share of the
cluster's GPUs is in use, and checks that an 8-GPU pod still finds a node (issue 13: with the old
profile an 8-GPU pod found none at 30 % use). Packing figures: GPU nodes with any GPU used, nodes
with exactly one, the largest count on a node (never above 8).

    python -m bench.throughput --rounds 2 --fill-to 0.9 --json bench/results/throughput.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import math
import random
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import yaml

from bench import apiserver_work, cpu_report, cpu_sampler, stage_cpu
from bench.plane import GPU, add_nodes, bulk, cpu_seconds
from bench.pprof import SCHEDULER_FLAGS, capture
from bench.throughput_phases import (
    EXTENDER_MODULES,
    EXTRA_PHASE_HELP,
    EXTRA_PHASES,
    NULL_EXTENDERS,
    ORDERS,
    SCHEDULER_EDITS,
    phase_kind,
    phase_order,
)
from bench.throughput_report import report
from bench.verb_latency import verb_latencies
from tests.e2e.api import pod_manifest
from tests.e2e.binaries import REPO, locate_binaries
from tests.e2e.controlplane import ADMIN_TOKEN, ControlPlane, Extender, extender_config, scheduler_env
from tests.e2e.process import Proc, free_port, stop_children_on_sigterm, wait_for

NAMESPACE = "bench"
PPROF_SECONDS = 5


@dataclass
class Phase:
    name: str
    pods: int
    seconds: float
    pods_per_second: float
    unbound: int
    cpu_seconds: dict[str, float] = field(default_factory=dict)
    verbs: dict[str, dict[str, float]] = field(default_factory=dict)
    api: dict[str, float] = field(default_factory=dict)  # the API server's requests and watch events
    extender_cpu: dict[str, float] = field(default_factory=dict)  # --cpu-profile: µs per pod by part
    extender_stages: dict[str, float] = field(default_factory=dict)  # --cpu-profile: µs per pod by stage, measured


# --------------------------------------------------------------------------- cluster
def pod_mix(count: int, gpu_share: float, seed: int) -> list[int]:
    """GPUs per pod: ``gpu_share`` of them ask for one, the rest none (CPU-only), shuffled."""
    rng = random.Random(seed)
    gpus = [1] * round(count * gpu_share) + [0] * (count - round(count * gpu_share))
    rng.shuffle(gpus)
    return gpus


def _pods(prefix: str, gpus: list[int]) -> list[tuple[str, str, Any, str]]:
    calls = []
    for i, n in enumerate(gpus):
        manifest = pod_manifest(f"{prefix}-{i:05d}", gpus=n, cpu="500m", memory="1Gi")
        calls.append(("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", manifest, "application/json"))
    return calls


# --------------------------------------------------------------------------- measuring
class BindWatch:
    """Watches the benchmark namespace's pods; records when each becomes bound.

    A watch can end or fail (an API server whose watch cache is behind the list's resourceVersion
    answers "Too large resource version"); it is then listed again and resumed, and pods found bound
    by that list count from the list's time.
    """

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.bound: dict[str, float] = {}
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _see(self, pod: dict[str, Any]) -> None:
        if (pod.get("spec") or {}).get("nodeName"):
            with self.lock:
                self.bound.setdefault(pod["metadata"]["name"], time.monotonic())

    def _run(self) -> None:
        with httpx.Client(
            base_url=self.plane.url,
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
            verify=str(self.plane.serving_ca),
            timeout=httpx.Timeout(30.0, read=60.0),
        ) as http:
            while not self._stop.is_set():
                try:
                    self._list_and_watch(http)
                except httpx.HTTPError:
                    self._stop.wait(0.2)

    def _list_and_watch(self, http: httpx.Client) -> None:
        listed = http.get(f"/api/v1/namespaces/{NAMESPACE}/pods")
        listed.raise_for_status()
        body = listed.json()
        for pod in body["items"]:
            self._see(pod)
        params = {"watch": "1", "resourceVersion": body["metadata"]["resourceVersion"], "allowWatchBookmarks": "true"}
        with http.stream("GET", f"/api/v1/namespaces/{NAMESPACE}/pods", params=params) as response:
            response.raise_for_status()
            for line in response.iter_lines():
                if self._stop.is_set():
                    return
                if not line.strip():
                    continue
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    return  # list again
                if event.get("type") in ("ADDED", "MODIFIED"):
                    self._see(event.get("object") or {})

    def count(self, names: set[str]) -> int:
        with self.lock:
            return len(names & self.bound.keys())

    def last(self, names: set[str]) -> float:
        with self.lock:
            return max(self.bound[n] for n in names if n in self.bound)

    def stop(self) -> None:
        self._stop.set()


def _cpu(procs: dict[str, Proc]) -> dict[str, float]:
    out = {}
    for name, proc in procs.items():
        if proc.alive():
            out[name] = cpu_seconds(proc.pid)
    out["driver"] = time.process_time()
    return out


def run_phase(
    plane: ControlPlane,
    name: str,
    gpus: list[int],
    watch: BindWatch,
    timeout: float,
    pprof: Path | None = None,
    samples: Path | None = None,
) -> Phase:
    names = {f"{name}-{i:05d}" for i in range(len(gpus))}
    profiling = None
    if pprof is not None:  # the first seconds of the phase, the shortest phase's length
        argv = plane.procs["kube-scheduler"].argv
        port = next(int(a.split("=", 1)[1]) for a in argv if a.startswith("--secure-port="))
        profiling = capture(port, PPROF_SECONDS, pprof / f"{name}.pb.gz")
    api_before = _api_counts(plane)
    sampled = plane.procs["extender"].pid if samples is not None else None
    cpu_before = _cpu(plane.procs)
    if sampled is not None and samples is not None:
        cpu_sampler.start(sampled, samples)
    started = time.monotonic()
    asyncio.run(bulk(plane, _pods(name, gpus), concurrency=8))
    with contextlib.suppress(TimeoutError):  # reported as unbound
        wait_for(f"{len(names)} pods bound", lambda: watch.count(names) == len(names), timeout, interval=0.1)
    bound = watch.count(names)
    elapsed = (watch.last(names) if bound else time.monotonic()) - started
    cpu_after = _cpu(plane.procs)
    cpu = {k: round(cpu_after[k] - cpu_before.get(k, 0.0), 2) for k in cpu_after}
    parts: dict[str, float] = {}
    stages: dict[str, float] = {}
    if sampled is not None and samples is not None:
        stacks = cpu_report.read_folded(cpu_sampler.collect(sampled, samples))
        parts = cpu_report.per_pod(cpu_report.parts(stacks), cpu.get("extender", 0.0), bound)
        measured = cpu_sampler.collect_stages(samples)  # none in a null extender
        stages = stage_cpu.per_pod(measured, cpu.get("extender", 0.0), bound) if measured else {}
    api = apiserver_work.work(api_before, _api_counts(plane))
    if profiling is not None:
        profiling.join()
    rate = round(bound / elapsed, 1)
    phase = Phase(name, len(names), round(elapsed, 2), rate, len(names) - bound, cpu, api=api, extender_cpu=parts)
    phase.extender_stages = stages
    return phase


def _api_counts(plane: ControlPlane) -> dict[str, float]:
    return apiserver_work.counts(plane.admin.http.get("/metrics").text)


def delete_pods(plane: ControlPlane) -> None:
    plane.admin.delete(f"/api/v1/namespaces/{NAMESPACE}/pods", grace=0)  # deletecollection
    wait_for("the benchmark pods deleted", lambda: not plane.admin.items(f"/api/v1/namespaces/{NAMESPACE}/pods"), 120)


# --------------------------------------------------------------------------- schedulers
def baseline_scheduler_config(path: Path) -> Path:
    """kube-scheduler's defaults, serving the benchmark's schedulerName, no extender."""
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": "gpu-scheduler"}],
    }
    path.write_text(yaml.safe_dump(config))
    return path


def start_null_extender(
    plane: ControlPlane, module: str, options: Sequence[str] = (), runner: Sequence[str] = ()
) -> Extender:
    """A null extender (``bench.null_extender`` or ``bench.null_raw``, with ``options``) in the
    extender's place (same ServiceAccount, same process slot); ``runner`` as for ``start_extender``."""
    port = free_port()
    argv = [sys.executable, "-m", *runner, module, *options, "--kubeconfig", str(plane.extender_kubeconfig())]
    log = plane.workdir / "logs" / f"{module.rsplit('.', 1)[1]}.log"
    proc = Proc("extender", [*argv, "--port", str(port)], log, env={"PYTHONPATH": str(REPO)})
    plane.procs["extender"] = proc.start()
    extender = Extender(proc, port)
    extender.wait_ready()
    return extender


def _leading_since(plane: ControlPlane, since: float) -> bool:
    """Whether the shipped profile's lease was acquired after ``since`` (a new scheduler leads)."""
    lease = plane.admin.find("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/gpu-scheduler") or {}
    acquired = (lease.get("spec") or {}).get("acquireTime")
    if not acquired:
        return False
    stamp = datetime.fromisoformat(acquired.replace("Z", "+00:00")).timestamp()
    return stamp >= since - 1.0  # acquireTime has microseconds; allow for clock rounding


def packing(plane: ControlPlane, gpu_nodes: list[str]) -> dict[str, Any]:
    used: Counter[str] = Counter()
    for pod in plane.admin.items(f"/api/v1/namespaces/{NAMESPACE}/pods"):
        node = pod["spec"].get("nodeName")
        if node:
            used[node] += sum(
                int((c["resources"].get("requests") or {}).get(GPU, 0)) for c in pod["spec"]["containers"]
            )
    per_node = [used.get(n, 0) for n in gpu_nodes]
    return {
        "gpuUse": round(sum(per_node) / (8 * len(gpu_nodes)), 3),
        "gpuNodesUsed": sum(1 for u in per_node if u),
        "gpuNodesWithOne": sum(1 for u in per_node if u == 1),
        "wholeFreeGpuNodes": sum(1 for u in per_node if u == 0),
        "maxGpusOnANode": max(per_node, default=0),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpu-nodes", type=int, default=700)
    parser.add_argument("--cpu-nodes", type=int, default=300)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--gpu-share", type=float, default=0.85, help="share of pods asking for 1 GPU")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--fill-to", type=float, default=0.0, help="then fill to this GPU use and try an 8-GPU pod")
    parser.add_argument("--timeout", type=float, default=600.0, help="per phase")
    parser.add_argument(
        "--scheduler-qps",
        type=float,
        default=1000.0,
        help="kube-scheduler's client rate limit, both phases (0: its default 50/s, which caps the baseline's binds)",
    )
    parser.add_argument(
        "--extra-phase",
        action="append",
        default=[],
        choices=EXTRA_PHASES,
        help=EXTRA_PHASE_HELP,
    )
    parser.add_argument(
        "--pprof",
        help=f"directory for a CPU profile of kube-scheduler over the first {PPROF_SECONDS} s of each phase "
        "(read them with python -m bench.pprof)",
    )
    parser.add_argument(
        "--cpu-profile",
        metavar="DIR",
        help="sample the extender's CPU time in each extender phase (bench.cpu_sampler): folded stacks go here, "
        "microseconds per pod by part are printed (read a file with python -m bench.cpu_report), and beside them "
        "each stage's CPU, measured (bench.stage_cpu)",
    )
    parser.add_argument(
        "--order",
        choices=ORDERS,
        default="alternate",
        help="alternate: every other round runs its phases in reverse order, so that no phase always runs "
        "on the cluster the others have aged (default); fixed: baseline, the extra phases, extender in every round; "
        "bracket: baseline, the extra phases, extender, the extra phases again in reverse (a null's two runs "
        "bracket the extender's: the machine's drift within a round evens out)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", help="write the results here")
    parser.add_argument(
        "--workdir",
        help="keep the control plane's files and logs here (default: a temporary directory, removed after a run "
        "that succeeds and kept after one that fails)",
    )
    args = parser.parse_args(argv)

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="kge-throughput-"))
    pprof = Path(args.pprof) if args.pprof else None
    if pprof is not None:
        pprof.mkdir(parents=True, exist_ok=True)
    profile_flags = list(SCHEDULER_FLAGS) if pprof is not None else []
    cpu_dir = Path(args.cpu_profile).resolve() if args.cpu_profile else None
    if cpu_dir is not None:
        cpu_dir.mkdir(parents=True, exist_ok=True)
    stop_children_on_sigterm()  # stopped by its PID, it still stops the control plane below
    plane = ControlPlane(workdir, locate_binaries())
    results: dict[str, Any] = {"args": vars(args), "rounds": []}
    try:
        plane.start()
        plane.add_namespace(NAMESPACE)
        print(f"control plane up ({workdir}); adding {args.gpu_nodes + args.cpu_nodes} nodes", flush=True)
        nodes = add_nodes(plane, args.gpu_nodes, args.cpu_nodes)
        gpu_nodes = [n for n in nodes if n.startswith("gpu-")]
        gpus = pod_mix(args.pods, args.gpu_share, args.seed)
        watch = BindWatch(plane)
        for round_index in range(args.rounds):
            phases = {}
            for name in phase_order(args.extra_phase, round_index, args.order):
                kind = phase_kind(name)  # what the phase runs (its second run under --order bracket too)
                started = time.time()
                qps = args.scheduler_qps or None
                samples = None  # the extender's CPU samples of this phase (--cpu-profile)
                if cpu_dir is not None and not kind.startswith("baseline"):
                    samples = cpu_dir / f"r{round_index}-{name}.folded"
                if kind.startswith("baseline"):
                    flags = ["--feature-gates=OpportunisticBatching=false"] if kind == "baseline-nobatching" else []
                    scheduler_config = baseline_scheduler_config(workdir / "baseline-scheduler.yaml")
                    env = scheduler_env() if kind == "baseline-go-shipped" else {}
                    plane.start_scheduler(0, scheduler_config, qps=qps, flags=[*flags, *profile_flags], env=env)
                else:
                    runner = cpu_sampler.runner(samples) if samples is not None else []
                    config = extender_config()
                    if kind == "extender-feasible":
                        config["filterReturns"] = "Feasible"
                    if kind == "extender-failures-always":
                        config["filterFailures"] = "Always"
                    if kind == "extender-ties-to-scheduler":
                        config["tieBreak"] = {**config["tieBreak"], "random": False}
                    null = NULL_EXTENDERS.get(kind)
                    if null:
                        extender = start_null_extender(plane, *null, runner=runner)
                    else:
                        module = EXTENDER_MODULES.get(kind, "app.cli")
                        level = "warning" if kind == "extender-log-warning" else "info"
                        extender = plane.start_extender(config, module=module, runner=runner, log_level=level)
                    edit = SCHEDULER_EDITS.get(kind)
                    go_env: dict[str, str] | None = {} if kind == "extender-go-defaults" else None  # None: deploy/'s
                    plane.start_scheduler(extender.port, qps=qps, edit=edit, env=go_env, flags=profile_flags)
                    wait_for("kube-scheduler to lead", functools.partial(_leading_since, plane, started), 60)
                phase = run_phase(plane, f"r{round_index}-{name}", gpus, watch, args.timeout, pprof, samples)
                if kind.startswith("extender") and kind not in NULL_EXTENDERS:  # the null ones keep no metrics
                    phase.verbs = verb_latencies(extender.get("/metrics").text)
                if name == "extender" and round_index == args.rounds - 1:
                    results["packing"] = packing(plane, gpu_nodes)
                    if args.fill_to:
                        results["fill"] = fill(plane, watch, gpu_nodes, args.fill_to, args.timeout)
                plane.stop_component("kube-scheduler")
                plane.stop_component("extender")
                phases[name] = phase
                print(
                    f"round {round_index} {name}: {phase.pods_per_second} pods/s ({phase.pods} pods in "
                    f"{phase.seconds} s, {phase.unbound} unbound); cpu s {phase.cpu_seconds}",
                    flush=True,
                )
                for line in apiserver_work.describe(phase.api, phase.pods):
                    print(f"    api: {line}", flush=True)
                for label, split in (("", phase.extender_cpu), (" by stage (measured)", phase.extender_stages)):
                    if split:
                        parts = ", ".join(f"{part} {micros:.0f}" for part, micros in split.items())
                        print(f"    extender CPU{label}, µs per pod: {parts}", flush=True)
                delete_pods(plane)
            ratio = phases["extender"].pods_per_second / max(phases["baseline"].pods_per_second, 1e-9)
            bound = cpu_bound(phases["baseline"], phases["extender"])
            results["rounds"].append(
                {"ratio": round(ratio, 3), "cpuBound": round(bound, 3), **{k: asdict(v) for k, v in phases.items()}}
            )
            print(
                f"round {round_index}: ratio extender/baseline = {ratio:.2f}; CPU-bound ratio with an extender "
                f"that cost nothing = {bound:.2f}",
                flush=True,
            )
        watch.stop()
    finally:
        plane.stop()
    if args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)  # etcd's data and the logs: ~90 MB a run
    report(results, EXTRA_PHASES, NULL_EXTENDERS)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


def fill(plane: ControlPlane, watch: BindWatch, gpu_nodes: list[str], target: float, timeout: float) -> dict[str, Any]:
    """1-GPU pods until ``target`` of the GPUs are in use, then one 8-GPU pod: does it find a node?"""
    state = packing(plane, gpu_nodes)
    missing = max(0, math.ceil(target * 8 * len(gpu_nodes)) - round(state["gpuUse"] * 8 * len(gpu_nodes)))
    names = {f"fill-{i:05d}" for i in range(missing)}
    asyncio.run(bulk(plane, _pods("fill", [1] * missing), concurrency=8))
    wait_for(f"{missing} fill pods bound", lambda: watch.count(names) == len(names), timeout, interval=0.2)
    state = packing(plane, gpu_nodes)
    plane.admin.create(f"/api/v1/namespaces/{NAMESPACE}/pods", pod_manifest("whole-node", gpus=8))
    try:
        wait_for("the 8-GPU pod bound", lambda: watch.count({"whole-node"}) == 1, 60, interval=0.1)
        found = True
    except TimeoutError:
        found = False
    return {**state, "eightGpuPodBound": found}


def cpu_bound(baseline: Phase, extender: Phase) -> float:
    """The ratio an extender of zero cost could reach in this run when the cores are the limit: CPU
    seconds per pod of every process in the baseline phase over those of the extender phase less the
    extender's own (kube-scheduler, the API server and etcd keep what serving an extender costs them)."""
    alone = sum(baseline.cpu_seconds.values()) / max(baseline.pods, 1)
    others = {name: cpu for name, cpu in extender.cpu_seconds.items() if name != "extender"}
    with_extender = sum(others.values()) / max(extender.pods, 1)
    return alone / with_extender if with_extender else 0.0


if __name__ == "__main__":
    sys.exit(main())
