"""Bind throughput of the extender against a real API server, with an over-commit audit (run by hand).

One control plane on loopback (tests/e2e/controlplane.py; no kube-scheduler), ``--nodes`` Ready nodes
with 8 GPUs each, the extender as a process with the shipped deploy/ config under deploy/rbac.yaml's
ServiceAccount. ``--pods`` pending pods (80 % ask for 1 GPU, 15 % for 2, 5 % for 4; a schedulerName
nobody serves) are created first and the extender's pod watch is waited for (not timed). Then
``--concurrency`` clients drive the extender's own /filter and /bind as kube-scheduler would (the
wire format of a nodeCacheCapable extender): /filter over every node name, /bind to the first name
that passed. A bind refused because the node filled up meanwhile is retried from /filter, as
kube-scheduler requeues the pod.

``--stale-share`` sends that share of first binds to a node the driver already saw filled by binds
the extender confirmed (a stale decision): the extender must refuse them. Afterwards the audit lists
every pod from the API server: per node, requests (nvidia.com/gpu, cpu, memory, pod count) against
allocatable; every bind answered with ``Error: ""`` must show its pod on that node, and no pod may
be bound without such an answer.

Pods/s counts confirmed binds from the first /bind sent to the last successful /bind answered.
Everything shares the machine's cores (driver, extender, API server, etcd): note the load.

    python -m bench.bind [--nodes 400] [--pods 2000] [--concurrency 16] [--stale-share 0.1] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from bench.bind_report import audit, print_table, summary
from bench.plane import GPU, add_nodes, bulk, cpu_seconds
from tests.e2e.api import pod_manifest
from tests.e2e.binaries import locate_binaries
from tests.e2e.controlplane import ADMIN_TOKEN, ControlPlane, Extender, extender_config
from tests.e2e.process import stop_children_on_sigterm, wait_for

__all__ = ["Drive", "create_pods", "drive", "gpu_mix", "wait_pods_seen"]

NAMESPACE = "bench-bind"
UNSERVED = "bench-unserved"  # no scheduler serves it: only the driver places these pods
MAX_ATTEMPTS = 20  # filter+bind rounds per pod before the driver gives it up


@dataclass
class Drive:
    """What the clients saw: per pod the node a bind confirmed, latencies, and failures by kind."""

    pods: int
    concurrency: int
    filters_in_flight: int = 0  # the cap on concurrent /filter calls (0: none)
    seconds: float = 0.0
    pods_per_second: float = 0.0
    confirmed: dict[str, str] = field(default_factory=dict)  # pod name -> node (bind answered Error "")
    filter_ms: list[float] = field(default_factory=list)
    bind_ms: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)  # the extender's bind errors by kind, and client-side
    unschedulable: int = 0  # /filter passed no node (the cluster is full for this pod)
    given_up: int = 0
    stale_sent: int = 0
    stale_accepted: int = 0  # must stay 0: the node was full by confirmed binds alone
    timed_out: bool = False


# --------------------------------------------------------------------------- pods
def gpu_mix(count: int, seed: int) -> list[int]:
    """GPUs per pod: 80 % one, 15 % two, 5 % four, shuffled."""
    twos, fours = round(count * 0.15), round(count * 0.05)
    gpus = [4] * fours + [2] * twos + [1] * (count - twos - fours)
    random.Random(seed).shuffle(gpus)
    return gpus


def create_pods(plane: ControlPlane, namespace: str, gpus: Sequence[int]) -> list[dict[str, Any]]:
    """Pending pods for nobody's scheduler; returns them as the API server stores them (what
    kube-scheduler would send), in creation order."""
    calls = [
        (
            "POST",
            f"/api/v1/namespaces/{namespace}/pods",
            pod_manifest(f"p-{i:05d}", gpus=n, cpu="500m", memory="1Gi", scheduler=UNSERVED),
            "application/json",
        )
        for i, n in enumerate(gpus)
    ]
    asyncio.run(bulk(plane, calls, concurrency=8))
    pods = plane.admin.items(f"/api/v1/namespaces/{namespace}/pods")
    return sorted(pods, key=lambda p: p["metadata"]["name"])


def wait_pods_seen(extender: Extender, pods: Sequence[dict[str, Any]], timeout: float = 120.0) -> None:
    """Until the extender's pod watch has delivered the last of ``pods`` (its resourceVersion reached).

    resourceVersions compare as integers since Kubernetes 1.35 (KEP-5504); etcd's are.
    """
    newest = max(int(p["metadata"]["resourceVersion"]) for p in pods)

    def seen() -> bool:
        sources = extender.get("/debug?nodes=false&decisions=0").json()["cache"]["sources"]
        return int(sources["pods"]["resourceVersion"] or 0) >= newest

    wait_for(f"the extender's pod watch at resourceVersion {newest}", seen, timeout, interval=0.1)


def _gpus(pod: dict[str, Any]) -> int:
    return sum(int((c["resources"].get("requests") or {}).get(GPU, 0)) for c in pod["spec"]["containers"])


# --------------------------------------------------------------------------- driving
def _filter_body(pod: dict[str, Any], names_json: bytes) -> bytes:
    """ExtenderArgs of a nodeCacheCapable extender, as kube-scheduler sends it."""
    pod_json = json.dumps(pod, separators=(",", ":")).encode()
    return b'{"Pod":' + pod_json + b',"Nodes":null,"NodeNames":' + names_json + b"}"


def _bind_errors(metrics_text: str) -> Counter[str]:
    out: Counter[str] = Counter()
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.name == "kube_gpu_extender_bind_errors_total":
                out[sample.labels.get("kind", "")] += int(sample.value)
    return out


async def drive(
    url: str,
    pods: Sequence[dict[str, Any]],
    nodes: Sequence[str],
    *,
    concurrency: int,
    stale_share: float = 0.0,
    seed: int = 1,
    timeout: float = 600.0,
    gpus_per_node: int = 8,
    filters_in_flight: int = 0,
) -> Drive:
    """Filter and bind every pod through the extender at ``url``, ``concurrency`` pods in flight.

    ``nodes`` all have ``gpus_per_node`` GPUs (the stale choice counts on it). ``filters_in_flight``
    caps concurrent /filter calls (1: kube-scheduler's one scheduling loop, binds still overlap;
    0: no cap)."""
    result = Drive(len(pods), concurrency, filters_in_flight)
    rng = random.Random(seed)
    names_json = json.dumps(list(nodes), separators=(",", ":")).encode()
    used: dict[str, int] = defaultdict(int)  # GPUs per node by confirmed binds only
    # Request bodies are built before the clock starts: the driver shares the cores with the extender.
    queue = [(pod, _filter_body(pod, names_json)) for pod in reversed(pods)]
    filtering = asyncio.Semaphore(filters_in_flight or concurrency)
    first_bind = last_bind = 0.0
    headers = {"Content-Type": "application/json"}

    def stale_node(gpus: int) -> str | None:
        full = [n for n, u in used.items() if u + gpus > gpus_per_node]
        return rng.choice(full) if full else None

    async def post(http: aiohttp.ClientSession, verb: str, body: bytes, latencies: list[float]) -> Any:
        started = time.perf_counter()
        async with http.post(f"{url}/{verb}", data=body, headers=headers) as response:
            answer = await response.read()
            if response.status != 200:
                raise RuntimeError(f"/{verb}: HTTP {response.status} {answer[:200]!r}")
        latencies.append((time.perf_counter() - started) * 1000)
        return json.loads(answer)

    async def schedule(http: aiohttp.ClientSession, pod: dict[str, Any], filter_body: bytes) -> None:
        nonlocal first_bind, last_bind
        meta, gpus = pod["metadata"], _gpus(pod)
        stale = rng.random() < stale_share
        for _ in range(MAX_ATTEMPTS):
            node = stale_node(gpus) if stale else None
            stale = False
            try:
                if node is None:
                    async with filtering:
                        answer = await post(http, "filter", filter_body, result.filter_ms)
                    if answer.get("Error"):
                        result.errors["filter-error"] += 1
                        continue
                    if not answer.get("NodeNames"):
                        result.unschedulable += 1
                        return
                    node = answer["NodeNames"][0]
                else:
                    result.stale_sent += 1
                bind = {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": node}
                first_bind = first_bind or time.perf_counter()
                answer = await post(http, "bind", json.dumps(bind).encode(), result.bind_ms)
            except (aiohttp.ClientError, TimeoutError, RuntimeError) as exc:
                result.errors[f"client-{type(exc).__name__}"] += 1
                continue
            if not answer.get("Error"):
                if used[node] + gpus > gpus_per_node:
                    result.stale_accepted += 1  # the audit shows it as an over-commit too
                used[node] += gpus
                result.confirmed[meta["name"]] = node
                last_bind = time.perf_counter()
                return
        result.given_up += 1

    async def client(http: aiohttp.ClientSession) -> None:
        while queue:
            await schedule(http, *queue.pop())

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30)) as http:
        errors_before = _bind_errors(await (await http.get(f"{url}/metrics")).text())
        clients = [asyncio.ensure_future(client(http)) for _ in range(concurrency)]
        try:
            await asyncio.wait_for(asyncio.gather(*clients), timeout)
        except TimeoutError:
            result.timed_out = True
        errors_after = _bind_errors(await (await http.get(f"{url}/metrics")).text())
    result.errors.update(errors_after - errors_before)
    if result.confirmed:
        result.seconds = round(last_bind - first_bind, 3)
        result.pods_per_second = round(len(result.confirmed) / max(result.seconds, 1e-9), 1)
    return result


async def bind_direct(
    plane: ControlPlane,
    pods: Sequence[dict[str, Any]],
    nodes: Sequence[str],
    *,
    concurrency: int,
    gpus_per_node: int = 8,
    timeout: float = 600.0,
) -> Drive:
    """The API server's own ceiling: the same Bindings POSTed straight to it (first fit, no extender)."""
    result = Drive(len(pods), concurrency)
    free = dict.fromkeys(nodes, gpus_per_node)
    plan = []
    for pod in pods:
        gpus = _gpus(pod)
        node = next((n for n in nodes if free[n] >= gpus), None)
        if node is None:
            result.unschedulable += 1
            continue
        free[node] -= gpus
        meta = pod["metadata"]
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        plan.append(
            (f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/binding", meta["name"], node, binding)
        )
    plan.reverse()
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"}
    tls = ssl.create_default_context(cafile=str(plane.serving_ca))
    first = last = 0.0

    async def client(http: aiohttp.ClientSession) -> None:
        nonlocal first, last
        while plan:
            path, name, node, binding = plan.pop()
            started = time.perf_counter()
            first = first or started
            async with http.post(plane.url + path, data=json.dumps(binding).encode(), headers=headers) as response:
                await response.read()
                ok = response.status == 201
            result.bind_ms.append((time.perf_counter() - started) * 1000)
            if ok:
                result.confirmed[name] = node
                last = time.perf_counter()
            else:
                result.errors[f"http-{response.status}"] += 1

    connector = aiohttp.TCPConnector(limit=concurrency, ssl=tls)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30)) as http:
        try:
            await asyncio.wait_for(asyncio.gather(*(client(http) for _ in range(concurrency))), timeout)
        except TimeoutError:
            result.timed_out = True
    if result.confirmed:
        result.seconds = round(last - first, 3)
        result.pods_per_second = round(len(result.confirmed) / max(result.seconds, 1e-9), 1)
    return result


