"""The running workloads the reclaimer chooses victims from, built whole (``build_workloads``: the
definition) or kept between rounds (``WorkloadIndex``: only the pods the cache reports changed, and
those whose minimum runtime has passed, are looked at again).

A *member* is one bound pod as the reclaimer sees it: its node and its own Workload (queue, priority,
admission time, what it counts). A lone pod is a workload; the pods of a gang (``pod_group``) are one,
with their usage summed, their highest priority and their earliest admission. A pod younger than
``minRuntimeSeconds`` since its admission (or with no known admission time) is never a victim, and it
keeps its whole gang out.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from app.cluster.cache_events import CacheEvent, Counted, PodCounted
from fairshare.reclaim import RunningPod, Workload, Workloads
from scoring.framework import PodInfo

__all__ = ["Member", "WorkloadIndex", "build_workloads", "member"]


@dataclass(frozen=True, slots=True)
class Member:
    pod: PodInfo
    single: Workload  # the pod as a workload of its own (its key is the pod's UID)
    lookups: tuple[str, ...] = ()  # what its admission time is looked up by (``WorkloadIndex.readmitted``)


def member(
    uid: str,
    entry: Counted | None,
    queue_and_amounts: Callable[[PodInfo], tuple[str, Mapping[Any, float]] | None],
    admitted_at: Callable[[PodInfo], float],
    lookups: Callable[[PodInfo], tuple[str, ...]] = lambda _pod: (),
) -> Member | None:
    """A counted pod as a member: bound (not our assumption), in a queue of the kind asked."""
    if entry is None or entry.assumed:
        return None
    pod = entry.pod
    found = queue_and_amounts(pod)
    if found is None:
        return None
    queue, amounts = found
    running = (RunningPod(uid, entry.node, pod.resources.requests),)
    return Member(pod, Workload(uid, queue, pod.priority, admitted_at(pod), amounts, running), lookups(pod))


def is_young(admitted_at: float, now: float, min_runtime: float) -> bool:
    return min_runtime > 0 and (admitted_at <= 0 or now - admitted_at < min_runtime)


def lone(m: Member, evicted: Collection[str]) -> Workload:
    being_evicted = m.pod.terminating or m.single.key in evicted
    return m.single if m.single.evicted == being_evicted else replace(m.single, evicted=being_evicted)


def gang(key: str, members: Iterable[Member], evicted: Collection[str]) -> Workload:
    """A gang's members as one workload (in UID order, so the same members always make the same one)."""
    ordered = sorted(members, key=lambda m: m.single.key)
    usage: dict[Any, float] = {}
    for m in ordered:
        for k, v in m.single.usage.items():
            usage[k] = usage.get(k, 0.0) + v
    return Workload(
        key,
        ordered[0].single.queue,
        max(m.single.priority for m in ordered),
        min(m.single.admitted_at for m in ordered),
        usage,
        tuple(p for m in ordered for p in m.single.pods),
        evicted=any(m.pod.terminating or m.single.key in evicted for m in ordered),
    )


def build_workloads(
    members: Mapping[str, Member], now: float, min_runtime: float, evicted: Collection[str], gone: Collection[str]
) -> Workloads:
    """Every workload old enough to be a victim, but those in ``gone`` (keys)."""
    out = []
    groups: dict[str, list[Member]] = {}
    too_young: set[str] = set()
    for uid, m in members.items():
        young = is_young(m.single.admitted_at, now, min_runtime)
        if m.pod.pod_group:
            if young:
                too_young.add(m.pod.pod_group)
            groups.setdefault(m.pod.pod_group, []).append(m)
        elif not young and uid not in gone:
            out.append(lone(m, evicted))
    for key, group in groups.items():
        if key not in too_young and key not in gone:
            out.append(gang(key, group, evicted))
    return Workloads(out)


