"""API writes of the reclaimer: evictions (policy/v1 Eviction, so PodDisruptionBudgets hold), Events
on the victim and the beneficiary, and the leader check (kube-scheduler's leader-election Lease).

Nothing here is ever forced: a 429 (a PodDisruptionBudget allows no disruption now) is reported as
``blocked`` and the reclaimer tries again later; the pod is never deleted directly.
"""

from __future__ import annotations

import enum
import itertools
import logging
import socket
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from app.cluster.cache import ClusterCache
from app.cluster.kube import ApiError, KubeClient

__all__ = [
    "ApiEvictor",
    "EventNote",
    "EvictionOutcome",
    "Evictor",
    "SnapshotEvictor",
    "holder_is_this_host",
]

log = logging.getLogger("kube_gpu_extender.reclaim")
COMPONENT = "kube-gpu-extender"


class EvictionOutcome(enum.Enum):
    EVICTED = "evicted"
    BLOCKED = "blocked"  # 429: a PodDisruptionBudget allows no disruption now; try again later
    GONE = "gone"  # the pod no longer exists (or is another pod of that name now)
    FAILED = "failed"  # any other error; try again later


@dataclass(frozen=True, slots=True)
class EventNote:
    """A core/v1 Event about a pod."""

    namespace: str
    name: str
    uid: str
    reason: str
    message: str
    type: str = "Normal"


class Evictor(Protocol):
    async def evict(self, namespace: str, name: str, uid: str, *, dry_run: bool) -> tuple[EvictionOutcome, str]: ...

    async def pod(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    async def event(self, note: EventNote) -> None: ...

    async def leading(self, lease: str) -> bool: ...


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def holder_is_this_host(holder: str, hostname: str) -> bool:
    """kube-scheduler's leader identity is ``<hostname>_<uuid>``; a sidecar shares the pod's hostname."""
    return holder == hostname or holder.startswith(f"{hostname}_")


class ApiEvictor:
    def __init__(self, client: KubeClient, hostname: str | None = None) -> None:
        self.client = client
        self.hostname = hostname or socket.gethostname()
        self._names = itertools.count()

    async def evict(self, namespace: str, name: str, uid: str, *, dry_run: bool) -> tuple[EvictionOutcome, str]:
        """POST pods/{name}/eviction with the UID as precondition (a re-created pod is not evicted).
        ``dry_run``: the API server checks the PodDisruptionBudgets and changes nothing."""
        options: dict[str, Any] = {"preconditions": {"uid": uid}}
        if dry_run:
            options["dryRun"] = ["All"]
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
            "deleteOptions": options,
        }
        path = f"/api/v1/namespaces/{namespace}/pods/{name}/eviction" + ("?dryRun=All" if dry_run else "")
        try:
            await self.client.post(path, body)
        except ApiError as exc:
            if exc.status == 429:
                return EvictionOutcome.BLOCKED, str(exc)
            if exc.status in (404, 409):
                return EvictionOutcome.GONE, str(exc)
            return EvictionOutcome.FAILED, str(exc)
        return EvictionOutcome.EVICTED, ""

    async def event(self, note: EventNote) -> None:
        """A core/v1 Event; a failure is logged, never raised (an Event is a courtesy)."""
        now = _now()
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{note.name}.{time.time_ns():x}{next(self._names)}", "namespace": note.namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": note.namespace, "name": note.name}
            | ({"uid": note.uid} if note.uid else {}),
            "reason": note.reason,
            "message": note.message[:1024],
            "type": note.type,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.hostname,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        path = f"/api/v1/namespaces/{note.namespace}/events"
        try:
            await self.client.post(path, event)
        except ApiError as exc:
            log.warning(
                "reclaim: could not write event %s on pod %s/%s: %s", note.reason, note.namespace, note.name, exc
            )

    async def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return await self.client.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
        except ApiError as exc:
            if exc.status != 404:
                log.warning("reclaim: cannot read pod %s/%s: %s", namespace, name, exc)
            return None

    async def leading(self, lease: str) -> bool:
        """Whether the kube-scheduler beside this process holds ``lease`` (namespace/name). No lease (leader
        election off, a single replica) counts as leading; an unreadable one does not."""
        if not lease:
            return True
        namespace, name = lease.split("/", 1)
        try:
            obj: dict[str, Any] = await self.client.get(
                f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
            )
        except ApiError as exc:
            if exc.status == 404:
                return True
            log.warning("reclaim: cannot read lease %s (standing by): %s", lease, exc)
            return False
        holder = str((obj.get("spec") or {}).get("holderIdentity") or "")
        return holder_is_this_host(holder, self.hostname)


class SnapshotEvictor:
    """Snapshot mode: an eviction removes the pod from the cache (no API server, no PDBs)."""

    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache
        self.events: list[EventNote] = []
        self.evictions: list[str] = []

    async def evict(self, namespace: str, name: str, uid: str, *, dry_run: bool) -> tuple[EvictionOutcome, str]:
        if uid not in self.cache.pods:
            return EvictionOutcome.GONE, f"pod {namespace}/{name} not found"
        if not dry_run:
            self.evictions.append(uid)
            self.cache.delete_pod(uid)
        return EvictionOutcome.EVICTED, ""

    async def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None  # snapshot mode keeps no specs: the pod may go to any node

    async def event(self, note: EventNote) -> None:
        self.events.append(note)

    async def leading(self, lease: str) -> bool:
        return True
