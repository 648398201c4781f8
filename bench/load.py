"""Load in cluster mode: the locust scenario against an extender that watches a fake API server.

Everything on loopback, bounded in time. This process:

1. builds a synthetic cluster (``bench.cluster``: nodes and their bound pods) and a pool of pending
   pods, and serves them from the fake API server of the tests (``tests.fakeapi``) on 127.0.0.1;
2. starts ``kube-gpu-extender serve --kubeconfig`` against it and waits for ``/readyz`` (the initial
   list of every node and pod through the real client);
3. runs ``locust -f bench/locustfile.py`` headless: several users each doing filter -> prioritize
   -> bind on the pool's pods (each bind is a real Binding in the fake API server, confirmed back
   to the extender by its watch);
4. meanwhile churns pods through the API server: small pods created on random nodes and deleted
   again, and the pods the extender bound deleted (they finish) beyond the newest ``--keep-bound``,
   all arriving through the watch;
5. reports locust's p50/p99 per verb and errors, the extender's view of its watches and ledger,
   and audits the API server's final state (no node over its allocatable ``nvidia.com/gpu``).

    .venv/bin/python -m bench.load [--nodes 5000] [--users 4] [--run-time 60] [--churn 20]

Needs locust (the ``bench`` extra). The extender and locust are stopped by PID when done.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench.cluster import iter_cluster
from bench.latency import stop_process
from bench.request_bodies import PENDING_KINDS, pending_pod
from tests.e2e.process import stop_children_on_sigterm
from tests.fakeapi import FakeAPIServer

__all__ = ["main"]

REPO = Path(__file__).resolve().parent.parent
GPU = "nvidia.com/gpu"
KIND_WEIGHTS = {"gpu-1": 50, "gpu-2": 25, "gpu-8": 5, "cpu": 20}  # as in the locustfile


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def kubeconfig(url: str, path: Path) -> None:
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": url}}],
                "users": [{"name": "fake", "user": {"token": "bench"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
                "current-context": "fake",
            }
        )
    )


def populate(fake: FakeAPIServer, nodes: int, pending: int, seed: int) -> tuple[list[str], list[dict[str, Any]]]:
    """Nodes and their bound pods, plus ``pending`` pending pods (returned, for the locust users)."""
    names = []
    for node, pods in iter_cluster(nodes, seed):
        fake.add(node)
        names.append(node["metadata"]["name"])
        for pod in pods:
            try:
                fake.add({**pod, "kind": "Pod"})
            except ValueError:  # the generator's random 5-letter suffixes collide now and then at 5,000 nodes
                meta = {**pod["metadata"], "name": f"{pod['metadata']['name']}-{len(names)}"}
                fake.add({**pod, "kind": "Pod", "metadata": meta})
    rng = random.Random(seed)
    pool = []
    for i in range(pending):
        kind = rng.choices(list(KIND_WEIGHTS), weights=list(KIND_WEIGHTS.values()))[0]
        assert kind in PENDING_KINDS
        pod = pending_pod(kind, name=f"load-{kind}-{i}")
        del pod["metadata"]["uid"], pod["metadata"]["resourceVersion"]  # the API server assigns them
        pool.append(fake.add({**pod, "kind": "Pod"}))
    return names, pool


class Churn(threading.Thread):
    """Pod churn through the API server at ``rate`` changes per second until stopped."""

    def __init__(self, fake: FakeAPIServer, nodes: list[str], rate: float, keep_bound: int, seed: int) -> None:
        super().__init__(name="churn", daemon=True)
        self.fake, self.nodes, self.rate, self.keep_bound = fake, nodes, rate, keep_bound
        self.rng = random.Random(seed)
        self.stopping = threading.Event()
        self.created = self.deleted = self.finished = 0

    def run(self) -> None:
        live: list[str] = []
        while not self.stopping.wait(1.0 / self.rate):
            if len(live) < 200 or self.rng.random() < 0.5:
                name = f"churn-{self.created}"
                container = {"name": "c", "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}
                spec = {"nodeName": self.rng.choice(self.nodes), "containers": [container]}
                meta = {"name": name, "namespace": "churn"}
                self.fake.add({"kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": "Running"}})
                live.append(name)
                self.created += 1
            else:
                self.fake.delete("Pod", live.pop(self.rng.randrange(len(live))), "churn")
                self.deleted += 1
            # Pods the extender bound finish, oldest first, beyond the newest ``keep_bound``: their GPUs
            # are free again (through the watch), so the run measures scheduling, not a full cluster.
            bindings = self.fake.bindings
            while len(bindings) - self.finished > self.keep_bound:
                meta = bindings[self.finished]["metadata"]
                with contextlib.suppress(KeyError):
                    self.fake.delete("Pod", meta["name"], meta["namespace"])
                self.finished += 1


def audit(fake: FakeAPIServer) -> list[str]:
    """Nodes whose bound, non-terminal pods request more GPUs than the node's allocatable."""
    with fake._lock:
        objects = list(fake._objects.values())
    allocatable = {
        o["metadata"]["name"]: int(o["status"]["allocatable"].get(GPU, 0)) for o in objects if o["kind"] == "Node"
    }
    used: dict[str, int] = {}
    for o in objects:
        node = (o.get("spec") or {}).get("nodeName")
        if o["kind"] != "Pod" or not node or o.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            continue
        for c in o["spec"]["containers"]:
            used[node] = used.get(node, 0) + int(c.get("resources", {}).get("requests", {}).get(GPU, 0))
    return [f"{n}: {u} > {allocatable.get(n, 0)}" for n, u in used.items() if u > allocatable.get(n, 0)]


