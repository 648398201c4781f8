"""Latency of /filter and /prioritize against a real server: the round trip kube-scheduler waits
for, and the server's own share of it.

This starts ``kube-gpu-extender serve`` on a generated snapshot, keeps one keep-alive connection
(kube-scheduler reuses one), sends sequential requests with every node as a candidate (the worst
case: a pod that no in-tree filter narrows down) and takes percentiles of ``perf_counter_ns``
around each call (``p50``/``p99``: body upload, decode, verdicts, encode, download). ``srv p50`` /
``srv p99`` are the server-side percentiles: each verb answer carries ``Server-Timing:
extender;dur=<ms>``, the handler's time from the request reaching the app through the answer
encoded. The targets (``target_ms``): round trip p99 1.0 ms up to 5,000 names and 3 ms up to 15,000,
server-side p99 10 ms per 1,000 full Nodes. The ``healthz`` row is a request through the ASGI app
whose handler does nothing; ``--floor`` adds ``floor`` rows, the same requests against
``bench.latency_floor``, which only sends back the extender's answers: what the protocol and the
client cost at those sizes. ``--reorder N`` sends the names in N orders, as kube-scheduler lists
them anew for each pod (one order repeated lets the extender reuse the rows it found for the last
list). ``--feasible`` asks /prioritize about the nodes /filter passed, as kube-scheduler does
(without it /prioritize gets every node, the worst case); with ``--shipped`` the configuration then
returns every feasible node (``filterReturns: Feasible``), since BestScored passes one and
kube-scheduler would not call /prioritize at all.

``--queues`` adds queues and fair sharing (50 ClusterQueues in 5 cohorts, 4 weighted
flavors): nodes get a ``gpu-type`` flavor label, bound GPU pods and the benchmark pods a queue, and
the profile FlavorFairness, so every request also pays the queue filter and score. Compare with a
run without it: the target there is "p99 at most 5 ms added over the baseline".

    python -m bench.latency --sizes 500,5000,15000 --nodelist 1000 --requests 300 --json out.json
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import platform
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from pathlib import Path

import httpx
import msgspec
import yaml

from bench.cluster import Obj, build_cluster, encode, write_cluster
from bench.latency_clients import CLIENTS, Client
from bench.latency_floor import answer_key
from bench.latency_queues import QUEUES_ADDED_TARGET_MS, label_for_queues, queue_config, queued
from bench.latency_report import Row, table
from bench.request_bodies import filter_body_names, filter_body_nodes, pending_pods, reordered
from tests.e2e.process import stop_children_on_sigterm

REPO = Path(__file__).resolve().parents[1]
NODELIST_TARGET_MS_PER_1000 = 10.0
SERVER_TIMING = re.compile(r"\bextender;dur=([0-9.]+)")
READ_TIMING = re.compile(r"\bread;dur=([0-9.]+)")
Case = tuple[str, list[bytes], Callable[[bytes], bool], float | None]  # verb, bodies, answer check, target


def target_ms(mode: str, nodes: int, queues: bool = False) -> float | None:
    """p99 budgets: round trip (what kube-scheduler waits) 1.0 ms up to 5,000 names and 3 ms up to
    15,000; server-side 10 ms per 1,000 full Nodes in NodeList mode (there the upload of a 10 MB body
    is the client's and the kernel's); none for larger name lists. ``Row.verdict`` reads which.

    With queues 5 ms more: that much over the baseline is allowed, so the real check is the
    difference with a run without ``--queues``.
    """
    added = QUEUES_ADDED_TARGET_MS if queues else 0.0
    if mode == "nodelist":
        return NODELIST_TARGET_MS_PER_1000 * nodes / 1000 + added
    if nodes <= 5000:
        return 1.0 + added
    return 3.0 + added if nodes <= 15000 else None


def percentile(sorted_ns: list[int], q: float) -> float:
    """Nearest-rank percentile in ms (p99 of 300 samples is the 297th: three samples may exceed it)."""
    rank = max(1, math.ceil(q / 100 * len(sorted_ns)))
    return sorted_ns[rank - 1] / 1e6


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def memory_mib(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a process in MiB, from /proc (Linux)."""
    values = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0]) / 1024
    return values.get("VmRSS", math.nan), values.get("VmHWM", math.nan)


# --------------------------------------------------------------------------- server
def _command(snapshot: Path, port: int, config: Path | None) -> list[str]:
    # This tree's app (PYTHONPATH is REPO), not the console script's: a worktree's bench measures it.
    serve = ["serve", "--snapshot", str(snapshot), "--host", "127.0.0.1", "--port", str(port)]
    return [sys.executable, "-m", "app.cli", *serve, *(["--config", str(config)] if config is not None else [])]


