"""The ``queues:`` section as typed objects: ResourceFlavors, the Kueue quota tree, LocalQueues, KAI
queues, fair-sharing options and Kueue's deviceClassMappings; every error names its field path.

A file is checked strictly; objects read from the API server leniently (``strict=False``), as Kueue
itself treats them: a dangling reference makes a queue inactive rather than the section invalid.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fairshare.errors import QueueConfigError
from fairshare.flavor import ResourceFlavor, parse_resource_flavor
from fairshare.kai import KaiQueue, parse_kai_queue
from fairshare.preemption import DEFAULT_STRATEGIES, LESS_THAN_INITIAL_SHARE, LESS_THAN_OR_EQUAL_TO_FINAL_SHARE
from fairshare.quota import LocalQueue, QuotaTree, build_tree, parse_cluster_queue, parse_cohort, parse_local_queue

__all__ = [
    "KAI_QUEUE_LABEL",
    "KUEUE_QUEUE_LABEL",
    "RECLAIM_MODES",
    "QueueConfig",
    "ReclaimConfig",
    "parse_queue_config",
]

KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KAI_QUEUE_LABEL = "kai.scheduler/queue"
_SECTION_KEYS = frozenset(
    {
        "resourceFlavors",
        "cohorts",
        "clusterQueues",
        "localQueues",
        "kaiQueues",
        "fairSharing",
        "watchKueue",
        "deviceClassMappings",
        "reclaim",
    }
)
_STRATEGY_LISTS = (
    (LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,),
    (LESS_THAN_INITIAL_SHARE,),
    (LESS_THAN_OR_EQUAL_TO_FINAL_SHARE, LESS_THAN_INITIAL_SHARE),
)


RECLAIM_MODES = ("off", "dry-run", "on")
_RECLAIM_KEYS = frozenset(
    {"mode", "evictionsPerMinute", "minRuntimeSeconds", "intervalSeconds", "retryAfterSeconds", "leaderLease"}
)


@dataclass(frozen=True, slots=True)
class ReclaimConfig:
    """``queues.reclaim``: the reclaimer that gives lent quota back (off by default: it evicts pods)."""

    mode: str = "off"  # off | dry-run (decide and report, evict nothing) | on
    evictions_per_minute: int = 10
    min_runtime_seconds: float = 0.0  # a pod younger than this (since its binding) is never a victim
    interval_seconds: float = 5.0
    retry_after_seconds: float = 30.0  # an eviction refused (PDB 429, API error) is tried again after this
    leader_lease: str = "kube-system/gpu-scheduler"  # namespace/name; "" runs in every replica


@dataclass(frozen=True, slots=True)
class QueueConfig:
    flavors: Mapping[str, ResourceFlavor]
    tree: QuotaTree
    local_queues: Mapping[tuple[str, str], LocalQueue]
    kai_queues: tuple[KaiQueue, ...] = ()
    preemption_strategies: tuple[str, ...] = DEFAULT_STRATEGIES
    priority_based_fair_share: bool = False
    k_value: float = 1.0
    watch_kueue: bool = False  # read Kueue's own objects from the API server (the service's Kueue watch)
    # ClusterQueues that cannot admit (missing flavor, or missing altogether): name -> reason.
    inactive: Mapping[str, str] = field(default_factory=dict)
    # Kueue's resources.deviceClassMappings: DeviceClass name -> the resource its devices count as.
    device_classes: Mapping[str, str] = field(default_factory=dict)
    reclaim: ReclaimConfig = ReclaimConfig()

    @property
    def flavor_label_keys(self) -> tuple[str, ...]:
        return tuple(sorted({k for f in self.flavors.values() for k in f.node_labels}))

    def weight(self, flavor: str, resource: str) -> float:
        f = self.flavors.get(flavor)
        return f.weight(resource) if f is not None else 1.0

    def cluster_queue_for(self, namespace: str, labels: Mapping[str, str]) -> str | None:
        """The pod's active ClusterQueue (Kueue label), or None: no LocalQueue, or an inactive queue."""
        lq = self.local_queues.get((namespace, labels.get(KUEUE_QUEUE_LABEL, "")))
        return lq.cluster_queue if lq is not None and lq.cluster_queue in self.tree.cluster_queues else None

    def why_not_admitting(self, namespace: str, labels: Mapping[str, str]) -> str:
        """Why a pod labelled for a queue has no active ClusterQueue ("" when it has one)."""
        name = labels.get(KUEUE_QUEUE_LABEL, "")
        lq = self.local_queues.get((namespace, name))
        if lq is None:
            return f"LocalQueue {namespace}/{name} does not exist"
        if lq.cluster_queue in self.tree.cluster_queues:
            return ""
        return self.inactive.get(lq.cluster_queue, f"ClusterQueue {lq.cluster_queue} does not exist")