class WorkloadIndex:
    """``build_workloads`` kept up to date: ``touch`` a pod when what it counts changed (the cache's
    ``PodCounted``), tell ``readmitted`` what admission times moved, ``refresh`` before deciding (it
    also looks again at evictions that changed and at pods that have just passed their minimum
    runtime). Whatever else a member reads (the queue configuration, the Workload store,
    ``minRuntimeSeconds``) is the refresh's ``basis``: when it changes, every member is built again."""

    def __init__(self, max_touched: int = 4096) -> None:
        self.max_touched = max_touched
        self.workloads = Workloads()
        self._basis: tuple[Any, ...] | None = None
        self._members: dict[str, Member] = {}
        self._touched: set[str] = set()
        self._young: dict[str, float] = {}  # uid -> when it may be a victim (inf: not until it changes)
        self._maturing: list[tuple[float, str]] = []  # heap of (_young[uid], uid), stale entries skipped
        self._gangs: dict[str, set[str]] = {}  # pod group -> member UIDs
        self._by_lookup: dict[str, set[str]] = {}  # what admission times are looked up by -> member UIDs
        self.admissions_seen = 0  # the admission times' version the members were last brought up to
        self._evicted: frozenset[str] = frozenset()
        self.rebuilds = 0  # whole builds (a new basis, or too many pods touched between two refreshes)

    def on_event(self, event: CacheEvent) -> None:
        if isinstance(event, PodCounted):
            self.touch(event.uid)

    def touch(self, uid: str) -> None:
        if self._basis is None:
            return  # the next refresh builds everything anyway
        self._touched.add(uid)
        if len(self._touched) > max(self.max_touched, len(self._members)):
            self._basis = None  # cheaper to build again than to remember every pod (reclaim off, say)
            self._touched.clear()

    def readmitted(self, lookups: Iterable[str] | None) -> None:
        """Admission times changed: those looked up by ``lookups`` (None: any of them)."""
        if lookups is None:
            self._basis = None
            self._touched.clear()
            return
        for name in lookups:
            if name in self._members:  # the pod's own UID (Kueue's plain pods)
                self.touch(name)
            for uid in self._by_lookup.get(name, ()):
                self.touch(uid)

    def refresh(
        self,
        basis: tuple[Any, ...],
        counted: Callable[[], Iterable[tuple[str, Counted]]],
        counted_one: Callable[[str], Counted | None],
        make: Callable[[str, Counted | None], Member | None],
        now: float,
        min_runtime: float,
        evicted: Collection[str],
    ) -> Workloads:
        """The workloads as ``build_workloads`` would give them now. ``counted``: every counted pod
        (read on a whole build only); ``counted_one``: one pod's entry; ``make``: a member from it."""
        evicted = frozenset(evicted)
        whole = basis != self._basis
        if whole:
            self._reset(basis)
            touched: Iterable[tuple[str, Counted | None]] = counted()
            self._evicted = evicted
        else:
            uids = self._touched | (evicted ^ self._evicted)
            self._evicted = evicted
            while self._maturing and self._maturing[0][0] <= now:
                at, uid = heapq.heappop(self._maturing)
                if self._young.get(uid) == at:
                    uids.add(uid)
            touched = [(uid, counted_one(uid)) for uid in uids]
        self._touched = set()
        gangs: set[str] = set()
        later: list[tuple[float, str]] = []
        lone_ones: list[Workload] = []
        for uid, entry in touched:
            self._forget(uid, gangs)
            m = make(uid, entry)
            if m is not None:
                single = self._place(uid, m, now, min_runtime, gangs, later)
                if single is not None:
                    lone_ones.append(single)
        if whole:
            self.workloads = Workloads(lone_ones)  # in one go: the same as adding each, faster
        else:
            for single in lone_ones:
                self.workloads.add(single)
        for item in later:
            heapq.heappush(self._maturing, item)
        for key in gangs:
            self.workloads.discard(key)
            gang_uids = self._gangs.get(key)
            if not gang_uids:
                self._gangs.pop(key, None)
            elif not any(uid in self._young for uid in gang_uids):
                self.workloads.add(gang(key, (self._members[uid] for uid in gang_uids), evicted))
        return self.workloads

    def _reset(self, basis: tuple[Any, ...]) -> None:
        self.rebuilds += 1
        self._basis = basis
        self.workloads = Workloads()
        self._members.clear()
        self._young.clear()
        self._maturing.clear()
        self._gangs.clear()
        self._by_lookup.clear()

    def _forget(self, uid: str, gangs: set[str]) -> None:
        old = self._members.pop(uid, None)
        if old is None:
            return
        self._young.pop(uid, None)
        for name in old.lookups:
            if name == uid:
                continue
            readers = self._by_lookup.get(name)
            if readers is not None:
                readers.discard(uid)
                if not readers:
                    del self._by_lookup[name]
        group = old.pod.pod_group
        if group:
            self._gangs.get(group, set()).discard(uid)
            gangs.add(group)
        else:
            self.workloads.discard(uid)

    def _place(
        self, uid: str, m: Member, now: float, min_runtime: float, gangs: set[str], later: list[tuple[float, str]]
    ) -> Workload | None:
        """Record a member; its workload if it is a lone pod old enough to be a victim."""
        self._members[uid] = m
        for name in m.lookups:
            if name != uid:  # a pod is found by its own UID without this map
                self._by_lookup.setdefault(name, set()).add(uid)
        admitted = m.single.admitted_at
        if is_young(admitted, now, min_runtime):
            # Looked at again once old enough (or, inexact in floating point, at the first refresh after).
            at = admitted + min_runtime if admitted > 0 else math.inf
            self._young[uid] = at
            if at != math.inf:
                later.append((at, uid))
        group = m.pod.pod_group
        if group:
            self._gangs.setdefault(group, set()).add(uid)
            gangs.add(group)
            return None
        return None if uid in self._young else lone(m, self._evicted)
