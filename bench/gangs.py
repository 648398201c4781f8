"""What planning a gang costs: ``/filter`` of a group's first member (the whole group is planned and its
room held) and of a later member (its planned node), in process, on a synthetic cluster.

    python -m bench.gangs [--nodes 5000] [--sizes 8,32,128] [--rounds 30] [--topology none,preferred]

5,000 nodes of 8 GPUs in racks of 16 and blocks of 256 (node labels ``example.com/rack`` and
``example.com/block``), a seeded half of their GPUs in use (0, 4 or 8 a node); members ask for 4 GPUs
each; every node is a candidate (kube-scheduler's nodeCacheCapable NodeNames). Each round creates a
group, filters its first member, then another member, then deletes the group's pods (which releases
its holds). Run by hand; figures in docs/concepts/gangs.md.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from typing import Any

from app.cluster.cache import ClusterCache
from app.cluster.objects import node_from_obj, pod_from_obj
from app.cluster.podgroups import podgroup_from_obj
from app.cluster.snapshot import SOURCES, SnapshotBinder
from app.config import parse_config
from app.service import ExtenderService

RACK = "example.com/rack"
BLOCK = "example.com/block"
GPU = "nvidia.com/gpu"


def _node(index: int) -> dict[str, Any]:
    return {
        "kind": "Node",
        "metadata": {
            "name": f"n{index:05d}",
            "labels": {RACK: f"r{index // 16:04d}", BLOCK: f"b{index // 256:03d}"},
        },
        "status": {"allocatable": {"cpu": "96", "memory": "1024Gi", "pods": "110", GPU: "8"}},
    }


def _pod(name: str, gpus: int, *, node: str = "", group: str = "", uid: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "resources": {"requests": {"cpu": "8", "memory": "64Gi", GPU: str(gpus)}}}]
    }
    if node:
        spec["nodeName"] = node
    if group:
        spec["schedulingGroup"] = {"podGroupName": group}
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "bench", "uid": uid or name},
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


def build(nodes: int, topology_levels: list[str], seed: int = 1) -> tuple[ExtenderService, list[str]]:
    rng = random.Random(seed)
    config = parse_config({"gangs": {"topologyLevels": topology_levels}})
    cache = ClusterCache(assume_ttl=config.cache.assumeTTLSeconds)
    node_objs = [_node(i) for i in range(nodes)]
    cache.replace_nodes(node_from_obj(n) for n in node_objs)
    running = []
    for index, obj in enumerate(node_objs):
        used = rng.choice((0, 4, 8))
        if used:
            running.append(_pod(f"busy-{index}", used, node=obj["metadata"]["name"]))
    cache.replace_pods(pod_from_obj(p) for p in running)
    for source in SOURCES:
        cache.source(source).synced = True
    service = ExtenderService(config, cache, SnapshotBinder(cache))
    return service, [n["metadata"]["name"] for n in node_objs]


def _body(pod: dict[str, Any], names: list[str]) -> bytes:
    return json.dumps({"Pod": pod, "Nodes": None, "NodeNames": names}).encode()


def run(service: ExtenderService, names: list[str], size: int, topology: str, rounds: int) -> dict[str, Any]:
    first_ms: list[float] = []
    later_ms: list[float] = []
    planned = 0
    for round_ in range(rounds):
        group = f"g{size}-{topology}-{round_}"
        obj: dict[str, Any] = {
            "apiVersion": "scheduling.k8s.io/v1alpha2",
            "kind": "PodGroup",
            "metadata": {"name": group, "namespace": "bench"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": size}}},
        }
        members = [_pod(f"{group}-{i}", 4, group=group) for i in range(size)]
        if topology == "preferred":
            for pod in members:
                pod["metadata"]["annotations"] = {"kueue.x-k8s.io/podset-preferred-topology": RACK}
        service.cache.groups.upsert(podgroup_from_obj(obj))
        for pod in members:
            service.cache.upsert_pod(pod_from_obj(pod))
        bodies = [_body(members[0], names), _body(members[-1], names)]
        started = time.perf_counter()
        answer = service.filter(bodies[0])
        first_ms.append((time.perf_counter() - started) * 1000)
        planned += bool(answer["NodeNames"])
        started = time.perf_counter()
        service.filter(bodies[1])
        later_ms.append((time.perf_counter() - started) * 1000)
        for pod in members:
            service.cache.delete_pod(pod["metadata"]["uid"])
        service.cache.groups.delete(f"podgroup:bench/{group}")
    return {
        "size": size,
        "topology": topology,
        "planned": f"{planned}/{rounds}",
        "first p50 ms": round(statistics.median(first_ms), 2),
        "first p99 ms": round(_p99(first_ms), 2),
        "later p50 ms": round(statistics.median(later_ms), 2),
        "later p99 ms": round(_p99(later_ms), 2),
    }


def _p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--sizes", default="8,32,128")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--topology", default="none,preferred", help="none, preferred (a rack, then a block)")
    args = parser.parse_args(argv)
    service, names = build(args.nodes, [BLOCK, RACK])
    print(f"{args.nodes} nodes, every one a candidate; members ask for 4 GPUs; {args.rounds} rounds")
    for topology in args.topology.split(","):
        for size in (int(s) for s in args.sizes.split(",")):
            print(json.dumps(run(service, names, size, topology, args.rounds)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
