"""Trace files for the simulator: the openb CSVs (nodes, pods), YAML/JSON pod lists and snapshot
nodes, loaded into ``SimNode`` / ``SimPod`` with errors that name the file, line and column."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from app.cluster.objects import ObjectError, node_from_obj, pod_from_obj
from app.cluster.snapshot import SnapshotError, read_objects

__all__ = [
    "GPU",
    "GPU_PRODUCT_LABEL",
    "KIND_CPU",
    "KIND_MULTI_GPU",
    "KIND_ONE_GPU",
    "MIB",
    "NAMESPACE",
    "SimNode",
    "SimPod",
    "TraceError",
    "load_nodes_csv",
    "load_pods",
    "load_pods_csv",
    "load_snapshot_nodes",
]

GPU = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
MIB = 1024 * 1024
NAMESPACE = "sim"
KIND_CPU, KIND_ONE_GPU, KIND_MULTI_GPU = "cpu", "1-gpu", "multi-gpu"

_encode = msgspec.json.encode


class TraceError(ValueError):
    """A trace file that cannot be simulated; the message names the file, line and column."""


@dataclass(frozen=True, slots=True)
class SimNode:
    name: str
    allocatable: Mapping[str, int]
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def gpus(self) -> int:
        return self.allocatable.get(GPU, 0)

    @property
    def model(self) -> str:
        return self.labels.get(GPU_PRODUCT_LABEL, "")


@dataclass(frozen=True, slots=True)
class SimPod:
    """One trace pod. ``gpus`` is whole GPUs: a sharing pod (``gpu_milli`` < 1000) takes one."""

    name: str
    body: bytes  # the Pod's JSON as kube-scheduler would send it
    cpu_milli: int
    memory: int
    gpus: int
    gpu_milli: int = 0
    gpu_spec: frozenset[str] = frozenset()  # allowed GPU models; empty = any
    created: float = 0.0
    deleted: float | None = None
    namespace: str = NAMESPACE
    uid: str = ""
    file_ordered: bool = False  # no creation_time: ``created`` is the pod's position in the file

    def __post_init__(self) -> None:
        if not self.uid:
            object.__setattr__(self, "uid", f"{self.namespace}-{self.name}")

    @property
    def kind(self) -> str:
        return KIND_CPU if self.gpus == 0 else KIND_ONE_GPU if self.gpus == 1 else KIND_MULTI_GPU

    @property
    def shares_gpu(self) -> bool:
        return self.gpus > 0 and 0 < self.gpu_milli < 1000


def _rows(path: str | Path, required: Sequence[str]) -> Iterable[tuple[int, dict[str, str]]]:
    try:
        handle = open(path, newline="", encoding="utf-8")  # noqa: SIM115 (closed by the with below)
    except OSError as exc:
        raise TraceError(f"cannot read {path}: {exc.strerror}") from None
    with handle:
        reader = csv.DictReader(handle)
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            raise TraceError(f"{path}:1: missing column(s) {', '.join(missing)}")
        for row in reader:
            yield reader.line_num, row


def _int(path: str | Path, line: int, row: Mapping[str, str | None], column: str, default: int | None = None) -> int:
    text = (row.get(column) or "").strip()
    if not text and default is not None:
        return default
    try:
        value = int(float(text)) if "." in text or "e" in text.lower() else int(text)
    except ValueError:
        raise TraceError(f"{path}:{line}: column {column}: {text!r} is not an integer") from None
    if value < 0:
        raise TraceError(f"{path}:{line}: column {column}: must be >= 0, got {value}")
    return value


def _node(name: str, cpu_milli: int, memory: int, gpus: int, model: str) -> SimNode:
    allocatable = {"cpu": cpu_milli, "memory": memory}
    if gpus:
        allocatable[GPU] = gpus
    return SimNode(name, allocatable, {GPU_PRODUCT_LABEL: model} if model else {})


def _unique_name(path: str | Path, line: int, row: dict[str, str], column: str, kind: str, seen: set[str]) -> str:
    """The row's name in ``column``: non-empty and not seen before in the file."""
    name = (row.get(column) or "").strip()
    if not name:
        raise TraceError(f"{path}:{line}: column {column}: empty {kind} name")
    if name in seen:
        raise TraceError(f"{path}:{line}: column {column}: duplicate {kind} {name!r}")
    seen.add(name)
    return name


def load_nodes_csv(path: str | Path) -> list[SimNode]:
    """openb node list: ``sn, cpu_milli, memory_mib, gpu, model``."""
    nodes: list[SimNode] = []
    seen: set[str] = set()
    for line, row in _rows(path, ("sn", "cpu_milli", "memory_mib", "gpu")):
        name = _unique_name(path, line, row, "sn", "node", seen)
        cpu, memory, gpus = (_int(path, line, row, c) for c in ("cpu_milli", "memory_mib", "gpu"))
        nodes.append(_node(name, cpu, memory * MIB, gpus, (row.get("model") or "").strip()))
    return nodes