def _items(raw: Mapping[str, Any], key: str) -> list[Any]:
    value = raw.get(key) or []
    if not isinstance(value, list):
        raise QueueConfigError(f"queues.{key}: must be a list")
    return value


def parse_queue_config(raw: Any, *, strict: bool = True) -> QueueConfig:
    """Parse and validate the ``queues:`` section; every error names its field path.

    ``strict=False`` is Kueue's own behaviour for objects read from the API server: a ClusterQueue
    naming a missing ResourceFlavor, or a LocalQueue naming a missing ClusterQueue, is *inactive*
    (its pods are rejected with the reason) instead of making the whole section invalid, so one
    dangling object cannot freeze every queue. A file is checked strictly: a typo there is an error.
    """
    if not isinstance(raw, Mapping):
        raise QueueConfigError("queues: must be an object")
    unknown = sorted(set(raw) - _SECTION_KEYS)
    if unknown:
        raise QueueConfigError(f"queues: unknown field(s) {unknown} (known: {sorted(_SECTION_KEYS)})")
    watch_kueue = raw.get("watchKueue", False)
    if not isinstance(watch_kueue, bool):
        raise QueueConfigError("queues.watchKueue: must be true or false")
    flavors: dict[str, ResourceFlavor] = {}
    for i, r in enumerate(_items(raw, "resourceFlavors")):
        f = parse_resource_flavor(r, f"queues.resourceFlavors[{i}]")
        if f.name in flavors:
            raise QueueConfigError(f"queues.resourceFlavors[{i}].metadata.name: duplicate {f.name}")
        flavors[f.name] = f
    cqs = [parse_cluster_queue(r, f"queues.clusterQueues[{i}]") for i, r in enumerate(_items(raw, "clusterQueues"))]
    seen: set[str] = set()
    inactive: dict[str, str] = {}
    for i, cq in enumerate(cqs):
        if cq.name in seen:
            raise QueueConfigError(f"queues.clusterQueues[{i}].metadata.name: duplicate {cq.name}")
        seen.add(cq.name)
        for gi, group in enumerate(cq.resource_groups):
            for fi, fq in enumerate(group.flavors):
                if fq.name in flavors or cq.name in inactive:
                    continue
                if strict:
                    raise QueueConfigError(
                        f"queues.clusterQueues[{i}].spec.resourceGroups[{gi}].flavors[{fi}].name: "
                        f"unknown ResourceFlavor {fq.name}"
                    )
                inactive[cq.name] = f"ClusterQueue {cq.name} is inactive: ResourceFlavor {fq.name} does not exist"
    cqs = [cq for cq in cqs if cq.name not in inactive]
    cohorts = [parse_cohort(r, f"queues.cohorts[{i}]") for i, r in enumerate(_items(raw, "cohorts"))]
    local: dict[tuple[str, str], LocalQueue] = {}
    for i, r in enumerate(_items(raw, "localQueues")):
        lq = parse_local_queue(r, f"queues.localQueues[{i}]")
        if lq.cluster_queue not in seen:
            if strict:
                raise QueueConfigError(
                    f"queues.localQueues[{i}].spec.clusterQueue: unknown ClusterQueue {lq.cluster_queue}"
                )
            inactive.setdefault(lq.cluster_queue, f"ClusterQueue {lq.cluster_queue} does not exist")
        local[(lq.namespace, lq.name)] = lq
    kai = tuple(
        parse_kai_queue(r, f"queues.kaiQueues[{i}]", creation=float(i)) for i, r in enumerate(_items(raw, "kaiQueues"))
    )
    _check_kai_tree(kai)
    fs = raw.get("fairSharing") or {}
    if not isinstance(fs, Mapping):
        raise QueueConfigError("queues.fairSharing: must be an object")
    strategies = tuple(fs.get("preemptionStrategies") or DEFAULT_STRATEGIES)
    if strategies not in _STRATEGY_LISTS:
        raise QueueConfigError(
            "queues.fairSharing.preemptionStrategies: must be [LessThanOrEqualToFinalShare], "
            "[LessThanInitialShare] or [LessThanOrEqualToFinalShare, LessThanInitialShare]"
        )
    pbfs = fs.get("priorityBasedFairShare", False)
    if not isinstance(pbfs, bool):
        raise QueueConfigError("queues.fairSharing.priorityBasedFairShare: must be true or false")
    k_value = fs.get("kValue", 1.0)
    if isinstance(k_value, bool) or not isinstance(k_value, int | float):
        raise QueueConfigError("queues.fairSharing.kValue: must be a number")
    return QueueConfig(
        flavors,
        build_tree(cqs, cohorts),
        local,
        kai,
        strategies,
        pbfs,
        float(k_value),
        watch_kueue,
        inactive,
        _device_class_mappings(raw.get("deviceClassMappings")),
        parse_reclaim(raw.get("reclaim")),
    )


