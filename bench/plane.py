"""What the benchmarks on a real control plane (bench/throughput.py, bench/bind.py) share: bulk API
calls, nodes as a kubelet would leave them, and a process's CPU time."""

from __future__ import annotations

import asyncio
import os
import ssl
from pathlib import Path
from typing import Any

import httpx

from tests.e2e.controlplane import ADMIN_TOKEN, ControlPlane

__all__ = ["GPU", "add_nodes", "bulk", "cpu_seconds"]

GPU = "nvidia.com/gpu"


async def bulk(plane: ControlPlane, calls: list[tuple[str, str, Any, str]], concurrency: int = 16) -> None:
    """(method, path, body, content type) calls, ``concurrency`` at a time, over one async client."""
    limit = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(
        base_url=plane.url,
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        verify=ssl.create_default_context(cafile=str(plane.serving_ca)),
        timeout=60.0,
    ) as http:

        async def one(method: str, path: str, body: Any, content_type: str) -> None:
            async with limit:
                response = await http.request(method, path, json=body, headers={"Content-Type": content_type})
                if response.status_code not in (200, 201):
                    raise RuntimeError(f"{method} {path}: {response.status_code} {response.text[:300]}")

        await asyncio.gather(*(one(*call) for call in calls))


def add_nodes(plane: ControlPlane, gpu_nodes: int, cpu_nodes: int) -> list[str]:
    """Nodes as a kubelet would leave them (allocatable, Ready, no not-ready taint), created concurrently:
    ``gpu-NNNN`` with 8 GPUs, ``cpu-NNNN`` without; each 96 CPUs, 768Gi, 110 pods."""
    nodes = [(f"gpu-{i:04d}", 8) for i in range(gpu_nodes)] + [(f"cpu-{i:04d}", 0) for i in range(cpu_nodes)]
    json_type, merge, strategic = (
        "application/json",
        "application/merge-patch+json",
        "application/strategic-merge-patch+json",
    )
    asyncio.run(
        bulk(
            plane,
            [
                ("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": n}}, json_type)
                for n, _ in nodes
            ],
        )
    )
    ready = [{"type": "Ready", "status": "True", "reason": "Bench", "message": "no kubelet"}]
    patches = []
    for name, gpus in nodes:
        allocatable = {"cpu": "96", "memory": "768Gi", "pods": "110", **({GPU: str(gpus)} if gpus else {})}
        status = {"capacity": allocatable, "allocatable": allocatable, "conditions": ready}
        patches.append(("PATCH", f"/api/v1/nodes/{name}/status", {"status": status}, strategic))
    asyncio.run(bulk(plane, patches))
    # TaintNodesByCondition adds node.kubernetes.io/not-ready on create; no node controller clears it.
    asyncio.run(bulk(plane, [("PATCH", f"/api/v1/nodes/{n}", {"spec": {"taints": None}}, merge) for n, _ in nodes]))
    return [n for n, _ in nodes]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