def main() -> int:
    """0 when every request succeeded, some pod was bound and no node is over-committed; else 1."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--users", type=int, default=4)
    parser.add_argument("--run-time", type=int, default=60, help="seconds of locust load")
    parser.add_argument("--churn", type=float, default=20.0, help="pod changes per second through the watch")
    parser.add_argument("--pending", type=int, default=15000, help="pending pods created for the users")
    parser.add_argument("--keep-bound", type=int, default=2000, help="bound pods kept; older ones finish")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    stop_children_on_sigterm()  # stopped by its PID, it still stops the extender it started
    work = Path(tempfile.mkdtemp(prefix="kge-load-"))
    exe = Path(sys.executable).parent

    with FakeAPIServer() as fake:
        started = time.monotonic()
        names, pool = populate(fake, args.nodes, args.pending, args.seed)
        (work / "pods.json").write_text(json.dumps(pool))
        kubeconfig(fake.url, work / "kubeconfig")
        print(
            f"fake API server {fake.url}: {len(names)} nodes, {len(fake._objects) - len(names)} pods "
            f"({time.monotonic() - started:.0f}s)",
            flush=True,
        )

        port = free_port()
        serve = [sys.executable, "-m", "app.cli", "serve", "--kubeconfig", str(work / "kubeconfig")]  # this tree
        serve += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
        with open(work / "extender.log", "wb") as log:
            env = {**os.environ, "PYTHONPATH": str(REPO)}
            extender = subprocess.Popen(serve, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        host = f"http://127.0.0.1:{port}"
        churn = Churn(fake, names, args.churn, args.keep_bound, args.seed)
        try:
            started = time.monotonic()
            while True:
                if extender.poll() is not None:
                    raise RuntimeError(f"extender exited: {(work / 'extender.log').read_text()[-2000:]}")
                with contextlib.suppress(httpx.TransportError):
                    if httpx.get(f"{host}/readyz", timeout=2).status_code == 200:
                        break
                if time.monotonic() - started > 300:
                    raise TimeoutError("extender not ready after 300 s")
                time.sleep(0.2)
            print(
                f"extender ready after {time.monotonic() - started:.1f}s (initial list through the watch)", flush=True
            )

            churn.start()
            locust = [str(exe / "locust"), "-f", str(REPO / "bench" / "locustfile.py"), "--headless"]
            locust += ["-u", str(args.users), "-r", str(args.users), "--run-time", f"{args.run_time}s"]
            locust += ["--host", host, "--only-summary", "--csv", str(work / "locust"), "--stop-timeout", "10"]
            env = {**os.environ, "KGE_PODS_FILE": str(work / "pods.json")}  # node names: from /debug
            started = time.monotonic()
            with open(work / "locust.log", "wb") as log:
                code = subprocess.run(locust, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
            ran = time.monotonic() - started
            churn.stopping.set()
            churn.join()
            # Let the watch confirm the last binds, then read the extender's view.
            deadline = time.monotonic() + 10
            while True:
                debug = httpx.get(f"{host}/debug", params={"nodes": "false", "decisions": "0"}, timeout=30).json()
                if not debug["assumeLedger"] or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
        finally:
            churn.stopping.set()
            stop_process(extender)

        print(f"locust ran {ran:.0f}s, exit code {code} (1 means some requests failed); logs in {work}")
        # locust's final summary (its CSV files are written periodically and can miss the last seconds).
        summary = (work / "locust.log").read_text().split("Shutting down", 1)[-1].splitlines()[1:]
        print("\n".join(line.replace("POST     ", "").rstrip() for line in summary if line.strip()))
        failures = work / "locust_failures.csv"
        for row in csv.DictReader(failures.open()) if failures.exists() else ():
            print(f"  failure x{row['Occurrences']}: {row['Name']}: {row['Error'][:160]}")
        print(f"churn: {churn.created} pods created, {churn.deleted} deleted, {churn.finished} bound pods finished")
        print(f"bindings in the API server: {len(fake.bindings)}")
        for name, source in debug["cache"]["sources"].items():
            print(
                f"  watch {name}: connected={source['connected']} restarts={source['restarts']} "
                f"relists={source['relists']} lastError={source['lastError']!r}"
            )
        print(f"assume ledger after the run: {len(debug['assumeLedger'])}; cache counts: {debug['cache']['counts']}")
        problems = audit(fake)
        print(f"over-committed nodes in the API server: {len(problems)} {problems[:5]}")
        failed = [
            *(["locust reported failed requests"] if code else []),
            *(["no pod was bound"] if not fake.bindings else []),
            *(["nodes over-committed"] if problems else []),
        ]
        if failed:
            print(f"FAILED: {'; '.join(failed)}")
        return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
