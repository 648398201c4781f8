"""The reclaim loop (``queues.reclaim``): gives a queue back the quota it lent, which the preempt verb
cannot do (kube-scheduler calls it only when lower-priority pods block a pod).

Every ``intervalSeconds``, in the replica whose kube-scheduler leads (the Lease kube-scheduler holds
names this host), it reads the cache into the pure inputs of ``fairshare.reclaim`` (running
workloads, pending pods, each node's free room), asks for victims per pending pod, and:

- records the decision on /debug/queues (verb ``reclaim``) whenever it changes;
- in ``on`` mode, evicts the new victims through the Eviction API: first as a dry run for every pod
  of the decision (one PodDisruptionBudget refusal and nothing is evicted: a gang or a multi-victim
  decision goes all together or not at all), then for real; a refusal (429) or error is retried
  after ``retryAfterSeconds``; never forced. Each eviction writes an Event on the victim and on the
  beneficiary and counts in ``kube_gpu_extender_reclaim_evictions_total``;
- at most ``evictionsPerMinute`` victim workloads per rolling minute; pods bound less than
  ``minRuntimeSeconds`` ago are never victims.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.cluster.cache_events import CacheEvent, Counted
from app.cluster.eviction import EvictionOutcome, Evictor
from app.cluster.objects import ObjectError, pod_placement
from app.cluster.workloads import kueue_group_name
from app.pipeline.fairness import Fairness
from app.pipeline.reclaim_index import Member, WorkloadIndex, build_workloads, member
from app.pipeline.reclaim_notes import decision_shares, eviction_notes
from app.pipeline.reclaim_rooms import NodeRooms
from fairshare.assignment import QueuedPod
from fairshare.config import ReclaimConfig
from fairshare.reclaim import (
    KaiView,
    ReclaimChoice,
    Workload,
    Workloads,
    kai_reclaim,
    kueue_reclaim,
)
from scoring.framework import PodInfo

__all__ = ["Plan", "Reclaimer"]

log = logging.getLogger("kube_gpu_extender.reclaim")
MAX_BENEFICIARIES = 16  # pending pods judged per round: bounds a round's cost on a busy cluster
WINDOW = 60.0


@dataclass(frozen=True, slots=True)
class Plan:
    """One decision: the pending pod, its queue, and the victims that let it in."""

    pod: PodInfo
    queued: QueuedPod
    choice: ReclaimChoice


class Reclaimer:
    def __init__(
        self,
        fairness: Fairness,
        evictor: Evictor,
        *,
        ready: Callable[[], bool] = lambda: True,
        on_eviction: Callable[[str, str], None] = lambda _queue, _outcome: None,
        on_decision: Callable[[float], None] = lambda _seconds: None,
        wall_clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.fairness = fairness
        self.evictor = evictor
        self.ready = ready
        self.on_eviction = on_eviction
        self.on_decision = on_decision
        self.wall_clock = wall_clock
        self.monotonic = monotonic
        self.evicted_for: dict[str, set[str]] = {}  # beneficiary UID -> pods evicted for it
        self.evicted: set[str] = set()  # every pod evicted (until it leaves the cache)
        self.retry_at: dict[str, float] = {}  # pod UID -> when a refused eviction may be tried again
        self.recent: deque[float] = deque()  # when each victim workload was evicted (rate limit)
        self.reported: dict[str, tuple[str, ...]] = {}  # beneficiary UID -> victims last recorded
        self.unhelped: dict[str, int] = {}  # pending pod UID -> the round no eviction could help it
        self.leading: bool | None = None
        self._indexes: dict[str, WorkloadIndex] = {}  # kind -> running workloads, kept between rounds
        self.rooms = NodeRooms(fairness)  # where each pending pod may go, and what is free there
        self.rounds = 0
        self.last_error = ""
        fairness.reclaim_view = self.view
        if fairness.cache is not None:
            fairness.cache.subscribe(self._on_event)

    @property
    def config(self) -> ReclaimConfig:
        return self.fairness.config.reclaim

    # ------------------------------------------------------------------ loop
    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.config.interval_seconds)
            try:
                await self.round()
            except Exception as exc:  # a bug or an odd object must not end the loop
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.exception("reclaim: round failed")

    async def round(self) -> list[Plan]:
        """One pass: decide, record, and (mode on) evict. Returns the decisions taken."""
        config = self.config
        if config.mode == "off" or not self.ready():
            return []
        self.leading = await self.evictor.leading(config.leader_lease)
        if not self.leading:
            return []
        self.rounds += 1
        self._forget_gone()
        await self._learn_placements()
        started = time.perf_counter()
        plans = self.decide()
        self.on_decision(time.perf_counter() - started)
        for plan in plans:
            await self._act(plan, config)
        return plans

    # ------------------------------------------------------------------ decide
    def pending(self) -> list[tuple[PodInfo, QueuedPod]]:
        """Pending pods of a usable queue, highest priority first, then by UID (at most MAX_BENEFICIARIES);
        those no eviction helped go after the rest, longest-waiting first, so they cannot starve them."""
        cache = self.fairness.cache
        if cache is None:
            return []
        out = []
        for pod in cache.pods.values():
            if pod.node_name or pod.terminal or pod.terminating or not pod.queue_labels or pod.claims_pending:
                continue
            if cache.counted(pod.uid) is not None:
                continue  # assumed: being bound right now
            queued = self.fairness.queued(pod)
            if queued is None or queued.missing:
                continue
            if queued.kind == "kueue" and not queued.covered:
                continue
            if queued.kind == "kai" and not self.fairness.kai_ledger().is_leaf(queued.queue):
                continue
            out.append((pod, queued))
        out.sort(key=lambda item: (self.unhelped.get(item[0].uid, -1), -item[0].priority, item[0].uid))
        return out[:MAX_BENEFICIARIES]

    def workloads(self, kind: str, gone: frozenset[str] | set[str] = frozenset()) -> Workloads:
        """Running workloads (bound, not assumed; gangs as one) old enough to be victims, but ``gone``,
        built whole (``reclaim_index.build_workloads``; rounds keep them up to date instead, ``_index``)."""
        cache = self.fairness.cache
        if cache is None:
            return Workloads(())
        make = self._member_maker(kind)
        members = {uid: m for uid, entry in cache.counted_items() if (m := make(uid, entry)) is not None}
        return build_workloads(members, self.wall_clock(), self.config.min_runtime_seconds, self.evicted, gone)

    def _member_maker(self, kind: str) -> Callable[[str, Counted | None], Member | None]:
        """How a counted pod becomes a member of ``kind``'s workloads (its queue and what it counts)."""
        fairness = self.fairness

        def kueue(pod: PodInfo) -> tuple[str, Mapping[Any, float]] | None:
            return fairness.usage.counted(pod.uid)

        def kai_queue(pod: PodInfo) -> tuple[str, Mapping[Any, float]] | None:
            queue = kai.queue_of(dict(pod.queue_labels)) or ""
            return (queue, fairness._kai_amounts(pod)) if queue in kai.queues else None

        if kind == "kueue":
            queue_and_amounts = kueue
        else:
            kai = fairness.kai_ledger()  # its queues; read once per build, not per pod
            queue_and_amounts = kai_queue
        admissions = fairness.workloads
        if admissions is None:
            return lambda uid, entry: member(uid, entry, queue_and_amounts, fairness.admitted_at)

        def lookups(pod: PodInfo) -> tuple[str, ...]:
            return admissions.lookups(pod, kueue_group_name(pod))

        return lambda uid, entry: member(uid, entry, queue_and_amounts, fairness.admitted_at, lookups)

    def _on_event(self, event: CacheEvent) -> None:
        for index in self._indexes.values():
            index.on_event(event)

    def _index(self, kind: str, gone: set[str]) -> Workloads:
        """``workloads``, kept up to date between rounds from the pods the cache reports changed."""
        cache = self.fairness.cache
        if cache is None:
            return Workloads(())
        index = self._indexes.get(kind)
        if index is None:
            index = self._indexes[kind] = WorkloadIndex()
        config, admissions = self.fairness.config, self.fairness.workloads
        if admissions is not None:  # the members whose admission time may have moved are built again
            index.readmitted(admissions.changes_since(index.admissions_seen))
            index.admissions_seen = admissions.version
        # What every member reads besides its pod: rebuilt whole when one of these changes (identity first).
        basis = (id(config), config, id(admissions), admissions, self.config.min_runtime_seconds, id(cache), cache)
        workloads = index.refresh(
            basis,
            cache.counted_items,
            cache.counted_entry,
            self._member_maker(kind),
            self.wall_clock(),
            self.config.min_runtime_seconds,
            self.evicted,
        )
        return workloads.without(gone)

    def decide(self) -> list[Plan]:
        """A decision for each pending pod that needs victims (pure policy in fairshare.reclaim). Pods are
        judged in order on a simulated state: each decision's victims leave and its pod takes their
        place, so two pending pods never count on the same freed room."""
        fairness = self.fairness
        config = fairness.config
        kai = fairness.kai_ledger()
        snap = fairness.usage.snapshot()
        allocated = {q: dict(a) for q, a in kai.allocated.items()}
        moved: dict[str, dict[str, int]] = {}
        gone: set[str] = set()
        indexes: dict[str, Workloads] = {}
        plans = []
        for pod, queued in self.pending():
            rooms = self.rooms.of(pod, queued, snap, moved)
            if queued.kind not in indexes:
                indexes[queued.kind] = self._index(queued.kind, gone)
            workloads = indexes[queued.kind]
            choice: ReclaimChoice | None
            request: Mapping[Any, float]
            if queued.kind == "kueue":
                choice = kueue_reclaim(
                    snap,
                    queued.queue,
                    pod.priority,
                    pod.resources.requests,
                    rooms,
                    workloads,
                    weights=config.weight,
                    strategies=config.preemption_strategies,
                )
            else:
                request = fairness._kai_amounts(pod)
                shares = kai.fair_shares(None if kai.is_pending(pod.uid) else (queued.queue, request))
                view = KaiView(allocated, shares, kai.queues)
                choice = kai_reclaim(view, queued.queue, request, pod.resources.requests, rooms, workloads)
            if choice is None:
                self.unhelped[pod.uid] = self.rounds  # judged in vain: the others go first next round
                continue
            self.unhelped.pop(pod.uid, None)
            plans.append(Plan(pod, queued, choice))
            indexes.clear()
            for workload, _reason in choice.victims:  # the victims leave ...
                gone.add(workload.key)
                for running in workload.pods:
                    _add(moved.setdefault(running.node, {}), running.requests, 1)
                if queued.kind == "kueue":
                    snap = snap.with_delta(workload.queue, workload.usage, -1)
                else:
                    _add(allocated.setdefault(workload.queue, {}), workload.usage, -1)
            freed: dict[str, dict[str, int]] = {}
            for workload, _reason in choice.victims:
                for running in workload.pods:
                    _add(freed.setdefault(running.node, {}), running.requests, 1)
            wanted = {k: v for k, v in pod.resources.requests.items() if v > 0}
            target = next(  # ... and the pod takes their place
                (
                    r
                    for r in rooms
                    if r.name == choice.node
                    or (
                        not choice.node
                        and all(v <= r.free.get(k, 0) + freed.get(r.name, {}).get(k, 0) for k, v in wanted.items())
                    )
                ),
                None,
            )
            if target is not None:
                _add(moved.setdefault(target.name, {}), pod.resources.requests, -1)
                if queued.kind == "kueue":
                    snap = snap.with_delta(queued.queue, target.request)
            if queued.kind != "kueue":
                _add(allocated.setdefault(queued.queue, {}), fairness._kai_amounts(pod), 1)
        return plans

    # ------------------------------------------------------------------ act
    def _victims(self, plan: Plan) -> list[dict[str, Any]]:
        out = []
        for workload, reason in plan.choice.victims:
            for running in workload.pods:
                victim = self._pod(running.uid)
                out.append(
                    {
                        "pod": victim.key if victim is not None else running.uid,
                        "uid": running.uid,
                        "node": running.node,
                        "queue": workload.queue,
                        "workload": workload.key,
                        "reason": reason,
                        "alreadyEvicted": workload.evicted,
                    }
                )
        return out

    def _pod(self, uid: str) -> PodInfo | None:
        cache = self.fairness.cache
        return cache.pods.get(uid) if cache is not None else None

    async def _act(self, plan: Plan, config: ReclaimConfig) -> None:
        victims = self._victims(plan)
        fresh = [w for w, _ in plan.choice.victims if not w.evicted]
        signature = tuple(sorted(v["uid"] for v in victims))
        outcome = "waiting"  # every victim is already on its way out
        if fresh:
            outcome = "dry-run" if config.mode == "dry-run" else await self._evict(plan, fresh, config)
        if self.reported.get(plan.pod.uid) != (*signature, outcome):
            self.reported[plan.pod.uid] = (*signature, outcome)
            self.fairness.record(
                "reclaim",
                plan.pod,
                plan.queued,
                mode=config.mode,
                outcome=outcome,
                node=plan.choice.node,
                shares=decision_shares(self.fairness, plan),
                victims=victims,
            )
            if outcome == "dry-run":  # counted once per decision, not once per round it stands
                for w in fresh:
                    self.on_eviction(w.queue, "dry-run")

    async def _evict(self, plan: Plan, fresh: Sequence[Workload], config: ReclaimConfig) -> str:
        """All new victims' pods, or none: rate limit, retry times, then a dry run of each eviction."""
        now = self.monotonic()
        while self.recent and now - self.recent[0] > WINDOW:
            self.recent.popleft()
        budget = config.evictions_per_minute
        if self.recent and len(self.recent) + len(fresh) > budget:
            return "rate-limited"
        pods = [(w, p) for w in fresh for p in w.pods]
        names = {p.uid: self._name(p.uid) for _, p in pods}  # before the watch drops the evicted pods
        if any(self.retry_at.get(p.uid, 0.0) > now for _, p in pods):
            return "retry-later"
        for w, p in pods:
            outcome, message = await self.evictor.evict(*names[p.uid], p.uid, dry_run=True)
            if outcome in (EvictionOutcome.BLOCKED, EvictionOutcome.FAILED):
                for _, q in pods:
                    self.retry_at[q.uid] = now + config.retry_after_seconds
                self.on_eviction(w.queue, outcome.value)
                log.info("reclaim: eviction of %s refused (%s), retrying later: %s", p.uid, outcome.value, message)
                return str(outcome.value)
        for w in fresh:
            self.recent.append(now)
            for p in w.pods:
                outcome, message = await self.evictor.evict(*names[p.uid], p.uid, dry_run=False)
                self.on_eviction(w.queue, outcome.value)
                if outcome in (EvictionOutcome.EVICTED, EvictionOutcome.GONE):
                    self.evicted.add(p.uid)
                    self.evicted_for.setdefault(plan.pod.uid, set()).add(p.uid)
                    if outcome is EvictionOutcome.EVICTED:
                        await self._events(plan, w, p.uid, names[p.uid])
                else:  # refused after a successful dry run (a race): the rest of the gang still goes
                    self.retry_at[p.uid] = now + config.retry_after_seconds
                    log.warning("reclaim: eviction of %s failed (%s): %s", p.uid, outcome.value, message)
        self._forget_gone()
        return "evicted"

    def _name(self, uid: str) -> tuple[str, str]:
        pod = self._pod(uid)
        return (pod.namespace, pod.name) if pod is not None else ("", uid)

    def _forget_gone(self) -> None:
        """Drop what is kept per pod once the pod is gone (or, for a beneficiary, bound), and retry
        times that have passed: run every round, so nothing grows with the pods a cluster has seen."""
        cache = self.fairness.cache
        if cache is None:
            return
        self.evicted = {uid for uid in self.evicted if uid in cache.pods}
        for uid in [u for u in self.reported if u not in cache.pods or cache.pods[u].node_name]:
            del self.reported[uid]
            self.evicted_for.pop(uid, None)
        now = self.monotonic()
        for uid in [u for u, at in self.retry_at.items() if at <= now or u not in cache.pods]:
            del self.retry_at[uid]
        for uid in [u for u in self.unhelped if u not in cache.pods or cache.pods[u].node_name]:
            del self.unhelped[uid]

    async def _events(self, plan: Plan, workload: Workload, uid: str, victim: tuple[str, str]) -> None:
        for note in eviction_notes(plan, workload, uid, victim, decision_shares(self.fairness, plan)):
            await self.evictor.event(note)

    async def _learn_placements(self) -> None:
        """Read the spec of pending pods filter has not shown us since start (their nodeSelector decides
        the nodes to make room on)."""
        for pod, _queued in self.pending():
            if self.fairness.has_placement(pod.uid):
                continue
            obj = await self.evictor.pod(pod.namespace, pod.name)
            if obj is None:
                continue
            try:
                self.fairness.remember_placement(pod.uid, pod_placement(obj))
            except ObjectError as exc:
                log.warning("reclaim: pod %s: %s", pod.key, exc)

    # ------------------------------------------------------------------ debug
    def view(self) -> dict[str, Any]:
        config = self.config
        now = self.monotonic()
        return {
            "mode": config.mode,
            "evictionsPerMinute": config.evictions_per_minute,
            "minRuntimeSeconds": config.min_runtime_seconds,
            "intervalSeconds": config.interval_seconds,
            "leaderLease": config.leader_lease,
            "leading": self.leading,
            "rounds": self.rounds,
            "evictionsLastMinute": sum(1 for t in self.recent if now - t <= WINDOW),
            "retryLater": {uid: round(at - now, 3) for uid, at in self.retry_at.items() if at > now},
            "lastError": self.last_error,
            # Running workloads kept between rounds, per kind, and how often they were built whole.
            "workloadIndex": {
                kind: {"workloads": len(index.workloads.by_key), "wholeBuilds": index.rebuilds}
                for kind, index in self._indexes.items()
            },
        }


def _add(target: dict[Any, Any], amounts: Mapping[Any, Any], sign: int) -> None:
    for key, value in amounts.items():
        target[key] = target.get(key, 0) + sign * value
