"""Shared test helpers: small clusters, services and an HTTP client over the real ASGI app."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.cluster.cache import ClusterCache
from app.cluster.objects import claim_from_obj, device_class_from_obj, node_from_obj, pod_from_obj, slice_from_obj
from app.cluster.snapshot import SOURCES, SnapshotBinder, SnapshotClaimWriter
from app.config import ExtenderConfiguration, parse_config
from app.http.server import create_app
from app.operator.metrics import Metrics
from app.service import ExtenderService

WIRE_FIXTURES = Path(__file__).parent / "fixtures" / "kube-scheduler-wire"


def node_obj(name: str, cpu: str = "32", memory: str = "128Gi", gpus: int | None = 8, **extra: str) -> dict[str, Any]:
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110", **extra}
    if gpus is not None:
        allocatable["nvidia.com/gpu"] = str(gpus)
    return {"kind": "Node", "metadata": {"name": name}, "status": {"allocatable": allocatable}}


def labelled(name: str, labels: dict[str, str], gpus: int | None = 8) -> dict[str, Any]:
    """A node carrying ``labels`` (flavors are matched on node labels)."""
    node = node_obj(name, gpus=gpus)
    node["metadata"]["labels"] = labels
    return node


def in_queue(pod: dict[str, Any], queue: str, label: str = "kueue.x-k8s.io/queue-name") -> dict[str, Any]:
    """``pod`` labelled for a Kueue LocalQueue (or, with ``label="kai.scheduler/queue"``, a KAI queue)."""
    pod["metadata"].setdefault("labels", {})[label] = queue
    return pod


def cluster_queue(name: str, flavor: str, nominal_gpus: int, **spec: Any) -> dict[str, Any]:
    """A ClusterQueue with ``nominal_gpus`` GPUs of ``flavor`` (one resource group covering
    nvidia.com/gpu); ``spec``: more of its spec (cohortName, preemption, ...)."""
    gpus = {"name": "nvidia.com/gpu", "nominalQuota": nominal_gpus}
    group = {"coveredResources": ["nvidia.com/gpu"], "flavors": [{"name": flavor, "resources": [gpus]}]}
    return {"metadata": {"name": name}, "spec": {**spec, "resourceGroups": [group]}}


def lending_cluster_queue(name: str, flavor: str, nominal_gpus: int = 4) -> dict[str, Any]:
    """A ClusterQueue of cohort "gpus" with ``nominal_gpus`` GPUs of ``flavor`` that reclaims what it
    lent (reclaimWithinCohort: Any): the lender and the borrower of the reclaim tests."""
    return cluster_queue(name, flavor, nominal_gpus, cohortName="gpus", preemption={"reclaimWithinCohort": "Any"})


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


def bind_pod(service: ExtenderService, pod: dict[str, Any], node: str) -> dict[str, Any]:
    """``/bind`` of ``pod`` to ``node``, the pending pod first delivered to the cache as its watch would."""
    if pod["metadata"]["uid"] not in service.cache.pods:
        service.cache.upsert_pod(pod_from_obj(pod))
    return asyncio.run(service.bind(bind_body(pod, node)))


def make_service(
    nodes: list[dict[str, Any]] = (),  # type: ignore[assignment]
    pods: list[dict[str, Any]] = (),  # type: ignore[assignment]
    config: ExtenderConfiguration | dict[str, Any] | None = None,
    *,
    synced: bool = True,
    dra: list[dict[str, Any]] = (),  # type: ignore[assignment]
) -> ExtenderService:
    """A service over a snapshot-style cache (binds and claim writes recorded in memory)."""
    if not isinstance(config, ExtenderConfiguration):
        config = parse_config(config or {})
    cache = ClusterCache(assume_ttl=config.cache.assumeTTLSeconds)
    cache.replace_nodes(node_from_obj(n) for n in nodes)
    cache.replace_pods(pod_from_obj(p) for p in pods)
    cache.dra.replace_classes(device_class_from_obj(o) for o in dra if o["kind"] == "DeviceClass")
    cache.dra.replace_claims(claim_from_obj(o) for o in dra if o["kind"] == "ResourceClaim")
    cache.dra.replace_slices(slice_from_obj(o) for o in dra if o["kind"] == "ResourceSlice")
    if synced:
        for source in SOURCES:
            cache.source(source).synced = True

    def readiness() -> tuple[bool, str]:
        missing = [s for s in SOURCES if not cache.source(s).synced]
        return (not missing, f"{', '.join(missing)} not synced yet" if missing else "")

    return ExtenderService(
        config,
        cache,
        SnapshotBinder(cache),
        Metrics(),
        readiness=readiness,
        claim_writer=SnapshotClaimWriter(cache.dra),
    )


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


# ---------------------------------------------------------------------------- DRA (resource.k8s.io/v1)
DRIVER = "gpu.example.com"


def device_class_obj(name: str = DRIVER, expression: str | None = None) -> dict[str, Any]:
    selector = expression or f'device.driver == "{DRIVER}"'
    return {
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": selector}}]},
    }


def gpu_device(name: str, memory: str = "40Gi", **attributes: Any) -> dict[str, Any]:
    attrs = {"model": {"string": "H100"}, **{k: {"string": v} for k, v in attributes.items()}}
    return {"name": name, "attributes": attrs, "capacity": {"memory": {"value": memory}}}


def slice_obj(
    name: str,
    devices: list[dict[str, Any]],
    *,
    node: str | None = None,
    pool: str | None = None,
    priority: int | None = None,
    pool_priority: int | None = None,
    node_selector: dict[str, Any] | None = None,
    slice_count: int = 1,
) -> dict[str, Any]:
    """A ResourceSlice; priorities as the annotations a real API server keeps (KEP-5773 fields are dropped)."""
    annotations = {}
    if priority is not None:
        annotations["dra.kube-gpu-extender.io/priority"] = str(priority)
    if pool_priority is not None:
        annotations["dra.kube-gpu-extender.io/pool-priority"] = str(pool_priority)
    spec: dict[str, Any] = {
        "driver": DRIVER,
        "pool": {"name": pool or node or name, "generation": 1, "resourceSliceCount": slice_count},
        "devices": devices,
    }
    if node:
        spec["nodeName"] = node
    elif node_selector:
        spec["nodeSelector"] = node_selector
    else:
        spec["allNodes"] = True
    return {"kind": "ResourceSlice", "metadata": {"name": name, "annotations": annotations}, "spec": spec}


def claim_obj(
    name: str,
    *,
    namespace: str = "default",
    count: int = 1,
    device_class: str = DRIVER,
    selector: str | None = None,
    uid: str | None = None,
) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": count}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    return {
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": uid or str(uuid.uuid4()), "resourceVersion": "1"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }


def with_claims(pod: dict[str, Any], *claims: str) -> dict[str, Any]:
    """``pod`` using ResourceClaims by name (one pod claim per ResourceClaim, all for the first container)."""
    pod["spec"]["resourceClaims"] = [{"name": f"c{i}", "resourceClaimName": claim} for i, claim in enumerate(claims)]
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": f"c{i}"} for i in range(len(claims))]
    return pod


def memory_at_least(quantity: str) -> str:
    return f'device.capacity["{DRIVER}"].memory.compareTo(quantity("{quantity}")) >= 0'


def filter_answer(service: Any, body: bytes) -> dict[str, Any]:
    """``service.filter``'s answer as kube-scheduler reads it: parts the service sends pre-encoded
    (the failed-node maps) come back as plain JSON values."""
    from app.http import wire

    return dict(json.loads(wire.encode(service.filter(body))))
