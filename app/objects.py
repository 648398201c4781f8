"""Turning Kubernetes JSON objects (dicts) into the pure packages' snapshots.

Only the fields scheduling needs are read; everything else is dropped at the edge so the cache
holds small objects and never keeps whole Pods or Nodes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scoring.framework import PodInfo
from scoring.quantity import QuantityError
from scoring.resources import parse_resource_list, pod_resources

__all__ = ["NodeObject", "ObjectError", "node_from_obj", "pod_from_obj"]

TERMINAL_PHASES = ("Succeeded", "Failed")


class ObjectError(ValueError):
    """A Kubernetes object the extender cannot use; the message says which field is wrong."""


@dataclass(frozen=True, slots=True)
class NodeObject:
    name: str
    allocatable: Mapping[str, int]
    labels: Mapping[str, str]
    unschedulable: bool = False
    resource_version: str = ""


def _metadata(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    if not isinstance(obj, Mapping):
        raise ObjectError(f"{kind} must be a JSON object")
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping) or not isinstance(metadata.get("name"), str) or not metadata["name"]:
        raise ObjectError(f"{kind}.metadata.name is missing")
    return metadata


def node_from_obj(obj: Mapping[str, Any]) -> NodeObject:
    metadata = _metadata(obj, "Node")
    status = obj.get("status") or {}
    spec = obj.get("spec") or {}
    try:
        allocatable = parse_resource_list(status.get("allocatable"), "status.allocatable")
    except QuantityError as exc:
        raise ObjectError(f"Node {metadata['name']}: {exc}") from None
    return NodeObject(
        name=metadata["name"],
        allocatable=allocatable,
        labels=dict(metadata.get("labels") or {}),
        unschedulable=bool(spec.get("unschedulable")),
        resource_version=str(metadata.get("resourceVersion") or ""),
    )


def pod_from_obj(obj: Mapping[str, Any]) -> PodInfo:
    """Build a PodInfo; a pod without a UID (hand-written snapshots) is keyed by namespace/name."""
    metadata = _metadata(obj, "Pod")
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        raise ObjectError("Pod.spec is missing")
    namespace = str(metadata.get("namespace") or "default")
    name = metadata["name"]
    try:
        resources = pod_resources(spec)
    except QuantityError as exc:
        raise ObjectError(f"Pod {namespace}/{name}: {exc}") from None
    except (AttributeError, TypeError) as exc:
        raise ObjectError(f"Pod {namespace}/{name}: malformed spec ({exc})") from None
    phase = (obj.get("status") or {}).get("phase", "")
    priority = spec.get("priority") or 0
    return PodInfo(
        uid=str(metadata.get("uid") or f"{namespace}/{name}"),
        namespace=namespace,
        name=name,
        resources=resources,
        node_name=str(spec.get("nodeName") or ""),
        priority=priority if isinstance(priority, int) else 0,
        terminal=phase in TERMINAL_PHASES,
        queue_labels=_queue_labels(metadata.get("labels")),
    )


QUEUE_LABELS = ("kai.scheduler/queue", "kueue.x-k8s.io/queue-name")


def _queue_labels(labels: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(labels, Mapping):
        return ()
    return tuple((k, str(labels[k])) for k in QUEUE_LABELS if k in labels)
