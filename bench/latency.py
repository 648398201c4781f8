"""Client-side latency of /filter and /prioritize, as kube-scheduler sees it, against a real server.

Why client-side: kube-scheduler waits for the whole round trip (body upload, decode, verdicts,
encode, download), and the service's Prometheus histogram only starts after the body is read and
has coarse buckets. So this starts ``kube-gpu-extender serve`` on a generated snapshot, keeps one
keep-alive connection (kube-scheduler reuses one), sends sequential requests with every node as a
candidate (the worst case: a pod that no in-tree filter narrows down) and takes percentiles of
``perf_counter_ns`` around each call. A ``healthz`` row gives the HTTP + client floor that every
verb pays before the extender does any work.

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
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
import msgspec

from bench.cluster import build_cluster, encode, filter_body_names, filter_body_nodes, pending_pods, write_cluster

REPO = Path(__file__).resolve().parents[1]
HEADERS = {"Content-Type": "application/json", "User-Agent": "Go-http-client/1.1", "Accept-Encoding": "gzip"}
NODELIST_TARGET_MS_PER_1000 = 25.0


@dataclass
class Row:
    mode: str
    nodes: int
    verb: str
    count: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    errors: int
    rss_mib: float
    hwm_mib: float
    target_ms: float | None

    @property
    def verdict(self) -> str:
        if self.target_ms is None:
            return "-"
        return "PASS" if self.p99_ms <= self.target_ms and self.errors == 0 else "MISS"


def target_ms(mode: str, nodes: int) -> float:
    """p99 budgets: 1 ms per 1,000 names (at least 1 ms) in cache mode, 25 ms per 1,000 full Nodes."""
    if mode == "nodelist":
        return NODELIST_TARGET_MS_PER_1000 * nodes / 1000
    return max(1.0, nodes / 1000)


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


def _command(snapshot: Path, port: int) -> list[str]:
    exe = Path(sys.executable).parent / "kube-gpu-extender"
    head = [str(exe)] if exe.exists() else [sys.executable, "-m", "app.cli"]
    return [*head, "serve", "--snapshot", str(snapshot), "--host", "127.0.0.1", "--port", str(port)]


@contextlib.contextmanager
def server(snapshot: Path, log: Path, ready_timeout: float) -> Iterator[tuple[subprocess.Popen[bytes], str, float]]:
    """Run the extender until the block ends (also on errors): SIGTERM, then SIGKILL after 15 s."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen(_command(snapshot, port), cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = started + ready_timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}: {log.read_text()[-2000:]}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{base}/readyz", timeout=1.0).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise TimeoutError(f"server not ready after {ready_timeout:.0f}s: {log.read_text()[-2000:]}")
            time.sleep(0.1)
        yield proc, base, time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def check_filter(body: bytes) -> bool:
    """``Error`` empty and some node passed (every pending pod fits somewhere in the generated cluster)."""
    result = msgspec.json.decode(body)
    if not isinstance(result, dict) or result.get("Error") != "":
        return False
    names, node_list = result.get("NodeNames"), result.get("Nodes")
    items = node_list.get("items") if isinstance(node_list, dict) else None
    return bool(names) or bool(items)


def check_prioritize(body: bytes, nodes: int) -> bool:
    """One entry per candidate, each an int score in 0..10."""
    result = msgspec.json.decode(body)
    return (
        isinstance(result, list)
        and len(result) == nodes
        and all(type(e.get("Score")) is int and 0 <= e["Score"] <= 10 and e.get("Host") for e in result)
    )


def measure(
    client: httpx.Client, path: str, bodies: list[bytes], count: int, warmup: int, check: Callable[[bytes], bool]
) -> tuple[list[int], int]:
    """Sequential POSTs cycling over ``bodies``; returns sorted latencies (ns) and the error count.

    The client's cyclic GC is off while timing so its pauses are not charged to the server.
    """
    samples: list[int] = []
    errors = 0
    gc.collect()
    gc.disable()
    try:
        for index in range(warmup + count):
            body = bodies[index % len(bodies)]
            started = time.perf_counter_ns()
            response = client.post(path, content=body) if body else client.get(path)
            elapsed = time.perf_counter_ns() - started
            if index < warmup:
                continue
            samples.append(elapsed)
            if response.status_code != 200 or not check(response.content):
                errors += 1
    finally:
        gc.enable()
    return sorted(samples), errors


