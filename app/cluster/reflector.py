"""List+watch loops that keep the cache in step with the API server.

One Reflector per resource: list (paginated) → replace the cache's view → watch from the list's
resourceVersion, following bookmarks. A 410 Gone relists; a dropped or timed-out stream resumes from
the last resourceVersion; errors back off exponentially (honouring Retry-After). Objects the cache
cannot use are logged and skipped, never fatal.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from app.cluster.cache import ClusterCache, SourceState
from app.cluster.dra import DraState
from app.cluster.kube import ApiError, GoneError, KubeClient
from app.cluster.objects import (
    ObjectError,
    claim_from_obj,
    device_class_from_obj,
    node_from_obj,
    pod_from_obj,
    slice_from_obj,
    taint_rule_from_obj,
)
from app.cluster.podgroups import (
    COSCHEDULING,
    COSCHEDULING_NOT_SERVED,
    COSCHEDULING_PATH,
    PODGROUP,
    PODGROUPS_NOT_SERVED,
    PODGROUPS_PATH,
    GroupPolicy,
    coscheduling_from_obj,
    podgroup_from_obj,
)
from app.operator.metrics import Metrics

__all__ = [
    "DEVICE_TAINT_RULES_NOT_SERVED",
    "DRA_RESOURCES",
    "GANG_RESOURCES",
    "Reflector",
    "Resource",
    "device_class_resource",
    "device_taint_rule_resource",
    "node_resource",
    "pod_resource",
    "resource_claim_resource",
    "resource_slice_resource",
]

log = logging.getLogger("kube_gpu_extender.reflector")
T = TypeVar("T")

# Terminal pods leave the selection, so the watch reports them as DELETED and they stop counting.
NON_TERMINAL_PODS = "status.phase!=Succeeded,status.phase!=Failed"
SHORT_WATCH_SECONDS = 1.0  # a watch that ends sooner without any event counts as a failure


@dataclass(frozen=True)
class Resource:
    name: str
    path: str
    field_selector: str
    replace: Callable[[ClusterCache, list[Any]], None]  # gets the listed items as ``convert`` made them
    upsert: Callable[[ClusterCache, dict[str, Any]], object]  # what it returns is not used
    delete: Callable[[ClusterCache, dict[str, Any]], None]
    # What a 404 on the collection means (an API group that is not served), for /readyz; "" keeps the bare error.
    not_found: str = ""
    # What the cache keeps of a listed item, applied page by page so that a list of 150,000 pods never
    # sits in memory as raw JSON objects all at once; an item it refuses (ObjectError) is logged and
    # skipped. None keeps the items as they are.
    convert: Callable[[dict[str, Any]], Any] | None = None
    kind: str = ""  # the object kind, for log lines
    # An API that may not be served (a beta group version that is off by default): a 404 on the list
    # counts as "synced, no objects" and the list is tried again every max_backoff seconds.
    optional: bool = False


def _convert_all(items: list[dict[str, Any]], convert: Callable[[dict[str, Any]], Any], what: str) -> list[Any]:
    out = []
    for item in items:
        try:
            out.append(convert(item))
        except ObjectError as exc:
            log.error("skipping unusable %s: %s", what, exc)
    return out


def _uid(obj: dict[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    return str(metadata.get("uid") or f"{metadata.get('namespace') or 'default'}/{metadata.get('name')}")


def _name(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _namespaced_name(obj: dict[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    return f"{metadata.get('namespace') or 'default'}/{metadata.get('name')}"


node_resource = Resource(
    name="nodes",
    path="/api/v1/nodes",
    field_selector="",
    replace=ClusterCache.replace_nodes,
    upsert=lambda cache, obj: cache.upsert_node(node_from_obj(obj)),
    delete=lambda cache, obj: cache.delete_node(_name(obj)),
    convert=node_from_obj,
    kind="Node",
)

pod_resource = Resource(
    name="pods",
    path="/api/v1/pods",
    field_selector=NON_TERMINAL_PODS,
    replace=ClusterCache.replace_pods,
    upsert=lambda cache, obj: cache.upsert_pod(pod_from_obj(obj)),
    delete=lambda cache, obj: cache.delete_pod(_uid(obj)),
    convert=pod_from_obj,
    kind="Pod",
)

_DRA = "/apis/resource.k8s.io/v1"


def _dra_resource(
    plural: str,
    kind: str,
    convert: Callable[[dict[str, Any]], T],
    replace: Callable[[DraState, list[T]], None],
    upsert: Callable[[DraState, T], object],
    delete: Callable[[DraState, str], None],
    key: Callable[[dict[str, Any]], str],
) -> Resource:
    """A resource.k8s.io/v1 kind kept in the cache's DraState; ``key`` names a deleted object there."""
    return Resource(
        name=plural,
        path=f"{_DRA}/{plural}",
        field_selector="",
        replace=lambda cache, items: replace(cache.dra, items),
        upsert=lambda cache, obj: upsert(cache.dra, convert(obj)),
        delete=lambda cache, obj: delete(cache.dra, key(obj)),
        convert=convert,
        kind=kind,
    )


