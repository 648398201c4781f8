"""When Kueue admitted each Workload (``queues.watchKueue: true``): the time preemption and reclaim
order candidates by, as Kueue does ("most recently admitted first").

A Workload's admission time is its QuotaReserved=True condition's lastTransitionTime, else its
Admitted=True one. A pod finds its Workload through the Workload's ownerReferences (the pod itself,
for Kueue's plain-pod integration, or the pod's controller, e.g. a Job) or, for a pod group, by the
group's name (Kueue names the group's Workload after ``kueue.x-k8s.io/pod-group-name``). Only these
times are kept; the store never changes what quota counts, so an update costs no recount.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

from app.cluster.kueue_watch import KUEUE_API, KUEUE_NOT_SERVED
from app.cluster.objects import parse_time
from app.cluster.reflector import Resource
from scoring.framework import PodInfo

__all__ = ["WORKLOADS_SOURCE", "WorkloadAdmissions", "kueue_group_name"]

WORKLOADS_SOURCE = "workloads.kueue.x-k8s.io"
_CONDITIONS = ("QuotaReserved", "Admitted")  # in order of preference
LOG_LENGTH = 4096  # admission changes remembered for ``changes_since``


def _admission_time(obj: Mapping[str, Any]) -> float | None:
    status = obj.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    found: dict[str, float] = {}
    for condition in conditions if isinstance(conditions, list) else ():
        if isinstance(condition, Mapping) and condition.get("status") == "True":
            at = parse_time(condition.get("lastTransitionTime"))
            if at is not None and condition.get("type") in _CONDITIONS:
                found[str(condition["type"])] = at
    return next((found[c] for c in _CONDITIONS if c in found), None)


class WorkloadAdmissions:
    """Admission time per Workload, reachable by owner UID and by (namespace, name)."""

    def __init__(self) -> None:
        self._by_key: dict[str, tuple[float, tuple[str, ...]]] = {}  # ns/name -> (time, owner UIDs)
        # owner UID -> (the Workload it was last set by, its time): Kueue may create a Job's new Workload
        # before it deletes the old one, and deleting the old one must not drop the new one's time.
        self._by_owner: dict[str, tuple[str, float]] = {}
        self.listed = False
        self.version = 0  # bumped when any admission time may have changed (for whoever caches them)
        # (version, what changed at it: owner UIDs and the Workload's ns/name), the last LOG_LENGTH changes;
        # ``changes_since`` answers from it. A relist starts it anew (it may change anything).
        self._log: deque[tuple[int, tuple[str, ...]]] = deque(maxlen=LOG_LENGTH)
        self._log_from = 0  # the log holds every change after this version

    def resource(self) -> Resource:
        return Resource(
            name=WORKLOADS_SOURCE,
            path=f"{KUEUE_API}/workloads",
            field_selector="",
            replace=lambda _cache, items: self.replace(items),
            upsert=lambda _cache, obj: self.upsert(obj),
            delete=lambda _cache, obj: self.delete(obj),
            not_found=KUEUE_NOT_SERVED,
        )

    @staticmethod
    def _key(obj: Mapping[str, Any]) -> str:
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        return f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"

    def replace(self, items: list[dict[str, Any]]) -> None:
        self._by_key.clear()
        self._by_owner.clear()
        for obj in items:
            self.upsert(obj)
        self.listed = True
        self.version += 1
        self._log.clear()
        self._log_from = self.version

    def upsert(self, obj: Mapping[str, Any]) -> None:
        key, at = self._key(obj), _admission_time(obj)
        meta = obj.get("metadata")
        refs = meta.get("ownerReferences") if isinstance(meta, Mapping) else None
        owners = tuple(
            str(r["uid"]) for r in (refs if isinstance(refs, list) else ()) if isinstance(r, Mapping) and r.get("uid")
        )
        if at is not None and self._by_key.get(key) == (at, owners):
            # Kueue updates a Workload's status often; this update moved no admission time. (Nor does it
            # take the owner back from a newer Workload of the same owner.)
            return
        self.delete(obj)
        if at is None:
            return  # not admitted (yet, or any more): the pods' own times apply
        self._by_key[key] = (at, owners)
        for uid in owners:
            self._by_owner[uid] = (key, at)
        self._changed(key, owners)

    def delete(self, obj: Mapping[str, Any]) -> None:
        key = self._key(obj)
        old = self._by_key.pop(key, None)
        if old is None:
            return
        for uid in old[1]:
            if self._by_owner.get(uid, ("", 0.0))[0] == key:
                del self._by_owner[uid]
        self._changed(key, old[1])

    def _changed(self, key: str, owners: tuple[str, ...]) -> None:
        self.version += 1
        if len(self._log) == self._log.maxlen:
            self._log_from = self._log[0][0]
        self._log.append((self.version, (key, *owners)))

    def changes_since(self, version: int) -> set[str] | None:
        """What the admission times changed by after ``version``: the owner UIDs and Workload keys
        (ns/name) that ``admitted_at`` looks up; None when the log no longer reaches that far back."""
        if version < self._log_from:
            return None
        changed: set[str] = set()
        for at, names in reversed(self._log):
            if at <= version:
                break
            changed.update(names)
        return changed

    @staticmethod
    def lookups(pod: PodInfo, group_name: str = "") -> tuple[str, ...]:
        """What ``admitted_at`` looks the pod up by (as ``changes_since`` names them)."""
        names = (pod.uid, pod.owner_uid) if pod.owner_uid else (pod.uid,)
        return (*names, f"{pod.namespace}/{group_name}") if group_name else names

    def admitted_at(self, pod: PodInfo, group_name: str = "") -> float | None:
        """The admission time of the pod's Workload, or None when no admitted Workload is known."""
        for uid in (pod.uid, pod.owner_uid):
            if uid and uid in self._by_owner:
                return self._by_owner[uid][1]
        if group_name:
            found = self._by_key.get(f"{pod.namespace}/{group_name}")
            if found is not None:
                return found[0]
        return None


def kueue_group_name(pod: PodInfo) -> str:
    """The Kueue pod-group name of a pod ("" when it is not in one)."""
    prefix = "kueue:"
    return pod.pod_group.split("/", 1)[1] if pod.pod_group.startswith(prefix) else ""
