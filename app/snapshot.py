"""Snapshot mode: fill the cache from a file instead of the API server.

Accepts what people actually have at hand: a ``kubectl get nodes,pods -o yaml`` List, multi-document
YAML, or JSON (a List, a single object, or an array). Binds are recorded in memory.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from app.cache import ClusterCache
from app.objects import ObjectError, node_from_obj, pod_from_obj
from app.service import BindError

__all__ = ["SnapshotBinder", "SnapshotError", "load_snapshot", "read_objects"]

SOURCES = ("nodes", "pods")


class SnapshotError(ValueError):
    pass


def _flatten(doc: Any, where: str) -> Iterator[dict[str, Any]]:
    if doc is None:
        return
    if isinstance(doc, list):
        for index, item in enumerate(doc):
            yield from _flatten(item, f"{where}[{index}]")
        return
    if not isinstance(doc, dict):
        raise SnapshotError(f"{where}: expected a Kubernetes object or List, got {type(doc).__name__}")
    kind = doc.get("kind", "")
    if kind == "List" or kind.endswith("List") or ("items" in doc and "kind" not in doc):
        item_kind = kind[: -len("List")] if kind.endswith("List") and kind != "List" else ""
        for index, item in enumerate(doc.get("items") or []):
            if isinstance(item, dict) and item_kind and "kind" not in item:
                item = {**item, "kind": item_kind}
            yield from _flatten(item, f"{where}.items[{index}]")
        return
    yield doc


def read_objects(path: str | Path) -> list[dict[str, Any]]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SnapshotError(f"cannot read snapshot {path}: {exc.strerror}") from None
    try:
        docs = [json.loads(text)] if text.lstrip().startswith(("{", "[")) else list(yaml.safe_load_all(text))
    except (ValueError, yaml.YAMLError) as exc:
        raise SnapshotError(f"{path}: not valid JSON or YAML: {exc}") from None
    objects: list[dict[str, Any]] = []
    for index, doc in enumerate(docs):
        objects.extend(_flatten(doc, f"document {index}"))
    return objects


def load_snapshot(path: str | Path, cache: ClusterCache) -> dict[str, int]:
    """Fill ``cache``; unknown kinds are counted and skipped, bad objects are an error naming them."""
    nodes, pods, skipped = [], [], 0
    for obj in read_objects(path):
        kind = obj.get("kind")
        try:
            if kind == "Node":
                nodes.append(node_from_obj(obj))
            elif kind == "Pod":
                pods.append(pod_from_obj(obj))
            else:
                skipped += 1
        except ObjectError as exc:
            raise SnapshotError(f"{path}: {exc}") from None
    cache.replace_nodes(nodes)
    cache.replace_pods(pods)
    for source in SOURCES:
        state = cache.source(source)
        state.synced = state.connected = True
        state.last_sync_at = cache.clock()
    return {"nodes": len(nodes), "pods": len(pods), "skipped": skipped}


class SnapshotBinder:
    """Records binds in memory: the pod becomes bound in the cache at once."""

    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache
        self.bindings: list[tuple[str, str, str]] = []

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        assumption = self.cache.ledger.get(uid)
        pod = self.cache.pods.get(uid) or (assumption.pod if assumption else None)
        if pod is None:
            raise BindError(f"pod {namespace}/{name} not found", kind="not-found")
        self.cache.upsert_pod(replace(pod, node_name=node))
        self.bindings.append((f"{namespace}/{name}", uid, node))
