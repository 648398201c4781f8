"""PodGroups: which pods form a gang, how many of them must run together, and where.

Three sources, read into one ``GroupPolicy`` per group:

- Kubernetes 1.36 ``scheduling.k8s.io/v1alpha2`` PodGroups (``spec.schedulingPolicy.gang.minCount``,
  ``spec.schedulingConstraints.topology[0].key``); pods join with ``spec.schedulingGroup.podGroupName``.
- The scheduler-plugins coscheduling ``scheduling.x-k8s.io/v1alpha1`` PodGroup (``spec.minMember``,
  ``spec.scheduleTimeoutSeconds``); pods join with the label ``scheduling.x-k8s.io/pod-group``.
- Kueue pod groups: the label ``kueue.x-k8s.io/pod-group-name`` and the annotation
  ``kueue.x-k8s.io/pod-group-total-count`` on each pod (no object).

Topology requests written by Kueue's topology-aware scheduling ride on the pods
(``kueue.x-k8s.io/podset-required-topology`` / ``-preferred-topology``) whatever the group's source.
The store also indexes the cache's pods by group, so a group's members are found without a scan.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from app.cluster.objects import ObjectError

__all__ = [
    "COSCHEDULING",
    "COSCHEDULING_NOT_SERVED",
    "COSCHEDULING_PATH",
    "KUEUE",
    "PODGROUP",
    "PODGROUPS_NOT_SERVED",
    "PODGROUPS_PATH",
    "GroupPolicy",
    "PodGroupStore",
    "coscheduling_from_obj",
    "group_source",
    "podgroup_from_obj",
    "policy_from_obj",
]

PODGROUP = "podgroup"  # scheduling.k8s.io/v1alpha2 PodGroup
COSCHEDULING = "coscheduling"  # scheduling.x-k8s.io/v1alpha1 PodGroup
KUEUE = "kueue"  # a Kueue pod group: label and total-count annotation on the pods
PODGROUPS_PATH = "/apis/scheduling.k8s.io/v1alpha2/podgroups"
COSCHEDULING_PATH = "/apis/scheduling.x-k8s.io/v1alpha1/podgroups"
PODGROUPS_NOT_SERVED = (
    "scheduling.k8s.io/v1alpha2 podgroups not served (GenericWorkload off, or the API group not enabled)"
)
COSCHEDULING_NOT_SERVED = "scheduling.x-k8s.io/v1alpha1 podgroups not served (the coscheduling CRD is not installed)"


@dataclass(frozen=True, slots=True)
class GroupPolicy:
    """What a PodGroup object asks: ``min_count`` members at once (0: a basic group, no gang), the
    hold timeout it names (None: the extender's default) and a required topology key ("": none)."""

    key: str  # "<source>:<namespace>/<name>", as PodInfo.pod_group
    min_count: int
    timeout_seconds: float | None = None
    topology_key: str = ""
    resource_version: str = ""


def group_source(key: str) -> str:
    """The source part of a group key ("podgroup", "coscheduling", "kueue", "kai")."""
    return key.split(":", 1)[0]


def _meta(obj: Mapping[str, Any], what: str) -> tuple[str, str, str]:
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping) or not isinstance(metadata.get("name"), str) or not metadata["name"]:
        raise ObjectError(f"{what}.metadata.name is missing")
    return str(metadata.get("namespace") or "default"), metadata["name"], str(metadata.get("resourceVersion") or "")