device_class_resource = _dra_resource(
    "deviceclasses",
    "DeviceClass",
    device_class_from_obj,
    DraState.replace_classes,
    DraState.upsert_class,
    DraState.delete_class,
    _name,
)
resource_claim_resource = _dra_resource(
    "resourceclaims",
    "ResourceClaim",
    claim_from_obj,
    DraState.replace_claims,
    DraState.upsert_claim,
    DraState.delete_claim,
    _namespaced_name,
)
resource_slice_resource = _dra_resource(
    "resourceslices",
    "ResourceSlice",
    slice_from_obj,
    DraState.replace_slices,
    DraState.upsert_slice,
    DraState.delete_slice,
    _name,
)

DEVICE_TAINT_RULES_NOT_SERVED = (
    "resource.k8s.io/v1beta2 devicetaintrules not served (DRADeviceTaintRules off): only slice taints apply"
)
device_taint_rule_resource = Resource(
    name="devicetaintrules",
    path="/apis/resource.k8s.io/v1beta2/devicetaintrules",
    field_selector="",
    replace=lambda cache, items: cache.dra.replace_taint_rules(items),
    upsert=lambda cache, obj: cache.dra.upsert_taint_rule(taint_rule_from_obj(obj)),
    delete=lambda cache, obj: cache.dra.delete_taint_rule(_name(obj)),
    not_found=DEVICE_TAINT_RULES_NOT_SERVED,
    convert=taint_rule_from_obj,
    kind="DeviceTaintRule",
    optional=True,
)

DRA_RESOURCES = (device_class_resource, resource_claim_resource, resource_slice_resource, device_taint_rule_resource)


def _group_resource(
    name: str, path: str, source: str, convert: Callable[[dict[str, Any]], GroupPolicy], not_found: str
) -> Resource:
    """A PodGroup API kept in the cache's PodGroupStore; optional: a cluster without it has no such groups."""
    return Resource(
        name=name,
        path=path,
        field_selector="",
        replace=lambda cache, items: cache.groups.replace(source, items),
        upsert=lambda cache, obj: cache.groups.upsert(convert(obj)),
        delete=lambda cache, obj: cache.groups.delete(f"{source}:{_namespaced_name(obj)}"),
        not_found=not_found,
        convert=convert,
        kind="PodGroup",
        optional=True,
    )


podgroup_resource = _group_resource("podgroups", PODGROUPS_PATH, PODGROUP, podgroup_from_obj, PODGROUPS_NOT_SERVED)
coscheduling_resource = _group_resource(
    "coscheduling-podgroups", COSCHEDULING_PATH, COSCHEDULING, coscheduling_from_obj, COSCHEDULING_NOT_SERVED
)
GANG_RESOURCES = (podgroup_resource, coscheduling_resource)


