"""The extender's own CPU per pod, stage by stage, on bench.throughput's workload (in-process).

The pods and the cluster of ``bench.throughput`` (1,000 nodes: 700 with 8 GPUs, 300 CPU-only, each
96 CPUs; pods of 500m and 1Gi, 85 % asking for 1 GPU), the shipped configuration (deploy/), and per
pod what the extender does while kube-scheduler schedules it, each stage timed on this thread's CPU
clock (steady while other processes load the machine):

* ``watch: pod added``: the pod's ADDED watch event, as kube-apiserver v1.36.2 sends it
  (``bench/data/watched-pod.json``), decoded and applied to the cache;
* ``filter``: /filter with the candidates kube-scheduler sends (every node with a free GPU for a GPU
  pod, every node for the others, in a different order each time);
* ``prioritize``: when filter returns more than one node (equally scored best nodes), /prioritize
  over them, as kube-scheduler then asks;
* ``bind``: /bind, without the Binding POST (the API write is measured by ``bench.throughput``);
* ``watch: pod bound``: the MODIFIED event that carries the pod's ``nodeName``, applied ``BIND_LAG``
  pods later (when the Binding POST has gone through, as in ``bench.throughput``).

Not in it: the HTTP transport, the Binding POST and the watch stream's TLS, which need a real API
server: ``bench.throughput`` reports the extender process's whole CPU per pod beside this.

    python -m bench.pod_budget --pods 2000 [--profile 25]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import cProfile
import io
import json
import pstats
import random
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

import yaml

from app.cluster.kube import _event
from app.cluster.reflector import Reflector, pod_resource
from app.config import load_config
from app.gctuning import freeze_and_tune
from app.runtime import build_snapshot_runtime
from bench.plane import GPU
from tests.e2e.controlplane import extender_config

STAGES = ("watch: pod added", "filter", "prioritize", "bind", "watch: pod bound")
# The MODIFIED event that shows a pod bound comes back once the Binding POST is through: in
# bench.throughput /bind takes about 40 ms at about 90 pods/s, so the event lands some pods later.
BIND_LAG = 4
WATCHED_POD = json.loads((Path(__file__).parent / "data" / "watched-pod.json").read_text())


def node(name: str, gpus: int) -> dict[str, Any]:
    """A node as ``bench.plane.add_nodes`` makes it."""
    allocatable = {"cpu": "96", "memory": "768Gi", "pods": "110", **({GPU: str(gpus)} if gpus else {})}
    status = {"capacity": allocatable, "allocatable": allocatable, "conditions": [{"type": "Ready", "status": "True"}]}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "resourceVersion": "1"},
        "spec": {},
        "status": status,
    }


def watch_event(line: bytes) -> dict[str, Any]:
    """The watch event on ``line``, as the extender's watch decodes it."""
    event = _event(line)
    assert event is not None, line
    return event


def watched_pod(index: int, gpus: int, version: int, node_name: str = "") -> dict[str, Any]:
    """The captured pod as another bench pod: its name, UID, resourceVersion, GPUs and node."""
    pod: dict[str, Any] = copy.deepcopy(WATCHED_POD)
    metadata = pod["metadata"]
    metadata.update(name=f"p-{index:05d}", uid=f"00000000-0000-0000-0000-{index:012d}", resourceVersion=str(version))
    resources = pod["spec"]["containers"][0]["resources"]
    for section in ("limits", "requests"):
        if gpus:
            resources[section][GPU] = str(gpus)
        else:
            resources[section].pop(GPU, None)
    if node_name:
        pod["spec"]["nodeName"] = node_name
        scheduled = {"type": "PodScheduled", "status": "True", "lastProbeTime": None}
        pod["status"]["conditions"] = [{**scheduled, "lastTransitionTime": metadata["creationTimestamp"]}]
    return pod