def run_case(
    mode: str, n: int, requests: int, warmup: int, seed: int, workdir: Path, ready_timeout: float
) -> list[Row]:
    """Generate the cluster, serve it, time each verb; the snapshot file is removed afterwards."""
    snapshot = workdir / f"cluster-{mode}-{n}.json"
    began = time.monotonic()
    pods = pending_pods()
    if mode == "nodelist":
        cluster = build_cluster(n, seed)
        snapshot.write_bytes(encode(cluster))
        node_objects = [item for item in cluster["items"] if item["kind"] == "Node"]
        bodies = [encode(filter_body_nodes(pod, node_objects)) for pod in pods]
        del cluster, node_objects
    else:
        names = write_cluster(snapshot, n, seed)
        bodies = [encode(filter_body_names(pod, names)) for pod in pods]
    print(f"[{mode} {n}] snapshot {snapshot.stat().st_size / 2**20:.0f} MiB, request body "
          f"{len(bodies[0]) / 1024:.0f} KiB, generated in {time.monotonic() - began:.1f}s", flush=True)
    rows = []
    with server(snapshot, workdir / f"server-{mode}-{n}.log", ready_timeout) as (proc, base, ready_s):
        print(f"[{mode} {n}] server pid {proc.pid} ready in {ready_s:.1f}s", flush=True)
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        with httpx.Client(base_url=base, headers=HEADERS, limits=limits, timeout=30.0) as client:
            cases: list[tuple[str, list[bytes], Callable[[bytes], bool], float | None]] = [
                ("filter", bodies, check_filter, target_ms(mode, n)),
                ("prioritize", bodies, lambda b: check_prioritize(b, n), target_ms(mode, n)),
                ("healthz", [b""], lambda b: b'"ok"' in b, None),
            ]
            measured = []
            for verb, verb_bodies, check, target in cases:
                path = f"/{verb}"
                samples, errors = measure(client, path, verb_bodies, requests, warmup, check)
                measured.append((verb, samples, errors, target))
        rss, hwm = memory_mib(proc.pid)
        for verb, samples, errors, target in measured:
            p50, p99, top = percentile(samples, 50), percentile(samples, 99), samples[-1] / 1e6
            rows.append(Row(mode, n, verb, len(samples), p50, p99, top, errors, rss, hwm, target))
    snapshot.unlink()
    return rows


def table(rows: list[Row]) -> str:
    header = ["mode", "nodes", "verb", "n", "p50 ms", "p99 ms", "max ms", "errors", "RSS MiB", "HWM MiB", "target", ""]
    lines = [header]
    for r in rows:
        target = f"p99 <= {r.target_ms:g} ms" if r.target_ms is not None else "(floor)"
        lines.append([
            r.mode, f"{r.nodes:,}", r.verb, str(r.count), f"{r.p50_ms:.2f}", f"{r.p99_ms:.2f}", f"{r.max_ms:.2f}",
            str(r.errors), f"{r.rss_mib:.0f}", f"{r.hwm_mib:.0f}", target, r.verdict,
        ])
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = [" | ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in lines]
    out.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.latency", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="500,5000,15000", help="cache-mode cluster sizes (comma separated)")
    parser.add_argument("--nodelist", default="1000", help="NodeList-mode sizes; empty to skip")
    parser.add_argument("--requests", type=int, default=300, help="timed requests per verb")
    parser.add_argument("--warmup", type=int, default=20, help="untimed requests per verb first")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--ready-timeout", type=float, default=120.0)
    parser.add_argument("--json", help="also write the rows and the machine to this file")
    args = parser.parse_args(argv)
    plan = [("names", int(s)) for s in args.sizes.split(",") if s.strip()]
    plan += [("nodelist", int(s)) for s in args.nodelist.split(",") if s.strip()]
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="kge-bench-") as tmp:
        for mode, n in plan:
            rows.extend(run_case(mode, n, args.requests, args.warmup, args.seed, Path(tmp), args.ready_timeout))
    machine = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpus": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    print(f"\n{machine['date']}, {machine['cpus']} cores, Python {machine['python']}, {machine['platform']}")
    print(table(rows))
    if args.json:
        data = {"machine": machine, "rows": [asdict(r) | {"verdict": r.verdict} for r in rows]}
        Path(args.json).write_text(json.dumps(data, indent=2) + "\n")
    return 0 if all(r.verdict != "MISS" for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