def parse_reclaim(raw: Any) -> ReclaimConfig:
    """``queues.reclaim``; every error names its field."""
    if raw is None:
        return ReclaimConfig()
    if not isinstance(raw, Mapping):
        raise QueueConfigError("queues.reclaim: must be an object")
    unknown = sorted(set(raw) - _RECLAIM_KEYS)
    if unknown:
        raise QueueConfigError(f"queues.reclaim: unknown field(s) {unknown} (known: {sorted(_RECLAIM_KEYS)})")
    default = ReclaimConfig()
    mode = raw.get("mode", default.mode)
    if mode not in RECLAIM_MODES:
        raise QueueConfigError(f"queues.reclaim.mode: must be one of {', '.join(RECLAIM_MODES)} (got {mode!r})")

    def number(key: str, value: float, *, minimum: float, integer: bool = False) -> float:
        got = raw.get(key, value)
        kind = int if integer else int | float
        if isinstance(got, bool) or not isinstance(got, kind):
            raise QueueConfigError(f"queues.reclaim.{key}: must be {'an integer' if integer else 'a number'}")
        if got < minimum:
            raise QueueConfigError(f"queues.reclaim.{key}: must be >= {minimum:g} (got {got})")
        return float(got)

    lease = raw.get("leaderLease", default.leader_lease)
    if not isinstance(lease, str) or (lease and len(lease.split("/")) != 2) or (lease and not all(lease.split("/"))):
        raise QueueConfigError('queues.reclaim.leaderLease: must be "namespace/name" or "" (every replica reclaims)')
    return ReclaimConfig(
        mode=mode,
        evictions_per_minute=int(number("evictionsPerMinute", default.evictions_per_minute, minimum=1, integer=True)),
        min_runtime_seconds=number("minRuntimeSeconds", default.min_runtime_seconds, minimum=0),
        interval_seconds=number("intervalSeconds", default.interval_seconds, minimum=0.1),
        retry_after_seconds=number("retryAfterSeconds", default.retry_after_seconds, minimum=0),
        leader_lease=lease,
    )


def _device_class_mappings(raw: Any) -> dict[str, str]:
    """``[{name, deviceClassNames}]`` (Kueue's shape) as DeviceClass -> resource name."""
    if raw is None:
        return {}
    if not isinstance(raw, list):
        raise QueueConfigError("queues.deviceClassMappings: must be a list")
    out: dict[str, str] = {}
    for i, item in enumerate(raw):
        path = f"queues.deviceClassMappings[{i}]"
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str) or not item["name"]:
            raise QueueConfigError(f"{path}.name: required (the resource the devices count as, e.g. nvidia.com/gpu)")
        classes = item.get("deviceClassNames")
        if not isinstance(classes, list) or not classes or not all(isinstance(c, str) and c for c in classes):
            raise QueueConfigError(f"{path}.deviceClassNames: must be a non-empty list of DeviceClass names")
        for j, name in enumerate(classes):
            if name in out:
                raise QueueConfigError(f"{path}.deviceClassNames[{j}]: DeviceClass {name} is mapped twice")
            out[name] = item["name"]
    return out


def _check_kai_tree(queues: tuple[KaiQueue, ...]) -> None:
    """Unique names, parents that exist, no cycles: KAI divides top-down along this tree."""
    index = {}
    for i, q in enumerate(queues):
        if q.name in index:
            raise QueueConfigError(f"queues.kaiQueues[{i}].metadata.name: duplicate {q.name}")
        index[q.name] = i
    parents = {q.name: q.parent for q in queues}
    for i, q in enumerate(queues):
        if q.parent is not None and q.parent not in parents:
            raise QueueConfigError(f"queues.kaiQueues[{i}].spec.parentQueue: unknown queue {q.parent}")
        seen, node = {q.name}, q.parent
        while node is not None:
            if node in seen:
                raise QueueConfigError(f"queues.kaiQueues[{i}].spec.parentQueue: cycle through {node}")
            seen.add(node)
            node = parents[node]