def _line(kind: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": kind, "object": obj}, separators=(",", ":")).encode()


def _filter_body(pod: dict[str, Any], names: list[str]) -> bytes:
    sent = {**pod, "metadata": {k: v for k, v in pod["metadata"].items() if k != "managedFields"}}
    return json.dumps({"Pod": sent, "Nodes": None, "NodeNames": names}, separators=(",", ":")).encode()


def run(pods: int, seed: int, profile: cProfile.Profile | None) -> tuple[dict[str, float], int]:
    """Per stage, CPU microseconds per pod; and how many pods needed /prioritize."""
    names = [f"gpu-{i:04d}" for i in range(700)] + [f"cpu-{i:04d}" for i in range(300)]
    with tempfile.TemporaryDirectory(prefix="kge-pod-budget-") as tmp:
        cluster, config = Path(tmp) / "cluster.json", Path(tmp) / "config.yaml"
        items = [node(name, 8 if name.startswith("gpu") else 0) for name in names]
        cluster.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
        config.write_text(yaml.safe_dump(extender_config()))
        runtime = build_snapshot_runtime(load_config(config), str(cluster))
    service = runtime.service

    class NoPost:  # the Binding POST is the API server's side of bench.throughput
        async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
            return None

    service.binder = NoPost()
    watch = Reflector(None, service.cache, pod_resource, service.metrics)  # type: ignore[arg-type]  # never lists
    rng = random.Random(seed)
    kinds = [1 if rng.random() < 0.85 else 0 for _ in range(pods)]
    free = {name: 8 for name in names if name.startswith("gpu")}
    spent = dict.fromkeys(STAGES, 0)
    prioritized = 0
    freeze_and_tune()
    clock = time.thread_time_ns
    bound: deque[bytes] = deque()  # MODIFIED events on their way back from the API server

    async def one(index: int, gpus: int) -> None:
        nonlocal prioritized
        pod = watched_pod(index, gpus, 1000 + 2 * index)
        added = _line("ADDED", pod)
        candidates = [name for name in names if not gpus or free.get(name, 0) >= gpus]
        rng.shuffle(candidates)  # kube-scheduler's parallel filter fills its list in no fixed order
        body = _filter_body(pod, candidates)
        if profile:
            profile.enable()
        t0 = clock()
        watch._apply(watch_event(added))
        t1 = clock()
        chosen = service.filter(body)["NodeNames"]
        t2 = clock()
        if profile:
            profile.disable()  # the bodies kube-scheduler sends are not the extender's work
        again = _filter_body(pod, chosen) if len(chosen) > 1 else b""
        target = chosen[0]
        bind = {"PodName": pod["metadata"]["name"], "PodNamespace": "bench", "PodUID": pod["metadata"]["uid"]}
        bind_body = json.dumps({**bind, "Node": target}).encode()
        if profile:
            profile.enable()
        t2b = clock()
        if again:
            service.prioritize(again)
            prioritized += 1
        t3 = clock()
        answer = await service.bind(bind_body)
        t4 = clock()
        if profile:
            profile.disable()  # building the next event is the bench's work, not the extender's
        bound.append(_line("MODIFIED", watched_pod(index, gpus, 1001 + 2 * index, target)))
        assert answer == {"Error": ""}, answer
        if gpus:
            free[target] -= gpus
        for stage, ns in zip(STAGES[:4], (t1 - t0, t2 - t1, t3 - t2b, t4 - t3), strict=True):
            spent[stage] += ns
        if len(bound) > BIND_LAG:
            confirm(bound.popleft())

    def confirm(line: bytes) -> None:
        if profile:
            profile.enable()
        t5 = clock()
        watch._apply(watch_event(line))
        t6 = clock()
        if profile:
            profile.disable()
        spent["watch: pod bound"] += t6 - t5

    async def all_pods() -> None:
        for index, gpus in enumerate(kinds):
            await one(index, gpus)
        while bound:
            confirm(bound.popleft())

    asyncio.run(all_pods())
    return {stage: ns / pods / 1000 for stage, ns in spent.items()}, prioritized


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pod_budget", description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--profile", type=int, default=0, help="also print this many functions by own time")
    args = parser.parse_args(argv)
    profile = cProfile.Profile() if args.profile else None
    budget, prioritized = run(args.pods, args.seed, profile)
    print(f"{args.pods} pods, {prioritized} needed /prioritize; CPU µs per pod (this thread's clock)")
    print("| stage | µs per pod |\n|---|---|")
    for stage, micros in budget.items():
        print(f"| {stage} | {micros:.0f} |")
    print(f"| total | {sum(budget.values()):.0f} |")
    if profile is not None:
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(args.profile)
        print(out.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
