"""Shared test helpers: small clusters, services and an HTTP client over the real ASGI app."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.cache import ClusterCache
from app.config import ExtenderConfiguration, parse_config
from app.metrics import Metrics
from app.objects import node_from_obj, pod_from_obj
from app.server import create_app
from app.service import ExtenderService
from app.snapshot import SOURCES, SnapshotBinder

WIRE_FIXTURES = Path(__file__).parent / "fixtures" / "kube-scheduler-wire"


def node_obj(name: str, cpu: str = "32", memory: str = "128Gi", gpus: int | None = 8, **extra: str) -> dict[str, Any]:
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110", **extra}
    if gpus is not None:
        allocatable["nvidia.com/gpu"] = str(gpus)
    return {"kind": "Node", "metadata": {"name": name}, "status": {"allocatable": allocatable}}


def pod_obj(
    name: str,
    *,
    gpus: int = 0,
    cpu: str | None = "1",
    memory: str | None = "1Gi",
    node: str = "",
    namespace: str = "default",
    uid: str | None = None,
    phase: str = "Pending",
    priority: int = 0,
) -> dict[str, Any]:
    requests: dict[str, str] = {}
    if cpu is not None:
        requests["cpu"] = cpu
    if memory is not None:
        requests["memory"] = memory
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
    spec: dict[str, Any] = {"containers": [{"name": "main", "resources": {"requests": requests}}], "priority": priority}
    if node:
        spec["nodeName"] = node
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": uid or str(uuid.uuid4())},
        "spec": spec,
        "status": {"phase": phase},
    }


def filter_body(pod: dict[str, Any], names: list[str]) -> bytes:
    return json.dumps({"Pod": pod, "Nodes": None, "NodeNames": names}).encode()


def bind_body(pod: dict[str, Any], node: str) -> bytes:
    meta = pod["metadata"]
    return json.dumps(
        {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": node}
    ).encode()


def make_service(
    nodes: list[dict[str, Any]] = (),  # type: ignore[assignment]
    pods: list[dict[str, Any]] = (),  # type: ignore[assignment]
    config: ExtenderConfiguration | dict[str, Any] | None = None,
    *,
    synced: bool = True,
) -> ExtenderService:
    """A service over a snapshot-style cache (binds recorded in memory)."""
    if not isinstance(config, ExtenderConfiguration):
        config = parse_config(config or {})
    cache = ClusterCache(assume_ttl=config.cache.assumeTTLSeconds)
    cache.replace_nodes(node_from_obj(n) for n in nodes)
    cache.replace_pods(pod_from_obj(p) for p in pods)
    if synced:
        for source in SOURCES:
            cache.source(source).synced = True

    def readiness() -> tuple[bool, str]:
        missing = [s for s in SOURCES if not cache.source(s).synced]
        return (not missing, f"{', '.join(missing)} not synced yet" if missing else "")

    return ExtenderService(config, cache, SnapshotBinder(cache), Metrics(), readiness=readiness)


@pytest.fixture
def client_for() -> Iterator[Any]:
    """Factory: an HTTP client talking to the real app of a given service."""
    clients: list[TestClient] = []

    def build(service: ExtenderService) -> TestClient:
        client = TestClient(create_app(service))
        client.__enter__()
        clients.append(client)
        return client

    yield build
    for client in clients:
        client.__exit__(None, None, None)
