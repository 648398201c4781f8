"""Asking kube-scheduler to retry the pods the extender rejected, once its cache frees capacity.

kube-scheduler keeps a pod no node passed in its unschedulable pool until a cluster event it watches
(or the 5-minute flush). Two things it cannot see:

- the extender's cache catching up: kube-scheduler's informer delivered a pod's deletion first, the
  pod was retried and rejected on the old count, and our watch delivered the deletion milliseconds
  later (seen on the real control plane, past what ``cache.catchUpSeconds`` covers);
- state only the extender reads: Kueue's queue objects, DRA devices freed.

So filter records every pod it leaves with no node. When the cache frees capacity afterwards (a pod
stops counting on a node, a node comes or grows, devices are freed, the queues are reconfigured) and
kube-scheduler has not asked about the pod again within ``cache.requeueAfterSeconds``, the extender
writes the condition ``CONDITION_TYPE`` into the pod's status: kube-scheduler sees the pod updated
and retries it. A pod is asked for at most once per interval, doubling from ``requeueAfterSeconds`` up
to ``MAX_INTERVAL``, so a backlog that really does not fit costs few writes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from app.cluster.cache import ClusterCache
from app.cluster.cache_events import CacheEvent, PodChanged
from app.cluster.kube import ApiError, KubeClient
from scoring.framework import PodInfo

__all__ = ["CONDITION_TYPE", "MAX_INTERVAL", "ApiRetryRequester", "Held", "Requeuer", "RetryRequester"]

log = logging.getLogger("kube_gpu_extender.requeue")

CONDITION_TYPE = "kube-gpu-extender.io/RetryRequested"
CONDITION_REASON = "CapacityFreed"
CONDITION_MESSAGE = (
    "the GPU extender rejected this pod, then saw capacity freed (a pod gone, a node added, devices or "
    "quota freed) that kube-scheduler has not retried it for; asking kube-scheduler to retry"
)
MAX_INTERVAL = 300.0  # kube-scheduler's own flush of its unschedulable pool
MAX_PER_ROUND = 200  # writes per round; the rest wait for the next round
MAX_HELD = 10_000


@dataclass(slots=True)
class Held:
    """A pod filter left with no node: when, and when it may be asked for again."""

    namespace: str
    name: str
    uid: str
    rejected_at: float
    not_before: float = 0.0
    interval: float = 0.0

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class RetryRequester(Protocol):
    async def request_retry(self, held: Held) -> None:
        """Make kube-scheduler see the pod updated; ``LookupError`` when the pod is gone."""


class ApiRetryRequester:
    """A strategic-merge patch of the pod's status: our condition, merged by type (kube-scheduler's
    PodScheduled stays), with the UID so a pod re-created under the name is left alone."""

    def __init__(self, client: KubeClient, wall_clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self.wall_clock = wall_clock

    async def request_retry(self, held: Held) -> None:
        now = datetime.fromtimestamp(self.wall_clock(), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        condition = {
            "type": CONDITION_TYPE,
            "status": "True",
            "reason": CONDITION_REASON,
            "message": CONDITION_MESSAGE,
            "lastProbeTime": now,  # changes on every request, so each one is an update kube-scheduler sees
            "lastTransitionTime": now,
        }
        patch = {"metadata": {"uid": held.uid}, "status": {"conditions": [condition]}}
        path = f"/api/v1/namespaces/{held.namespace}/pods/{held.name}/status"
        try:
            await self.client.strategic_patch(path, patch)
        except ApiError as exc:
            if exc.status in (404, 409, 422):  # gone, or another pod under the name (UID mismatch)
                raise LookupError(str(exc)) from exc
            raise


class Requeuer:
    """The pods filter left with no node, and the loop that asks kube-scheduler to retry them."""

    def __init__(
        self,
        cache: ClusterCache,
        requester: RetryRequester,
        *,
        after: float,
        on_request: Callable[[Held, str, str], None] | None = None,
    ) -> None:
        self.cache = cache
        self.requester = requester
        self.after = after
        self.clock = cache.clock
        self.on_request = on_request  # (pod, outcome "requested" | "gone" | "failed", error)
        self._held: OrderedDict[str, Held] = OrderedDict()  # uid -> pod, least recently rejected first
        cache.subscribe(self._on_event)

    def __len__(self) -> int:
        return len(self._held)

    # ------------------------------------------------------------------ fed by filter and the cache
    def rejected(self, pod: PodInfo) -> None:
        held = self._held.get(pod.uid)
        if held is None:
            self._held[pod.uid] = Held(pod.namespace, pod.name, pod.uid, self.clock())
            while len(self._held) > MAX_HELD:
                self._held.popitem(last=False)
        else:
            held.rejected_at = self.clock()
            self._held.move_to_end(pod.uid)

    def passed(self, uid: str) -> None:
        self._held.pop(uid, None)

    def _on_event(self, event: CacheEvent) -> None:
        if isinstance(event, PodChanged) and (event.pod is None or event.pod.node_name):
            self._held.pop(event.uid, None)  # deleted or bound: nothing to retry

    # ------------------------------------------------------------------ the loop
    def due(self, freed_at: float) -> list[Held]:
        """Pods rejected before capacity was freed at ``freed_at`` that may be asked for now."""
        now = self.clock()
        due = [h for h in self._held.values() if h.rejected_at < freed_at and h.not_before <= now]
        return due[:MAX_PER_ROUND]

    async def request_due(self, freed_at: float) -> int:
        """Ask for the due pods (at most ``MAX_PER_ROUND``); how many were due."""
        due = self.due(freed_at)
        for held in due:
            if self._held.get(held.uid) is not held:
                continue  # bound or deleted while we were writing
            held.interval = min(MAX_INTERVAL, max(self.after, held.interval * 2))
            held.not_before = self.clock() + held.interval
            try:
                await self.requester.request_retry(held)
            except LookupError as exc:
                self._held.pop(held.uid, None)
                self._report(held, "gone", str(exc))
                continue
            except Exception as exc:  # the API's trouble must not end the loop
                log.warning("asking kube-scheduler to retry %s failed: %s", held.key, exc)
                self._report(held, "failed", str(exc))
                continue
            self._report(held, "requested", "")
        return len(due)

    def _report(self, held: Held, outcome: str, error: str) -> None:
        if self.on_request is not None:
            self.on_request(held, outcome, error)

    async def run(self) -> None:
        freed = self.cache.freed
        version = freed.version
        while True:
            if not await freed.changed_after(version, MAX_INTERVAL):
                continue
            freed_at = self.clock()
            version = freed.version
            await asyncio.sleep(self.after)  # kube-scheduler's own retry, if it comes, comes first
            while await self.request_due(freed_at) >= MAX_PER_ROUND:
                await asyncio.sleep(self.after)  # a large backlog: the next batch a little later
