"""Over-commit check: many interleaved filter/bind cycles against few nodes, then a from-scratch audit.

Concurrent "schedulers" (asyncio tasks) each take a random pod (1-4 GPUs, or a ResourceClaim for one
DRA device), filter it over every node, yield, and bind it — mostly to a node that passed, sometimes
to any node (a stale decision the bind must re-check). Binds and claim writes yield inside, so other
cycles run between the assumption and the API write, and a churn task deletes bound pods (and their
claims) meanwhile. At the end the audit recomputes, from the cache's pods and claims alone, what each
node and each device holds: never more ``nvidia.com/gpu`` than allocatable, never one device in two
claims, every allocated device on its pod's node, and never more GPUs in the ClusterQueue ``team``
(a third of the GPU pods carry its queue label) than its nominal quota.

    .venv/bin/python -m bench.overcommit [--calls 10000] [--seed 1] [--concurrency 64]

tests/app/test_overcommit.py runs the same scenario at a small size.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from allocator import AllocationResult, ResourceClaim, allocated_device_ids
from app.cluster.cache import ClusterCache
from app.cluster.objects import claim_from_obj, device_class_from_obj, node_from_obj, slice_from_obj
from app.cluster.snapshot import SOURCES, SnapshotBinder, SnapshotClaimWriter
from app.config import parse_config
from app.operator.metrics import Metrics
from app.pipeline.claims import DraClaims
from app.service import ExtenderService
from scoring.framework import PodInfo

__all__ = ["Outcome", "audit", "build_service", "cluster_objects", "interleave"]

GPU = "nvidia.com/gpu"
DRIVER = "gpu.example.com"
GPU_NODES, GPUS_PER_NODE = 3, 8
DRA_NODES, DEVICES_PER_NODE = 2, 4
QUEUE_LABEL, QUEUE_GPUS = "kueue.x-k8s.io/queue-name", 6
# One ClusterQueue without a cohort: its pods may hold at most QUEUE_GPUS GPUs in all.
CONFIG: dict[str, Any] = {
    "dra": {"enabled": True},
    "queues": {
        "resourceFlavors": [{"metadata": {"name": "default"}}],
        "clusterQueues": [
            {
                "metadata": {"name": "team"},
                "spec": {
                    "resourceGroups": [
                        {
                            "coveredResources": [GPU],
                            "flavors": [{"name": "default", "resources": [{"name": GPU, "nominalQuota": QUEUE_GPUS}]}],
                        }
                    ]
                },
            }
        ],
        "localQueues": [{"metadata": {"name": "lq", "namespace": "default"}, "spec": {"clusterQueue": "team"}}],
    },
}


def cluster_objects() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(nodes, DRA objects): 3 nodes with 8 GPUs, 2 nodes publishing 4 DRA devices each."""
    nodes = [_node(f"g{i}", GPUS_PER_NODE) for i in range(GPU_NODES)]
    nodes += [_node(f"d{i}", None) for i in range(DRA_NODES)]
    dra: list[dict[str, Any]] = [
        {
            "kind": "DeviceClass",
            "metadata": {"name": DRIVER},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        }
    ]
    for i in range(DRA_NODES):
        devices = [{"name": f"gpu-{j}", "attributes": {"model": {"string": "H100"}}} for j in range(DEVICES_PER_NODE)]
        spec = {
            "driver": DRIVER,
            "nodeName": f"d{i}",
            "pool": {"name": f"d{i}", "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        }
        dra.append({"kind": "ResourceSlice", "metadata": {"name": f"d{i}-gpus"}, "spec": spec})
    return nodes, dra


def _node(name: str, gpus: int | None) -> dict[str, Any]:
    allocatable = {"cpu": "64", "memory": "512Gi", "pods": "1000"}
    if gpus is not None:
        allocatable[GPU] = str(gpus)
    return {"kind": "Node", "metadata": {"name": name}, "status": {"allocatable": allocatable}}


def build_service(nodes: list[dict[str, Any]], dra: list[dict[str, Any]]) -> ExtenderService:
    """A snapshot-mode service with DRA on (what tests.conftest.make_service builds, without pytest)."""
    config = parse_config(CONFIG)
    cache = ClusterCache(assume_ttl=config.cache.assumeTTLSeconds)
    cache.replace_nodes(node_from_obj(n) for n in nodes)
    cache.dra.replace_classes(device_class_from_obj(o) for o in dra if o["kind"] == "DeviceClass")
    cache.dra.replace_slices(slice_from_obj(o) for o in dra if o["kind"] == "ResourceSlice")
    for source in SOURCES:
        cache.source(source).synced = True
    return ExtenderService(config, cache, SnapshotBinder(cache), Metrics(), claim_writer=SnapshotClaimWriter(cache.dra))


class _Yielding:
    """Wraps the binder and the claim writer: every API write yields first, as a real round trip does."""

    def __init__(self, inner: Any, rng: random.Random) -> None:
        self.inner, self.rng = inner, rng

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        method = getattr(self.inner, name)

        async def call(*args: Any) -> Any:
            for _ in range(self.rng.randint(0, 3)):
                await asyncio.sleep(0)
            return await method(*args)

        return call


@dataclass
class Outcome:
    calls: int = 0
    results: Counter[str] = field(default_factory=Counter)
    deleted: int = 0
    seconds: float = 0.0
    # Violations seen right after a bind (the end state alone can hide one that churn later removed).
    violations: list[str] = field(default_factory=list)


def _pod(rng: random.Random, index: int, claim: str | None) -> dict[str, Any]:
    requests = {"cpu": "100m", "memory": "128Mi"}
    if claim is None:
        requests[GPU] = str(rng.choice((1, 1, 1, 2, 2, 4)))
    spec: dict[str, Any] = {"containers": [{"name": "main", "resources": {"requests": requests}}]}
    if claim is not None:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
        spec["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    uid = str(uuid.UUID(int=rng.getrandbits(128)))
    meta: dict[str, Any] = {"name": f"p{index}", "namespace": "default", "uid": uid}
    if claim is None and rng.random() < 1 / 3:
        meta["labels"] = {QUEUE_LABEL: "lq"}
    return {"kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": "Pending"}}


def _claim(name: str, rng: random.Random) -> ResourceClaim:
    exactly = {"deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": 1}
    return claim_from_obj(
        {
            "kind": "ResourceClaim",
            "metadata": {
                "name": name,
                "namespace": "default",
                "uid": str(uuid.UUID(int=rng.getrandbits(128))),
                "resourceVersion": "1",
            },
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
        }
    )


async def interleave(
    service: ExtenderService, calls: int, seed: int, concurrency: int = 64, *, audit_every_bind: bool = False
) -> Outcome:
    """Run filter+bind cycles until ``calls`` verb calls were made; bound pods are deleted at random."""
    rng = random.Random(seed)
    service.binder = _Yielding(service.binder, rng)  # type: ignore[assignment]
    claims = service.pipeline.get(DraClaims)
    if claims is not None:
        claims.writer = _Yielding(claims.writer, rng)  # type: ignore[assignment]
    cache = service.cache
    names = sorted(cache.nodes)
    outcome = Outcome()
    bound: list[tuple[str, str | None]] = []  # (pod uid, claim key)
    started = time.perf_counter()
    counter = iter(range(10**9))

    async def cycle() -> None:
        index = next(counter)
        claim = None
        if rng.random() < 0.3:
            claim = f"claim-{index}"
            cache.dra.upsert_claim(_claim(claim, rng))  # the claim exists before its pod is scheduled
        pod = _pod(rng, index, claim)
        body = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": names}).encode()
        answer = service.filter(body)
        outcome.calls += 1
        passed = answer.get("NodeNames") or []
        for _ in range(rng.randint(0, 3)):
            await asyncio.sleep(0)
        if not passed and rng.random() < 0.5:
            outcome.results["unschedulable"] += 1
            if claim is not None:
                cache.dra.delete_claim(f"default/{claim}")
            return
        node = rng.choice(passed) if passed and rng.random() < 0.9 else rng.choice(names)
        meta = pod["metadata"]
        bind = {"PodName": meta["name"], "PodNamespace": "default", "PodUID": meta["uid"], "Node": node}
        result = await service.bind(json.dumps(bind).encode())
        outcome.calls += 1
        error = result["Error"]
        if not error:
            outcome.results["bound"] += 1
            bound.append((meta["uid"], f"default/{claim}" if claim else None))
            if audit_every_bind:
                outcome.violations.extend(audit(cache))
        else:
            outcome.results[_kind(error)] += 1

    async def scheduler() -> None:
        while outcome.calls < calls:
            await cycle()
            if bound and rng.random() < 0.4:  # a pod finishes: its GPUs and its claim are free again
                uid, claim = bound.pop(rng.randrange(len(bound)))
                cache.delete_pod(uid)
                if claim is not None:
                    cache.dra.delete_claim(claim)
                outcome.deleted += 1

    await asyncio.gather(*(scheduler() for _ in range(concurrency)))
    outcome.seconds = time.perf_counter() - started
    return outcome


_REFUSALS = {
    "no longer fits": "no longer fits",
    "cannot take the claims": "cannot take the claims",
    "is unknown to the extender": "is unknown to the extender",
    "can no longer use node": "queue quota used up",
}


def _kind(error: str) -> str:
    """An expected refusal by its reason, or the whole message (an unexpected one)."""
    return next((f"bind refused: {label}" for needle, label in _REFUSALS.items() if needle in error), error)


def audit(cache: ClusterCache) -> list[str]:
    """Violations, recomputed from the pods, the ledger and the claims alone (never from the aggregates)."""
    problems: list[str] = []
    gpus: Counter[str] = Counter()
    where: dict[str, str] = {}
    counted: dict[str, PodInfo] = {}
    for pod in cache.pods.values():
        if pod.node_name and not pod.terminal:
            counted[pod.uid] = pod
    for uid, assumption in cache.ledger.items():
        counted.setdefault(uid, assumption.pod)
    queued = 0
    for uid, pod in counted.items():
        where[uid] = pod.node_name
        gpus[pod.node_name] += pod.resources.requests.get(GPU, 0)
        if dict(pod.queue_labels).get(QUEUE_LABEL) == "lq":
            queued += pod.resources.requests.get(GPU, 0)
    if queued > QUEUE_GPUS:
        problems.append(f"ClusterQueue team: {queued} {GPU} in use, nominal quota {QUEUE_GPUS}")
    for name, used in gpus.items():
        node = cache.nodes.get(name)
        allocatable = node.allocatable.get(GPU, 0) if node is not None else 0
        if used > allocatable:
            problems.append(f"node {name}: {used} {GPU} allocated, {allocatable} allocatable")
    holders: dict[Any, list[str]] = {}
    allocations: list[tuple[str, AllocationResult, tuple[str, ...]]] = [
        (claim.key, claim.allocation, tuple(r.uid for r in claim.reserved_for))
        for claim in cache.dra.claims.values()
        if claim.allocation is not None
    ]
    allocations += [
        (f"in flight for {e.pod_uid}", result, (e.pod_uid,))
        for e in cache.dra.inflight.values()
        for result in e.claims.values()
    ]
    for owner, allocation, consumers in allocations:
        for device in allocated_device_ids(allocation):
            holders.setdefault(device, []).append(owner)
            for uid in consumers:
                if uid in where and where[uid] != device.pool:
                    problems.append(f"{owner}: device {device} is not on node {where[uid]} of pod {uid}")
    for device, owners in holders.items():
        # A pod's own in-flight entry and its written claim may name the same device during PreBind.
        if len({o for o in owners if not o.startswith("in flight")}) > 1:
            problems.append(f"device {device} held by {sorted(owners)}")
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--audit-every-bind", action="store_true", help="also audit right after every bind (slower)")
    args = parser.parse_args()
    logging.getLogger("kube_gpu_extender").setLevel(logging.ERROR)  # refused binds are expected here
    service = build_service(*cluster_objects())
    outcome = asyncio.run(
        interleave(service, args.calls, args.seed, args.concurrency, audit_every_bind=args.audit_every_bind)
    )
    problems = outcome.violations + audit(service.cache)
    service.cache.check_invariants()
    print(f"calls={outcome.calls} seconds={outcome.seconds:.2f} ({outcome.calls / outcome.seconds:.0f} calls/s)")
    print(f"deleted={outcome.deleted} still bound={len([p for p in service.cache.pods.values() if p.node_name])}")
    for result, count in outcome.results.most_common():
        print(f"  {result}: {count}")
    print(f"violations={len(problems)}")
    for problem in problems[:20]:
        print(f"  {problem}")
    raise SystemExit(1 if problems else 0)


if __name__ == "__main__":
    main()