class Reflector:
    def __init__(
        self,
        client: KubeClient,
        cache: ClusterCache,
        resource: Resource,
        metrics: Metrics,
        *,
        watch_timeout: int = 300,
        initial_backoff: float = 0.2,
        max_backoff: float = 30.0,
    ) -> None:
        self.client = client
        self.cache = cache
        self.resource = resource
        self.metrics = metrics
        self.watch_timeout = watch_timeout
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.state: SourceState = cache.source(resource.name)
        self.resource_version = ""

    async def run(self) -> None:
        backoff = self.initial_backoff
        while True:
            try:
                if not self.resource_version:
                    await self._list()
                opened = self.cache.clock()
                if not await self._watch() and self.cache.clock() - opened < SHORT_WATCH_SECONDS:
                    # Like client-go's "very short watch": a stream cut at once must back off, or the
                    # loop would hammer the API server (or a proxy cutting streams) without a pause.
                    raise ApiError(f"very short watch: closed after less than {SHORT_WATCH_SECONDS}s without an event")
                backoff = self.initial_backoff  # a stream that ended cleanly: resume at once
                self._restart("closed")
            except asyncio.CancelledError:
                raise
            except GoneError:
                self.resource_version = ""
                self._restart("gone")
            except ApiError as exc:
                if self.resource.optional and exc.status == 404:
                    self._not_served(exc)
                    await asyncio.sleep(self.max_backoff)  # asks again: the API may be turned on later
                else:
                    await asyncio.sleep(self._failed(exc, backoff))
                    backoff = min(backoff * 2, self.max_backoff)
            except Exception as exc:  # whatever it was, the loop must survive and retry
                if not isinstance(exc, ObjectError):
                    log.exception("%s: unexpected error in the watch loop", self.resource.name)
                await asyncio.sleep(self._failed(exc, backoff))
                backoff = min(backoff * 2, self.max_backoff)

    def _failed(self, exc: Exception, backoff: float) -> float:
        """Record a failure; how long to wait before retrying."""
        self._disconnected(exc)
        delay = exc.retry_after if isinstance(exc, ApiError) and exc.retry_after else backoff
        self._restart("error")
        return delay * (1 + random.random() * 0.2)

    def _not_served(self, exc: ApiError) -> None:
        """An optional API answered 404: nothing of it exists (objects seen before are dropped)."""
        if self.state.last_error != self.resource.not_found:
            log.info("%s: %s (%s)", self.resource.name, self.resource.not_found or "not served", exc)
        self.resource.replace(self.cache, [])
        self.resource_version = ""
        self.state.synced = True
        self.state.connected = False
        self.state.disconnected_since = None
        self.state.last_error = self.resource.not_found or str(exc)
        self._restart("not-served")

    def _restart(self, cause: str) -> None:
        self.state.restarts += 1
        self.metrics.watch_restarts.labels(self.resource.name, cause).inc()

    def _disconnected(self, exc: Exception) -> None:
        self.state.connected = False
        if self.state.disconnected_since is None:
            self.state.disconnected_since = self.cache.clock()
        previous = self.state.last_error
        self.state.last_error = str(exc)
        if self.resource.not_found and isinstance(exc, ApiError) and exc.status == 404:
            self.state.last_error = f"{self.resource.not_found} ({exc})"
        # A state change is logged once: the first failure, or a different one; each retry only at DEBUG.
        level = logging.DEBUG if self.state.last_error == previous else logging.WARNING
        log.log(level, "%s: watch interrupted: %s", self.resource.name, self.state.last_error)

    async def _list(self) -> None:
        convert, resource_version = self.resource.convert, ""
        items: list[Any] = []
        async for page, version in self.client.list_pages(
            self.resource.path, field_selector=self.resource.field_selector
        ):
            items.extend(page if convert is None else _convert_all(page, convert, self.resource.kind))
            resource_version = version
        self.resource.replace(self.cache, items)
        self.resource_version = resource_version
        now = self.cache.clock()
        log.info(
            "%s: %s, %d objects at resourceVersion %s",
            self.resource.name,
            "relisted" if self.state.synced else "synced",
            len(items),
            resource_version,
        )
        self.state.synced = True
        self.state.relists += 1
        self.state.last_sync_at = now
        self.state.resource_version = resource_version

    async def _watch(self) -> int:
        """Follow one watch stream until it ends; returns how many events it brought (bookmarks too)."""
        count = 0
        async with self.client.watch(
            self.resource.path,
            self.resource_version,
            field_selector=self.resource.field_selector,
            timeout_seconds=self.watch_timeout,
        ) as events:
            if self.state.disconnected_since is not None:
                log.info(
                    "%s: watch restored after %.1fs",
                    self.resource.name,
                    self.cache.clock() - self.state.disconnected_since,
                )
            self.state.connected = True
            self.state.disconnected_since = None
            self.state.last_error = ""
            async for event in events:
                self._apply(event)
                count += 1
        return count

    def _apply(self, event: dict[str, Any]) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            code = obj.get("code")
            message = obj.get("message", "watch error")
            if code == 410:
                raise GoneError(message, status=410)
            raise ApiError(message, status=int(code or 0))
        resource_version = str((obj.get("metadata") or {}).get("resourceVersion", ""))
        if kind in ("ADDED", "MODIFIED"):
            try:
                self.resource.upsert(self.cache, obj)
            except ObjectError as exc:
                log.error("%s: skipping unusable object: %s", self.resource.name, exc)
        elif kind == "DELETED":
            self.resource.delete(self.cache, obj)
        elif kind != "BOOKMARK":
            log.warning("%s: ignoring watch event of type %r", self.resource.name, kind)
            return
        if resource_version:
            self.resource_version = resource_version
            self.state.resource_version = resource_version
        self.state.last_event_at = self.cache.clock()
