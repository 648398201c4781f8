"""An extender wired to the fake API server over real HTTP: the real client, reflectors, service and
operator endpoints. Shared by the watch, fault, DRA and standby tests, so each says only what it checks.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from app.cluster.binding import ApiBinder, ApiClaimWriter
from app.cluster.cache import ClusterCache
from app.cluster.kube import KubeClient
from app.cluster.reflector import DRA_RESOURCES, Reflector, node_resource, pod_resource
from app.config import parse_config
from app.http.server import create_app
from app.operator.metrics import Metrics
from app.runtime import readiness
from app.service import ExtenderService
from tests.conftest import claim_obj, device_class_obj, gpu_device, node_obj, slice_obj
from tests.fakeapi import FakeAPIServer

__all__ = [
    "GPU",
    "SOURCES",
    "Harness",
    "add_dra_node",
    "cache_state",
    "eventually",
    "run",
    "server_gpus",
    "server_state",
]

SOURCES = ("nodes", "pods", "deviceclasses", "resourceclaims", "resourceslices")
GPU = "nvidia.com/gpu"
_TERMINAL = ("Succeeded", "Failed")


async def eventually(condition: Callable[[], bool | Awaitable[bool]], what: str, timeout: float = 5.0) -> None:
    """Wait for a condition with a deadline (a condition check, not a sleep standing in for sync).
    The condition may be a coroutine function (e.g. one that asks the extender over HTTP)."""
    deadline = time.monotonic() + timeout
    while not await _holds(condition):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for: {what}")
        await asyncio.sleep(0.01)


async def _holds(condition: Callable[[], bool | Awaitable[bool]]) -> bool:
    value = condition()
    return await value if inspect.isawaitable(value) else value


def add_dra_node(fake: FakeAPIServer, *claims: str, memory: tuple[str, str] = ("40Gi", "40Gi")) -> None:
    """The DRA node ``d1`` (no extended-resource GPUs): the default DeviceClass, a slice of two GPUs
    (``gpu-0``, ``gpu-1``, with the given memory), and pending ``claims`` in namespace default."""
    fake.add(node_obj("d1", gpus=None))
    fake.add(device_class_obj())
    fake.add(slice_obj("d1-gpus", [gpu_device(f"gpu-{i}", size) for i, size in enumerate(memory)], node="d1"))
    for name in claims:
        fake.add(claim_obj(name))


def _objects(fake: FakeAPIServer) -> list[dict[str, Any]]:
    with fake._lock:
        return list(fake._objects.values())


def server_state(fake: FakeAPIServer) -> dict[str, set[tuple[str, ...]]]:
    """What the cache must hold, read from the fake's store (terminal pods leave the field selector)."""
    state: dict[str, set[tuple[str, ...]]] = {"pods": set(), "nodes": set(), "claims": set(), "slices": set()}
    for obj in _objects(fake):
        meta = obj["metadata"]
        if obj["kind"] == "Pod" and (obj.get("status") or {}).get("phase") not in _TERMINAL:
            state["pods"].add((meta["uid"], (obj.get("spec") or {}).get("nodeName") or ""))
        elif obj["kind"] == "Node":
            state["nodes"].add((meta["name"], meta["resourceVersion"]))
        elif obj["kind"] == "ResourceClaim":
            state["claims"].add((f"{meta['namespace']}/{meta['name']}", meta["uid"], meta["resourceVersion"]))
        elif obj["kind"] == "ResourceSlice":
            state["slices"].add((meta["name"], meta["resourceVersion"]))
    return state


def server_gpus(fake: FakeAPIServer) -> dict[str, int]:
    """GPUs requested per node by the server's bound, non-terminal pods (recomputed from the objects)."""
    used: dict[str, int] = {}
    for obj in _objects(fake):
        node = (obj.get("spec") or {}).get("nodeName")
        if obj["kind"] != "Pod" or not node or (obj.get("status") or {}).get("phase") in _TERMINAL:
            continue
        for container in obj["spec"]["containers"]:
            used[node] = used.get(node, 0) + int(container["resources"]["requests"].get(GPU, 0))
    return {node: gpus for node, gpus in used.items() if gpus}


def cache_state(cache: ClusterCache) -> dict[str, set[tuple[str, ...]]]:
    return {
        "pods": {(p.uid, p.node_name) for p in cache.pods.values()},
        "nodes": {(n.name, n.resource_version) for n in cache.nodes.values()},
        "claims": {(c.key, c.uid, c.resource_version) for c in cache.dra.claims.values()},
        "slices": {(s.name, s.resource_version) for s in cache.dra.slices},
    }


