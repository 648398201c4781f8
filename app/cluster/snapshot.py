"""Snapshot mode: fill the cache from a file instead of the API server.

Accepts what people actually have at hand: a ``kubectl get nodes,pods,deviceclasses,resourceclaims,
resourceslices -A -o yaml`` List, multi-document YAML, or JSON (a List, a single object, or an
array). Binds and claim writes are recorded in memory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import msgspec
import yaml

from allocator import AllocationResult, RequestMapping, ResourceClaim, ResourceClaimConsumer, parse_resource_claim
from app.cluster.cache import ClusterCache
from app.cluster.dra import DraState
from app.cluster.objects import CONVERTERS, ObjectError
from app.cluster.podgroups import COSCHEDULING, PODGROUP, GroupPolicy, group_source, policy_from_obj
from app.cluster.writes import BindError, ClaimWriteError
from scoring.framework import PodInfo

__all__ = ["SnapshotBinder", "SnapshotClaimWriter", "SnapshotError", "iter_objects", "load_snapshot", "read_objects"]

SOURCES = ("nodes", "pods", "deviceclasses", "resourceclaims", "resourceslices")
FINALIZER = "resource.kubernetes.io/delete-protection"


class SnapshotError(ValueError):
    pass


@dataclass(frozen=True)
class _Reader:
    """How the flattening sees a document: ``shallow`` opens a node one level (a list of nodes, a
    map of names to nodes, or a scalar), ``value`` gives a node's whole value."""

    shallow: Callable[[Any], Any]
    value: Callable[[Any], Any]


def _same(node: Any) -> Any:
    return node


# YAML is decoded whole (PyYAML has no lazy mode); JSON is opened one level at a time with msgspec.Raw,
# so a 300 MB file of 150,000 pods is never held decoded whole (several GB as Python objects).
_yaml_reader = _Reader(_same, _same)
_json_shallow = msgspec.json.Decoder(list[msgspec.Raw] | dict[str, msgspec.Raw] | None)
_json_any = msgspec.json.Decoder()


def _json_open(raw: msgspec.Raw | bytes) -> Any:
    try:
        return _json_shallow.decode(raw)
    except msgspec.ValidationError:  # a scalar
        return _json_any.decode(raw)


_json_reader = _Reader(_json_open, _json_any.decode)


def _flatten(node: Any, where: str, read: _Reader, item_kind: str = "") -> Iterator[dict[str, Any]]:
    """The objects of a document: Lists (``kind: List``, ``<Kind>List``, or a bare ``items``) and arrays
    opened recursively, a typed List's items given its kind."""
    shallow = read.shallow(node)
    if shallow is None:
        return
    if isinstance(shallow, list):
        for index, item in enumerate(shallow):
            yield from _flatten(item, f"{where}[{index}]", read)
        return
    if not isinstance(shallow, dict):
        raise SnapshotError(f"{where}: expected a Kubernetes object or List, got {type(shallow).__name__}")
    kind = read.value(shallow["kind"]) if "kind" in shallow else ""
    if kind == "List" or (isinstance(kind, str) and kind.endswith("List")) or ("items" in shallow and not kind):
        items = read.shallow(shallow["items"]) if "items" in shallow else None
        if not isinstance(items, list | None):
            raise SnapshotError(f"{where}.items: expected a list")
        of_kind = kind[: -len("List")] if isinstance(kind, str) and kind.endswith("List") else ""
        for index, item in enumerate(items or ()):
            yield from _flatten(item, f"{where}.items[{index}]", read, of_kind)
        return
    obj = read.value(node)
    if item_kind and "kind" not in obj:
        obj = {**obj, "kind": item_kind}
    yield obj