def _spec(obj: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    spec = obj.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise ObjectError(f"{where}.spec: must be an object")
    return spec


def podgroup_from_obj(obj: Mapping[str, Any]) -> GroupPolicy:
    """A ``scheduling.k8s.io/v1alpha2`` PodGroup."""
    namespace, name, version = _meta(obj, "PodGroup")
    where = f"PodGroup {namespace}/{name}"
    spec = _spec(obj, where)
    policy = spec.get("schedulingPolicy") or {}
    gang = policy.get("gang") if isinstance(policy, Mapping) else None
    min_count = 0
    if gang is not None:
        count = gang.get("minCount") if isinstance(gang, Mapping) else None
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ObjectError(f"{where}: spec.schedulingPolicy.gang.minCount must be an integer >= 1, got {count!r}")
        min_count = count
    topology = ""
    constraints = spec.get("schedulingConstraints") or {}
    terms = constraints.get("topology") if isinstance(constraints, Mapping) else None
    if isinstance(terms, list) and terms:
        key = terms[0].get("key") if isinstance(terms[0], Mapping) else None
        if not isinstance(key, str) or not key:
            raise ObjectError(f"{where}: spec.schedulingConstraints.topology[0].key must be a label key")
        topology = key
    return GroupPolicy(f"{PODGROUP}:{namespace}/{name}", min_count, None, topology, version)


def coscheduling_from_obj(obj: Mapping[str, Any]) -> GroupPolicy:
    """A scheduler-plugins ``scheduling.x-k8s.io/v1alpha1`` PodGroup."""
    namespace, name, version = _meta(obj, "PodGroup")
    where = f"PodGroup {namespace}/{name} (scheduling.x-k8s.io)"
    spec = _spec(obj, where)
    count = spec.get("minMember", 0)
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ObjectError(f"{where}: spec.minMember must be an integer >= 0, got {count!r}")
    timeout = spec.get("scheduleTimeoutSeconds")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0):
        raise ObjectError(f"{where}: spec.scheduleTimeoutSeconds must be a number > 0, got {timeout!r}")
    return GroupPolicy(
        f"{COSCHEDULING}:{namespace}/{name}", count, None if timeout is None else float(timeout), "", version
    )


def policy_from_obj(obj: Mapping[str, Any]) -> GroupPolicy:
    """A PodGroup of either API, by its apiVersion (snapshot files hold both)."""
    version = str(obj.get("apiVersion") or "")
    if version.startswith("scheduling.x-k8s.io/"):
        return coscheduling_from_obj(obj)
    if version.startswith("scheduling.k8s.io/"):
        return podgroup_from_obj(obj)
    raise ObjectError(
        f"PodGroup: unknown apiVersion {version!r} (scheduling.k8s.io/v1alpha2 or scheduling.x-k8s.io/v1alpha1)"
    )


class PodGroupStore:
    """The PodGroup objects of both APIs and the cache's pods by group. ``listeners`` hear of every
    group whose policy changed or was deleted, or that lost a member (the gang participant drops its
    plan then); a member joining changes no plan."""

    def __init__(self) -> None:
        self.policies: dict[str, GroupPolicy] = {}
        self.members: dict[str, set[str]] = {}  # group key -> pod UIDs in the cache
        self.listeners: list[Callable[[str], None]] = []

    def _changed(self, key: str) -> None:
        for listener in self.listeners:
            listener(key)

    # ------------------------------------------------------------------ objects
    def upsert(self, policy: GroupPolicy) -> None:
        previous = self.policies.get(policy.key)
        self.policies[policy.key] = policy
        if previous is None or (previous.min_count, previous.timeout_seconds, previous.topology_key) != (
            policy.min_count,
            policy.timeout_seconds,
            policy.topology_key,
        ):
            self._changed(policy.key)

    def delete(self, key: str) -> None:
        if self.policies.pop(key, None) is not None:
            self._changed(key)

    def replace(self, source: str, policies: Iterable[GroupPolicy]) -> None:
        """A (re)list of one source: its whole set of groups."""
        fresh = {p.key: p for p in policies}
        for key in [k for k in self.policies if group_source(k) == source and k not in fresh]:
            self.delete(key)
        for policy in fresh.values():
            self.upsert(policy)

    # ------------------------------------------------------------------ members
    def member_changed(self, uid: str, before: str, after: str) -> None:
        """A pod's group changed (joined, left, or the pod came or went): keep the index."""
        if before == after:
            return
        if before:
            members = self.members.get(before)
            if members is not None:
                members.discard(uid)
                if not members:
                    del self.members[before]
            self._changed(before)
        if after:
            self.members.setdefault(after, set()).add(uid)

    def members_of(self, key: str) -> frozenset[str]:
        return frozenset(self.members.get(key, ()))