def _load() -> str:
    with contextlib.suppress(OSError):
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    return "?"


def _cpu(plane: ControlPlane) -> dict[str, float]:
    """CPU seconds so far of the extender, the API server, etcd and this driver."""
    out: dict[str, float] = {
        n: cpu_seconds(plane.procs[n].pid) for n in ("extender", "kube-apiserver", "etcd") if n in plane.procs
    }
    out["driver"] = time.process_time()
    return out


def _profile(extender: Extender, directory: str | None, phase: str) -> subprocess.Popen[bytes] | None:
    """py-spy recording the extender until SIGINT (``--profile``), as collapsed stacks."""
    if not directory:
        return None
    path = Path(directory) / f"extender-{phase}.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or "py-spy"
    argv = [spy, "record", "--pid", str(extender.proc.pid), "--format", "raw", "--rate", "200"]
    return subprocess.Popen([*argv, "--output", str(path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def wait_cache_empty(extender: Extender, timeout: float = 120.0) -> None:
    """Until the extender's cache holds no pods and no assumptions (the previous phase's are gone)."""

    def empty() -> bool:
        counts = extender.get("/debug?nodes=false&decisions=0").json()["cache"]["counts"]
        return bool(counts["pods"] == 0 and counts["assumedPods"] == 0)

    wait_for("the extender's cache without pods", empty, timeout, interval=0.1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=400, help="nodes with 8 GPUs each")
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument(
        "--stale-share", type=float, default=0.1, help="then a second phase: this share of binds go to a full node"
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="per phase; the run is aborted after it")
    parser.add_argument(
        "--filters-in-flight",
        type=int,
        default=0,
        help="cap on concurrent /filter calls (1: kube-scheduler's single scheduling loop; default: no cap)",
    )
    parser.add_argument(
        "--direct", action="store_true", help="first: the same binds POSTed straight to the API server (its ceiling)"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--profile", help="py-spy the extender during each phase; collapsed stacks go here")
    parser.add_argument(
        "--workdir",
        help="keep the control plane's files and logs here (default: a temporary directory, removed after a run "
        "that succeeds and kept after one that fails)",
    )
    args = parser.parse_args(argv)

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="kge-bind-"))
    stop_children_on_sigterm()  # stopped by its PID, it still stops the control plane below
    plane = ControlPlane(workdir, locate_binaries())
    results: dict[str, Any] = {"args": vars(args), "loadBefore": _load(), "phases": []}
    ok = True
    try:
        plane.start()
        nodes = add_nodes(plane, args.nodes, 0)
        extender = plane.start_extender(extender_config())
        print(f"control plane up ({workdir}), {len(nodes)} nodes, load {results['loadBefore']}", flush=True)
        phases = [("direct", 0.0)] if args.direct else []
        phases += [("clean", 0.0)] + ([("stale", args.stale_share)] if args.stale_share > 0 else [])
        for index, (name, stale_share) in enumerate(phases):
            namespace = f"{NAMESPACE}-{name}"
            plane.add_namespace(namespace)
            pods = create_pods(plane, namespace, gpu_mix(args.pods, args.seed + index))
            wait_pods_seen(extender, pods)
            cpu_before = _cpu(plane)
            profiler = _profile(extender, args.profile, name)
            run = asyncio.run(
                bind_direct(plane, pods, nodes, concurrency=args.concurrency, timeout=args.timeout)
                if name == "direct"
                else drive(
                    extender.url,
                    pods,
                    nodes,
                    concurrency=args.concurrency,
                    stale_share=stale_share,
                    seed=args.seed,
                    timeout=args.timeout,
                    filters_in_flight=args.filters_in_flight,
                )
            )
            if profiler is not None:
                profiler.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
                profiler.wait(60)
            cpu_after = _cpu(plane)
            cpu = {k: cpu_after[k] - cpu_before[k] for k in cpu_after}
            check = audit(plane, nodes, run.confirmed, namespace)
            row = {"phase": name, **summary(run, check, cpu)}
            results["phases"].append(row)
            print(f"{name}: {row['podsPerSecond']} pods/s, audit ok {check.ok}", flush=True)
            ok = ok and check.ok and not run.timed_out and run.stale_accepted == 0
            # The next phase starts on empty nodes again.
            plane.admin.delete(f"/api/v1/namespaces/{namespace}/pods", grace=0)
            wait_cache_empty(extender)
    finally:
        plane.stop()
    if args.workdir is None:
        if ok:
            shutil.rmtree(workdir, ignore_errors=True)  # etcd's data and the logs
        else:
            print(f"the run failed; its control plane's logs are in {workdir}", flush=True)
    results["loadAfter"] = _load()
    print_table(results["phases"])
    print(f"load average before {results['loadBefore']}, after {results['loadAfter']}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