def iter_objects(path: str | Path) -> Iterator[dict[str, Any]]:
    """The Kubernetes objects of a snapshot file, one at a time (JSON is never held decoded whole)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise SnapshotError(f"cannot read snapshot {path}: {exc.strerror}") from None
    try:
        if data.lstrip()[:1] in (b"{", b"["):
            yield from _flatten(data, "document 0", _json_reader)
            return
        docs = list(yaml.safe_load_all(data.decode("utf-8")))
    except SnapshotError:
        raise
    except (ValueError, yaml.YAMLError) as exc:  # msgspec.DecodeError is a ValueError
        raise SnapshotError(f"{path}: not valid JSON or YAML: {exc}") from None
    for index, doc in enumerate(docs):
        yield from _flatten(doc, f"document {index}", _yaml_reader)


def read_objects(path: str | Path) -> list[dict[str, Any]]:
    return list(iter_objects(path))


def load_snapshot(path: str | Path, cache: ClusterCache) -> dict[str, int]:
    """Fill ``cache``; unknown kinds are counted and skipped, bad objects are an error naming them."""
    found: dict[str, list[Any]] = {kind: [] for kind in CONVERTERS}
    skipped = 0
    groups: list[GroupPolicy] = []
    for obj in iter_objects(path):
        if obj.get("kind") == "PodGroup":
            try:
                groups.append(policy_from_obj(obj))
            except ObjectError as exc:
                raise SnapshotError(f"{path}: {exc}") from None
            continue
        convert = CONVERTERS.get(obj.get("kind", ""))
        if convert is None:
            skipped += 1
            continue
        try:
            found[obj["kind"]].append(convert(obj))
        except ObjectError as exc:
            raise SnapshotError(f"{path}: {exc}") from None
    cache.replace_nodes(found["Node"])
    cache.replace_pods(found["Pod"])
    cache.dra.replace_classes(found["DeviceClass"])
    cache.dra.replace_claims(found["ResourceClaim"])
    cache.dra.replace_slices(found["ResourceSlice"])
    for source in (PODGROUP, COSCHEDULING):
        cache.groups.replace(source, (g for g in groups if group_source(g.key) == source))
    for source in SOURCES:
        state = cache.source(source)
        state.synced = state.connected = True
        state.last_sync_at = cache.clock()
    return {
        "nodes": len(found["Node"]),
        "pods": len(found["Pod"]),
        "deviceClasses": len(found["DeviceClass"]),
        "resourceClaims": len(found["ResourceClaim"]),
        "resourceSlices": len(found["ResourceSlice"]),
        "podGroups": len(groups),
        "skipped": skipped,
    }


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
        self.cache.upsert_pod(pod if pod.node_name == node else pod.on_node(node))  # assumed: on it
        self.bindings.append((f"{namespace}/{name}", uid, node))


class SnapshotClaimWriter:
    """PreBind's claim writes, applied to the in-memory claims as the API server would apply them."""

    def __init__(self, dra: DraState) -> None:
        self.dra = dra
        self.writes: list[tuple[str, str]] = []  # (claim key, what), for tests and /debug
        self.extended_claims: dict[str, tuple[str, tuple[RequestMapping, ...]]] = {}  # pod -> its status record
        self._created = 0

    def _current(self, claim: ResourceClaim) -> ResourceClaim:
        current = self.dra.claims.get(claim.key)
        if current is None or current.uid != claim.uid:
            raise ClaimWriteError(f"resourceclaim {claim.key} no longer exists")
        return current

    def _store(self, claim: ResourceClaim, what: tuple[str, ...], **changes: Any) -> ResourceClaim:
        """``claim`` after the writes ``what`` (one resourceVersion each), made as one copy."""
        version = int(claim.resource_version) + len(what) if claim.resource_version.isdigit() else len(what)
        stored = replace(claim, resource_version=str(version), **changes)
        self.writes.extend((claim.key, write) for write in what)
        return stored

    async def allocate(self, claim: ResourceClaim, allocation: AllocationResult, pod: PodInfo) -> ResourceClaim:
        current = self._current(claim)
        if current.allocation is not None and current.allocation != allocation:
            raise ClaimWriteError(f"resourceclaim {claim.key} was allocated meanwhile by someone else")
        reserved = current.reserved_for
        if all(r.uid != pod.uid for r in reserved):
            reserved = (*reserved, ResourceClaimConsumer("pods", pod.name, pod.uid))
        if FINALIZER in current.finalizers:
            return self._store(current, ("status",), allocation=allocation, reserved_for=reserved)
        # The finalizer, then the status: two writes, as PreBind makes them
        finalizers = (*current.finalizers, FINALIZER)
        return self._store(
            current, ("finalizer", "status"), finalizers=finalizers, allocation=allocation, reserved_for=reserved
        )

    async def reserve(self, claim: ResourceClaim, pod: PodInfo) -> ResourceClaim:
        current = self._current(claim)
        if current.allocation is None:
            raise ClaimWriteError(f"resourceclaim {claim.key} was deallocated meanwhile")
        if any(r.uid == pod.uid for r in current.reserved_for):
            return current
        consumer = ResourceClaimConsumer("pods", pod.name, pod.uid)
        return self._store(current, ("status",), reserved_for=(*current.reserved_for, consumer))

    async def create(self, obj: dict[str, Any]) -> ResourceClaim:
        self._created += 1
        metadata = obj["metadata"]
        name = f"{metadata['generateName']}{self._created:05d}"
        uid = f"snapshot-claim-{self._created}"
        stored = {**obj, "metadata": {**metadata, "name": name, "uid": uid, "resourceVersion": "1"}}
        self.writes.append((f"{metadata['namespace']}/{name}", "create"))
        return parse_resource_claim(stored)

    async def delete(self, claim: ResourceClaim) -> None:
        self.writes.append((claim.key, "delete"))

    async def record_extended_claim(self, pod: PodInfo, claim: str, mappings: tuple[RequestMapping, ...]) -> None:
        self.extended_claims[pod.key] = (claim, mappings)
        self.writes.append((pod.key, "extendedResourceClaimStatus"))

    async def release(
        self, claim: ResourceClaim, pod: PodInfo, allocation: AllocationResult | None
    ) -> ResourceClaim | None:
        current = self.dra.claims.get(claim.key)
        if current is None or current.uid != claim.uid:
            return None
        remaining = tuple(r for r in current.reserved_for if r.uid != pod.uid)
        deallocate = allocation is not None and not remaining and current.allocation == allocation
        if remaining != current.reserved_for or deallocate:
            current = self._store(
                current,
                ("status",),
                reserved_for=remaining,
                allocation=None if deallocate else current.allocation,
                device_statuses=() if deallocate else current.device_statuses,
            )
        if deallocate and FINALIZER in current.finalizers:
            current = self._store(
                current, ("finalizer",), finalizers=tuple(f for f in current.finalizers if f != FINALIZER)
            )
        return current
