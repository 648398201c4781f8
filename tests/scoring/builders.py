"""Small builders shared by the scoring tests: containers, pods and node snapshots."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from scoring.framework import NodeInfo, PodInfo
from scoring.resources import pod_resources
from scoring.table import Batch, NodeTable


def ctr(requests: dict[str, Any] | None = None, *, name: str = "c", sidecar: bool = False) -> dict[str, Any]:
    """A container; ``requests=None`` means no resources at all (not an empty map)."""
    container: dict[str, Any] = {"name": name}
    if requests is not None:
        container["resources"] = {"requests": requests}
    if sidecar:
        container["restartPolicy"] = "Always"
    return container


def pod(*containers: dict[str, Any], **spec: Any) -> PodInfo:
    return PodInfo(uid="u", namespace="ns", name="p", resources=pod_resources({"containers": list(containers), **spec}))


def pod_requesting(requests: dict[str, Any] | None = None, **spec: Any) -> PodInfo:
    """A pod with one container requesting ``requests``."""
    return pod(ctr(requests), **spec)


def node(
    allocatable: Mapping[str, int],
    requested: Mapping[str, int] | None = None,
    non_zero_cpu: int | None = None,
    non_zero_memory: int | None = None,
) -> NodeInfo:
    """A snapshot; NonZeroRequested defaults to the plain cpu / memory requests."""
    requested = dict(requested or {})
    return NodeInfo(
        name="n",
        allocatable=dict(allocatable),
        requested=requested,
        non_zero_cpu=requested.get("cpu", 0) if non_zero_cpu is None else non_zero_cpu,
        non_zero_memory=requested.get("memory", 0) if non_zero_memory is None else non_zero_memory,
        allocatable_types=NodeInfo.types_of(allocatable),
    )


def named_batch(node_list: Sequence[NodeInfo]) -> tuple[list[NodeInfo], Batch]:
    """``node_list`` named n0, n1, ... in a small node table (its rows grow while upserting), and the
    batch of all of them in that order."""
    table = NodeTable(capacity=2)
    named = [replace(n, name=f"n{i}") for i, n in enumerate(node_list)]
    for item in named:
        table.upsert(item)
    batch = table.batch([n.name for n in named])
    assert batch is not None
    return named, batch


def table_of(*nodes: NodeInfo) -> NodeTable:
    """A small node table (its rows grow while upserting) holding ``nodes``."""
    table = NodeTable(capacity=2)
    for item in nodes:
        table.upsert(item)
    return table


def cpu_node(name: str, cpu: int, used: int = 0) -> NodeInfo:
    """A node with ``cpu`` milli-CPU allocatable, ``used`` of it requested."""
    return NodeInfo(name=name, allocatable={"cpu": cpu}, requested={"cpu": used}, non_zero_cpu=used)