def _pod_body(name: str, cpu_milli: int, memory: int, gpus: int) -> bytes:
    requests: dict[str, str] = {"cpu": f"{cpu_milli}m", "memory": str(memory)}
    limits: dict[str, str] = {}
    if gpus:
        requests[GPU] = limits[GPU] = str(gpus)
    resources: dict[str, Any] = {"requests": requests, "limits": limits} if limits else {"requests": requests}
    return _encode(
        {
            "metadata": {"name": name, "namespace": NAMESPACE, "uid": f"{NAMESPACE}-{name}"},
            "spec": {"containers": [{"name": "main", "resources": resources}]},
        }
    )


def load_pods_csv(path: str | Path) -> list[SimPod]:
    """openb pod list: ``name, cpu_milli, memory_mib, num_gpu, gpu_milli`` and optionally
    ``gpu_spec`` (``|``-separated models), ``creation_time``, ``deletion_time`` (seconds)."""
    pods: list[SimPod] = []
    seen: set[str] = set()
    for line, row in _rows(path, ("name", "cpu_milli", "memory_mib", "num_gpu")):
        name = _unique_name(path, line, row, "name", "pod", seen)
        cpu, memory, gpus = (_int(path, line, row, c) for c in ("cpu_milli", "memory_mib", "num_gpu"))
        gpu_milli = _int(path, line, row, "gpu_milli", 1000 if gpus else 0)
        if gpus and gpu_milli == 0:
            raise TraceError(f"{path}:{line}: column gpu_milli: 0 with num_gpu {gpus}")
        file_ordered = not (row.get("creation_time") or "").strip()
        created = _int(path, line, row, "creation_time", len(pods))
        deletion_text = (row.get("deletion_time") or "").strip()
        deleted = float(_int(path, line, row, "deletion_time")) if deletion_text else None
        if deleted is not None and deleted < created:
            raise TraceError(f"{path}:{line}: column deletion_time: {deleted:.0f} is before creation_time {created}")
        spec = frozenset(m.strip() for m in (row.get("gpu_spec") or "").split("|") if m.strip())
        pods.append(
            SimPod(
                name,
                _pod_body(name, cpu, memory * MIB, gpus),
                cpu,
                memory * MIB,
                gpus,
                gpu_milli,
                spec,
                created,
                deleted,
                file_ordered=file_ordered,
            )
        )
    return pods


def _yaml_pods(path: str | Path) -> list[SimPod]:
    """A pod list (YAML/JSON, as ``kubectl get pods -o yaml``), submitted in file order, never deleted.
    ``spec.nodeSelector[nvidia.com/gpu.product]`` constrains the GPU model."""
    try:
        objects = [o for o in read_objects(path) if o.get("kind", "Pod") == "Pod"]
    except SnapshotError as exc:
        raise TraceError(str(exc)) from None
    pods: list[SimPod] = []
    for index, obj in enumerate(objects):
        try:
            info = pod_from_obj(obj)
        except ObjectError as exc:
            raise TraceError(f"{path}: pod {index}: {exc}") from None
        spec = dict(obj.get("spec") or {})
        spec.pop("nodeName", None)
        metadata = {**obj["metadata"], "namespace": info.namespace, "uid": info.uid}
        selector = (spec.get("nodeSelector") or {}).get(GPU_PRODUCT_LABEL)
        requests = info.resources.requests
        gpus = requests.get(GPU, 0)
        pods.append(
            SimPod(
                info.name,
                _encode({"metadata": metadata, "spec": spec}),
                requests.get("cpu", 0),
                requests.get("memory", 0),
                gpus,
                1000 if gpus else 0,
                frozenset([selector]) if selector else frozenset(),
                float(index),
                namespace=info.namespace,
                uid=info.uid,
                file_ordered=True,
            )
        )
    return pods


def load_pods(path: str | Path) -> list[SimPod]:
    """CSV (openb) by extension ``.csv``, otherwise a YAML/JSON pod list."""
    return load_pods_csv(path) if str(path).lower().endswith(".csv") else _yaml_pods(path)


def load_snapshot_nodes(path: str | Path) -> list[SimNode]:
    """The nodes of a snapshot file (``kubectl get nodes -o yaml``); its pods are not simulated."""
    try:
        objects = read_objects(path)
    except SnapshotError as exc:
        raise TraceError(str(exc)) from None
    nodes: list[SimNode] = []
    for obj in objects:
        if obj.get("kind") != "Node":
            continue
        try:
            node = node_from_obj(obj)
        except ObjectError as exc:
            raise TraceError(f"{path}: {exc}") from None
        if not node.unschedulable:
            nodes.append(SimNode(node.name, dict(node.allocatable), dict(node.labels)))
    if not nodes:
        raise TraceError(f"{path}: no schedulable Node objects")
    return nodes