@contextlib.contextmanager
def server(
    snapshot: Path, log: Path, ready_timeout: float, config: Path | None = None
) -> Iterator[tuple[subprocess.Popen[bytes], int, float]]:
    """Run the extender until the block ends (also on errors): SIGTERM, then SIGKILL after 15 s."""
    port = free_port()
    started = time.monotonic()
    with open(log, "wb") as out:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        proc = subprocess.Popen(
            _command(snapshot, port, config), cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = started + ready_timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}: {log.read_text()[-2000:]}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1.0).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise TimeoutError(f"server not ready after {ready_timeout:.0f}s: {log.read_text()[-2000:]}")
            time.sleep(0.1)
        yield proc, port, time.monotonic() - started
    finally:
        stop_process(proc)


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM (the server's graceful shutdown), then SIGKILL if it has not exited in 15 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# --------------------------------------------------------------------------- checks and timing
def prioritize_after_filter(client: Client, asked: list[tuple[Obj, list[str]]]) -> list[bytes]:
    """kube-scheduler's /prioritize body for each (pod, candidates): the candidates /filter passed, in
    its order. A pod that no node passes is an error (the bench's pods all fit somewhere)."""
    bodies = []
    for pod, names in asked:
        status, content, _ = client.request("POST", "/filter", encode(filter_body_names(pod, names)))
        answer = msgspec.json.decode(content) if status == 200 else None
        passed = answer.get("NodeNames") if isinstance(answer, dict) else None
        if not passed:
            raise RuntimeError(f"/filter passed no node for a bench pod (HTTP {status}): {content[:200]!r}")
        bodies.append(encode(filter_body_names(pod, passed)))
    return bodies


def check_filter(body: bytes) -> bool:
    """``Error`` empty and some node passed (every pending pod fits somewhere in the generated cluster)."""
    result = msgspec.json.decode(body)
    if not isinstance(result, dict) or result.get("Error") != "":
        return False
    names, node_list = result.get("NodeNames"), result.get("Nodes")
    items = node_list.get("items") if isinstance(node_list, dict) else None
    return bool(names) or bool(items)


def check_prioritize(body: bytes, nodes: int) -> bool:
    """At most one entry per candidate and at least one (those scored 0 are left out), each an int
    score in 1..10."""
    result = msgspec.json.decode(body)
    return (
        isinstance(result, list)
        and 0 < len(result) <= nodes
        and all(type(e.get("Score")) is int and 1 <= e["Score"] <= 10 and e.get("Host") for e in result)
        and len({e["Host"] for e in result}) == len(result)
    )


def server_ns(header: str, metric: re.Pattern[str] = SERVER_TIMING) -> int | None:
    """A duration from ``Server-Timing`` (``extender``: the handler's; ``read``: its body read), or None."""
    match = metric.search(header)
    return round(float(match[1]) * 1e6) if match else None


def measure(
    client: Client, path: str, bodies: list[bytes], count: int, check: Callable[[bytes], bool]
) -> tuple[list[int], list[int], list[int], list[int], int]:
    """Sequential requests cycling over ``bodies`` (POST, or GET for an empty body): sorted round-trip
    ns, sorted server-side ns (from Server-Timing, for the verbs), errors.

    The client's cyclic GC is off while timing so its pauses are not charged to the server.
    """
    samples: list[int] = []
    handler: list[int] = []
    reads: list[int] = []
    processing: list[int] = []
    errors = 0
    gc.collect()
    gc.disable()
    try:
        for index in range(count):
            body = bodies[index % len(bodies)]
            started = time.perf_counter_ns()
            status, content, timing = client.request("POST" if body else "GET", path, body)
            samples.append(time.perf_counter_ns() - started)
            took, read = server_ns(timing), server_ns(timing, READ_TIMING)
            if took is not None:
                handler.append(took)
            if read is not None:
                reads.append(read)
                if took is not None:
                    processing.append(took - read)
            if status != 200 or not check(content):
                errors += 1
    finally:
        gc.enable()
    return sorted(samples), sorted(handler), sorted(reads), sorted(processing), errors


@dataclass
class Options:
    requests: int
    warmup: int
    seed: int
    ready_timeout: float
    client: str
    queues: bool = False
    shipped: bool = False
    floor: bool = False
    reorder: int = 1
    feasible: bool = False


def run_case(mode: str, n: int, options: Options, workdir: Path) -> list[Row]:
    """Generate the cluster, serve it, time each verb; the snapshot file is removed afterwards."""
    label = f"{mode}+queues" if options.queues else f"{mode}+shipped" if options.shipped else mode
    label += "+feasible" if options.feasible else ""
    snapshot = workdir / f"cluster-{label}-{n}.json"
    began = time.monotonic()
    pods = pending_pods()
    edit, config = None, None
    if options.shipped:  # deploy/extender-config.yaml's ExtenderConfiguration
        from tests.e2e.controlplane import extender_config

        config = workdir / f"config-{label}-{n}.yaml"
        settings = extender_config()
        if options.feasible:  # every feasible node passes, so that /prioritize has more than one to score
            settings["filterReturns"] = "Feasible"
        config.write_text(yaml.safe_dump(settings, sort_keys=False))
    if options.queues:
        edit, config = label_for_queues, workdir / f"config-{label}-{n}.yaml"
        config.write_text(yaml.safe_dump(queue_config(), sort_keys=False))
        pods = [queued(pod) for pod in pods]
    asked: list[tuple[Obj, list[str]]] = []  # names mode: (pod, candidates) of each body
    if mode == "nodelist":
        cluster = build_cluster(n, options.seed, edit)
        snapshot.write_bytes(encode(cluster))
        node_objects = [item for item in cluster["items"] if item["kind"] == "Node"]
        bodies = [encode(filter_body_nodes(pod, node_objects)) for pod in pods]
        del cluster, node_objects
    else:
        names = write_cluster(snapshot, n, options.seed, edit)
        orders = reordered(names, options.reorder, options.seed)
        asked = [(pod, order) for order in orders for pod in pods]
        bodies = [encode(filter_body_names(pod, order)) for pod, order in asked]
    size_mib, body_kib = snapshot.stat().st_size / 2**20, len(bodies[0]) / 1024
    print(f"[{label} {n}] snapshot {size_mib:.0f} MiB, body {body_kib:.0f} KiB, took {time.monotonic() - began:.1f}s")
    target = target_ms(mode, n, options.queues)
    cases: list[Case] = [
        ("filter", bodies, check_filter, target),
        ("prioritize", bodies, lambda b: check_prioritize(b, n), target),
        ("healthz", [b""], lambda b: b'"ok"' in b, None),
    ]
    rows = []
    with server(snapshot, workdir / f"server-{label}-{n}.log", options.ready_timeout, config) as (proc, port, ready_s):
        print(f"[{label} {n}] server pid {proc.pid} ready in {ready_s:.1f}s", flush=True)
        client = CLIENTS[options.client](port)
        try:
            if options.feasible and asked:
                cases[1] = ("prioritize", prioritize_after_filter(client, asked), *cases[1][2:])
            for verb, verb_bodies, check, budget in cases:
                measure(client, f"/{verb}", verb_bodies, options.warmup, check)
                samples, handler, reads, processing, errors = measure(
                    client, f"/{verb}", verb_bodies, options.requests, check
                )
                p50, p99, top = percentile(samples, 50), percentile(samples, 99), samples[-1] / 1e6
                srv50, srv99 = (percentile(handler, q) if handler else math.nan for q in (50, 99))
                timing = (
                    p50,
                    p99,
                    top,
                    srv50,
                    srv99,
                    percentile(reads, 50) if reads else math.nan,
                    percentile(processing, 99) if processing else math.nan,
                )
                row = Row(mode, options.queues, n, verb, len(samples), *timing, errors, 0, 0, budget)
                rows.append(row)
            answers = extender_answers(client, cases[:2]) if options.floor else {}
        finally:
            client.close()
        rss, hwm = memory_mib(proc.pid)
        for row in rows:
            row.rss_mib, row.hwm_mib = rss, hwm
    if options.floor:
        rows.extend(measure_floor(answers, cases[:2], mode, n, options, workdir / f"answers-{label}-{n}.msgpack"))
    snapshot.unlink()
    if config is not None:
        config.unlink()
    return rows


# --------------------------------------------------------------------------- the floor


def extender_answers(client: Client, cases: list[Case]) -> dict[str, bytes]:
    """The extender's answer to each verb's bodies, for the floor server to send back."""
    return {
        answer_key(f"/{verb}", len(body)): client.request("POST", f"/{verb}", body)[1]
        for verb, bodies, _, _ in cases
        for body in bodies
    }


@contextlib.contextmanager
def floor_server(answers_file: Path, ready_timeout: float) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """``bench.latency_floor`` in its own process (as the extender is), until the block ends."""
    port = free_port()
    command = [sys.executable, "-m", "bench.latency_floor", "--answers", str(answers_file), "--port", str(port)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline()  # "ready", or b"" when it exited
        if ready.strip() != b"ready":
            proc.wait(timeout=ready_timeout)
            raise RuntimeError(f"the floor server exited with {proc.returncode} before it was ready")
        yield proc, port
    finally:
        stop_process(proc)


def measure_floor(
    answers: dict[str, bytes], cases: list[Case], mode: str, n: int, options: Options, path: Path
) -> list[Row]:
    """The verbs again, same bodies and client, against a server that only sends the extender's answers."""
    path.write_bytes(msgspec.msgpack.encode(answers))
    rows = []
    with floor_server(path, options.ready_timeout) as (proc, port):
        client = CLIENTS[options.client](port)
        try:
            for verb, bodies, check, _ in cases:
                measure(client, f"/{verb}", bodies, options.warmup, check)
                samples, _, _, _, errors = measure(client, f"/{verb}", bodies, options.requests, check)
                p50, p99, top = percentile(samples, 50), percentile(samples, 99), samples[-1] / 1e6
                nan = math.nan  # no Server-Timing: the floor measures nothing
                rows.append(
                    Row(
                        f"{mode}-floor",
                        options.queues,
                        n,
                        verb,
                        len(samples),
                        p50,
                        p99,
                        top,
                        nan,
                        nan,
                        nan,
                        nan,
                        errors,
                        0,
                        0,
                        None,
                    )
                )
        finally:
            client.close()
        rss, hwm = memory_mib(proc.pid)
    for row in rows:
        row.rss_mib, row.hwm_mib = rss, hwm
    path.unlink()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.latency", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="500,5000,15000", help="cache-mode cluster sizes (comma separated)")
    parser.add_argument("--nodelist", default="1000", help="NodeList-mode sizes; empty to skip")
    parser.add_argument("--requests", type=int, default=300, help="timed requests per verb")
    parser.add_argument("--warmup", type=int, default=20, help="untimed requests per verb first")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--ready-timeout", type=float, default=120.0)
    parser.add_argument("--client", choices=sorted(CLIENTS), default="httpx")
    parser.add_argument(
        "--queues", action="store_true", help="50 ClusterQueues in 5 cohorts, 4 flavors, FlavorFairness; pods queued"
    )
    parser.add_argument(
        "--shipped",
        action="store_true",
        help="serve with deploy/extender-config.yaml's configuration (filterReturns: BestScored, filterFailures: "
        "WhenUnschedulable) instead of the defaults",
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also time the verbs against bench.latency_floor, a server that only sends back the extender's "
        "answers: what the protocol and the client cost at these sizes",
    )
    parser.add_argument(
        "--reorder",
        type=int,
        default=1,
        help="cache mode: send the candidate names in N orders (the first as generated, the others shuffled), "
        "as kube-scheduler lists them anew for each pod; 1 repeats one list",
    )
    parser.add_argument(
        "--feasible",
        action="store_true",
        help="cache mode: ask /prioritize about the nodes /filter passed, as kube-scheduler does (with --shipped, "
        "filterReturns: Feasible, so that more than one passes); without it, about every node",
    )
    parser.add_argument("--json", help="also write the rows and the machine to this file")
    args = parser.parse_args(argv)
    stop_children_on_sigterm()  # stopped by its PID, it still stops the extender it started
    if args.queues and args.shipped:
        parser.error("--queues and --shipped are separate configurations: choose one")
    if args.reorder < 1:
        parser.error("--reorder: at least 1")
    if args.feasible and args.queues:
        parser.error("--feasible applies to the defaults and --shipped, not --queues")
    options = Options(**{f.name: getattr(args, f.name) for f in fields(Options)})
    plan = [("names", int(s)) for s in args.sizes.split(",") if s.strip()]
    plan += [("nodelist", int(s)) for s in args.nodelist.split(",") if s.strip()]
    load1 = os.getloadavg()[0]
    if load1 > 0.5:
        print(f"warning: load average {load1:.2f} before starting: other processes share the CPUs, expect noise")
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="kge-bench-") as tmp:
        for mode, n in plan:
            rows.extend(run_case(mode, n, options, Path(tmp)))
    configuration = "shipped (deploy/)" if args.shipped else "queues" if args.queues else "defaults"
    if args.feasible:
        configuration += (
            ", filterReturns: Feasible" if args.shipped else ""
        ) + ", /prioritize asked about the nodes /filter passed"
    if args.reorder > 1:
        configuration += f", candidate names in {args.reorder} orders"
    machine = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpus": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "client": args.client,
        "load1_at_start": round(load1, 2),
        "configuration": configuration,
    }
    print(
        f"\n{machine['date']}, {machine['cpus']} cores, Python {machine['python']}, {machine['platform']}, "
        f"client {args.client}, load average at start {load1:.2f}, configuration {configuration}"
    )
    print(table(rows))
    if args.json:
        data = {"machine": machine, "rows": [asdict(r) | {"verdict": r.verdict} for r in rows]}
        Path(args.json).write_text(json.dumps(data, indent=2) + "\n")
    return 0 if all(r.verdict != "MISS" for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
