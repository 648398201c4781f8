"""Pods bound without the extender's /bind: kube-scheduler's own binder bound a pod we filtered.

With ``bindVerb`` unset, or an ignorable extender whose /bind failed, kube-scheduler's default binder
binds the pod itself. The fit re-check and the assumption (both in /bind) never happen, so the next
pods are filtered against usage that misses this one and nodes over-commit. Nothing in the API says
who bound a pod, so this is told from what the extender saw:

- a pod counts only if it went through /filter (pods kube-scheduler never sends us, e.g. without a
  managed resource, never count);
- a pod /bind assumed on a node is ours on that node, whenever the watch event arrives (before or
  after the Binding returns), unless that bind then failed for certain (the API refused it, or the
  claims could not be written), which releases the assumption;
- the check runs when the watch shows the pod bound (a ``PodChanged`` event of the cache), and once per pod.

Memory is bounded: the last ``limit`` filtered and assumed pods, the last ``RECENT`` reports.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.cluster.cache import ClusterCache
from app.cluster.cache_events import CacheEvent, PodChanged
from app.operator.metrics import Metrics
from scoring.framework import PodInfo

__all__ = ["LOG_INTERVAL", "RECENT", "BindlessPods", "BoundWithoutExtender"]

log = logging.getLogger("kube_gpu_extender.bindless")

LOG_INTERVAL = 60.0  # seconds between two warnings while it keeps happening
RECENT = 20  # reports kept for /debug
_TRACKED = 10_000  # filtered pods, and pods /bind assumed, remembered (as many as the service's pending pods)


@dataclass(frozen=True, slots=True)
class BoundWithoutExtender:
    pod: str  # namespace/name
    uid: str
    node: str
    time: float  # wall clock
    at: float  # the cache's clock, for ages


class BindlessPods:
    """Tells pods that passed /filter and were bound by someone else (fed by the cache's ``PodChanged`` events)."""

    def __init__(
        self,
        cache: ClusterCache,
        metrics: Metrics,
        *,
        wall_clock: Callable[[], float] = time.time,
        limit: int = _TRACKED,
    ) -> None:
        self.cache = cache
        self.metrics = metrics
        self.wall_clock = wall_clock
        self.limit = limit
        self.count = 0
        self.recent: deque[BoundWithoutExtender] = deque(maxlen=RECENT)
        self._filtered: OrderedDict[str, None] = OrderedDict()  # UIDs seen in /filter, not yet seen bound
        self._assumed: OrderedDict[str, set[str]] = OrderedDict()  # UID -> nodes /bind assumed it on
        self._logged_at: float | None = None
        self._logged_count = 0
        cache.subscribe(self.on_event)

    # ------------------------------------------------------------------ what the verbs tell
    def filtered(self, pod: PodInfo) -> None:
        """/filter was asked about ``pod``: from now on a Binding not made by /bind is reported."""
        self._filtered[pod.uid] = None
        self._filtered.move_to_end(pod.uid)
        if len(self._filtered) > self.limit:
            self._filtered.popitem(last=False)

    def assumed(self, uid: str, node: str) -> None:
        """/bind assumed the pod on ``node`` and is about to bind it there (before its first await)."""
        if uid not in self._filtered:
            return  # never filtered (or judged already): nothing to tell apart
        self._assumed.setdefault(uid, set()).add(node)
        self._assumed.move_to_end(uid)
        if len(self._assumed) > self.limit:
            self._assumed.popitem(last=False)

    def released(self, uid: str, node: str) -> None:
        """That bind failed for certain (the assumption was dropped): a Binding to ``node`` is not ours."""
        nodes = self._assumed.get(uid)
        if nodes is not None:
            nodes.discard(node)
            if not nodes:
                del self._assumed[uid]

    # ------------------------------------------------------------------ the cache's events
    def on_event(self, event: CacheEvent) -> None:
        if not isinstance(event, PodChanged) or event.uid not in self._filtered:
            return  # the common case: a pod never sent to /filter, or already judged
        uid, pod = event.uid, event.pod
        if pod is None:  # deleted (or finished) before anyone bound it
            del self._filtered[uid]
            self._assumed.pop(uid, None)
            return
        if not pod.node_name:
            return
        del self._filtered[uid]  # judged once: bound by /bind, or not
        if pod.node_name not in self._assumed.pop(uid, ()):
            self._report(pod)

    def _report(self, pod: PodInfo) -> None:
        now = self.cache.clock()
        self.count += 1
        self.metrics.pods_bound_without_extender.inc()
        self.recent.append(BoundWithoutExtender(pod.key, pod.uid, pod.node_name, self.wall_clock(), now))
        if self._logged_at is None or now - self._logged_at >= LOG_INTERVAL:
            log.warning(
                "%d pod(s) bound without the extender's /bind (%d since the last warning), last %s on node %s: "
                "kube-scheduler's own binder bound them (bindVerb unset, or an ignorable extender whose bind "
                "failed), so the extender's fit re-check and assumption were skipped and nodes may over-commit",
                self.count,
                self.count - self._logged_count,
                pod.key,
                pod.node_name,
            )
            self._logged_at = now
            self._logged_count = self.count

    # ------------------------------------------------------------------ what operators see
    def warning(self) -> str:
        """For /readyz's detail: empty while it never happened."""
        if not self.recent:
            return ""
        last = self.recent[-1]
        return (
            f"{self.count} pod{'s' if self.count != 1 else ''} bound without the extender's /bind "
            f"(bindVerb unset?) — last {last.pod} on {last.node} {self.cache.clock() - last.at:.0f}s ago"
        )

    def view(self) -> dict[str, Any]:
        now = self.cache.clock()
        return {
            "count": self.count,
            "recent": [
                {
                    "pod": r.pod,
                    "uid": r.uid,
                    "node": r.node,
                    "time": r.time,
                    "ageSeconds": round(now - r.at, 3),
                }
                for r in reversed(self.recent)
            ],
        }