class Harness:
    """Reflectors for nodes, pods and (``dra``) the DRA kinds, fast back-off; the service and its app."""

    def __init__(self, fake: FakeAPIServer, *, timeout: float = 5.0, stale_after: float = 30.0, dra: bool = True):
        self.fake = fake
        self.cache = ClusterCache()
        self.metrics = Metrics()
        self.client = KubeClient(fake.url, timeout=timeout)
        resources = (node_resource, pod_resource, *(DRA_RESOURCES if dra else ()))
        self.reflectors = [
            Reflector(self.client, self.cache, r, self.metrics, initial_backoff=0.02, max_backoff=0.2)
            for r in resources
        ]
        sources = tuple(r.name for r in resources)
        self.service = ExtenderService(
            parse_config({}),
            self.cache,
            ApiBinder(self.client),
            self.metrics,
            readiness=lambda: readiness(self.cache, sources, stale_after),
            claim_writer=ApiClaimWriter(self.client) if dra else None,
        )
        # The real operator endpoints, in this event loop (no lifespan: the test runs the reflectors).
        self.http = httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(self.service)), base_url="http://x")

    def claim(self, name: str, namespace: str = "default") -> dict[str, Any]:
        obj = self.fake.get("ResourceClaim", name, namespace)
        assert obj is not None
        return obj

    def server_pods(self) -> set[str]:
        """UIDs of non-terminal pods the API server holds (what the cache must hold)."""
        return {uid for uid, _node in server_state(self.fake)["pods"]}

    def consistent(self) -> bool:
        return set(self.cache.pods) == self.server_pods()

    def exact(self) -> bool:
        """The cache holds exactly the server's objects, and counts exactly the server's GPUs per node."""
        if cache_state(self.cache) != server_state(self.fake):
            return False
        counted = {n: self.cache.usage(n).requested.get(GPU, 0) for n in self.cache.nodes}
        return {n: g for n, g in counted.items() if g} == server_gpus(self.fake)

    async def settled(self, what: str) -> None:
        # Deadlines, not sleeps: generous, so a CI machine busy with other work does not fail them.
        await eventually(self.exact, what, timeout=15)
        await eventually(lambda: not self.cache.ledger, f"{what}: the watch confirmed every assumption", timeout=15)
        # The objects can match before every reflector reports back (an empty list matches at once):
        # settled also means every source listed and its watch is open, as /readyz and relists read.
        await eventually(self.watching, f"{what}: every source synced and watching", timeout=15)
        self.cache.check_invariants()

    def watching(self) -> bool:
        # Optional APIs (DeviceTaintRules) count as synced once they answered, served or not: /readyz
        # waits for them too, so a test reading /readyz must.
        optional = {r.resource.name for r in self.reflectors} - set(SOURCES)
        return all(self.cache.source(s).synced and self.cache.source(s).connected for s in SOURCES) and all(
            self.cache.source(s).synced for s in optional
        )

    async def readyz(self) -> tuple[int, dict[str, Any]]:
        response = await self.http.get("/readyz")
        return response.status_code, response.json()

    async def sources(self) -> dict[str, dict[str, Any]]:
        response = await self.http.get("/debug", params={"nodes": "false", "decisions": "0"})
        assert response.status_code == 200
        return response.json()["cache"]["sources"]  # type: ignore[no-any-return]

    def start(self) -> list[asyncio.Task[None]]:
        return [asyncio.create_task(r.run()) for r in self.reflectors]

    async def stop(self, tasks: list[asyncio.Task[None]]) -> None:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.client.close()
        await self.http.aclose()

    async def run(self, body: Callable[[Harness], Awaitable[None]], *, synced: bool = False) -> None:
        """Run the reflectors around ``body`` (after the initial sync when ``synced``); then the
        cache must still add up."""
        tasks = self.start()
        try:
            if synced:
                await eventually(lambda: self.service.not_ready_reason() == "", "initial sync")
            await body(self)
        finally:
            await self.stop(tasks)
        self.cache.check_invariants()


def run(
    fake: FakeAPIServer, body: Callable[[Harness], Awaitable[None]], *, synced: bool = False, **options: Any
) -> Harness:
    harness = Harness(fake, **options)
    asyncio.run(harness.run(body, synced=synced))
    return harness
