"""Queue configuration (the ``queues:`` section) and incremental per-queue usage accounting.

Adapter side of ``fairshare/``: parses the Kueue/KAI-shaped objects from the config file into the
pure model, resolves a pod's queue from its labels, a node's flavor from its labels, and keeps
per-ClusterQueue usage up to date one pod event at a time (the cache calls ``account`` through
``app.fairness.Fairness.attach``), so the hot path only reads.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from allocator.types import ALLOCATION_MODE_EXACT_COUNT, ResourceClaim
from app.cache_events import Counted
from fairshare.drs import DominantResourceShare, dominant_resource_share
from fairshare.flavor import ConfigError, ResourceFlavor, node_matches_flavor, parse_resource_flavor
from fairshare.kai import KaiQueue, parse_kai_queue
from fairshare.preemption import DEFAULT_STRATEGIES, LESS_THAN_INITIAL_SHARE, LESS_THAN_OR_EQUAL_TO_FINAL_SHARE
from fairshare.quota import (
    FlavorResource,
    LocalQueue,
    QuotaTree,
    TreeUsage,
    Usage,
    build_tree,
    cq_key,
    parse_cluster_queue,
    parse_cohort,
    parse_local_queue,
)
from scoring.framework import PodInfo

__all__ = [
    "KAI_QUEUE_LABEL",
    "KUEUE_QUEUE_LABEL",
    "QueueConfig",
    "QueueUsage",
    "parse_queue_config",
    "queue_requests",
    "queues_view",
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
    }
)
_STRATEGY_LISTS = (
    (LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,),
    (LESS_THAN_INITIAL_SHARE,),
    (LESS_THAN_OR_EQUAL_TO_FINAL_SHARE, LESS_THAN_INITIAL_SHARE),
)


@dataclass(frozen=True, slots=True)
class QueueConfig:
    flavors: Mapping[str, ResourceFlavor]
    tree: QuotaTree
    local_queues: Mapping[tuple[str, str], LocalQueue]
    kai_queues: tuple[KaiQueue, ...] = ()
    preemption_strategies: tuple[str, ...] = DEFAULT_STRATEGIES
    priority_based_fair_share: bool = False
    k_value: float = 1.0
    watch_kueue: bool = False  # read Kueue's own objects from the API server (app/kueue_watch.py)
    # ClusterQueues that cannot admit (missing flavor, or missing altogether): name -> reason.
    inactive: Mapping[str, str] = field(default_factory=dict)
    # Kueue's resources.deviceClassMappings: DeviceClass name -> the resource its devices count as.
    device_classes: Mapping[str, str] = field(default_factory=dict)

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

    def flavor_for(self, cluster_queue: str, resource: str, node_labels: Mapping[str, str]) -> str | None:
        """First flavor of the queue's group for ``resource`` whose nodeLabels the node carries."""
        cq = self.tree.cluster_queues.get(cluster_queue)
        if cq is None:
            return None
        for name in cq.flavors_for(resource):
            flavor = self.flavors.get(name)
            if flavor is not None and node_matches_flavor(node_labels, flavor):
                return name
        return None


def _items(raw: Mapping[str, Any], key: str) -> list[Any]:
    value = raw.get(key) or []
    if not isinstance(value, list):
        raise ConfigError(f"queues.{key}: must be a list")
    return value


def parse_queue_config(raw: Any, *, strict: bool = True) -> QueueConfig:
    """Parse and validate the ``queues:`` section; every error names its field path.

    ``strict=False`` is Kueue's own behaviour for objects read from the API server: a ClusterQueue
    naming a missing ResourceFlavor, or a LocalQueue naming a missing ClusterQueue, is *inactive*
    (its pods are rejected with the reason) instead of making the whole section invalid, so one
    dangling object cannot freeze every queue. A file is checked strictly: a typo there is an error.
    """
    if not isinstance(raw, Mapping):
        raise ConfigError("queues: must be an object")
    unknown = sorted(set(raw) - _SECTION_KEYS)
    if unknown:
        raise ConfigError(f"queues: unknown field(s) {unknown} (known: {sorted(_SECTION_KEYS)})")
    watch_kueue = raw.get("watchKueue", False)
    if not isinstance(watch_kueue, bool):
        raise ConfigError("queues.watchKueue: must be true or false")
    flavors: dict[str, ResourceFlavor] = {}
    for i, r in enumerate(_items(raw, "resourceFlavors")):
        f = parse_resource_flavor(r, f"queues.resourceFlavors[{i}]")
        if f.name in flavors:
            raise ConfigError(f"queues.resourceFlavors[{i}].metadata.name: duplicate {f.name}")
        flavors[f.name] = f
    cqs = [parse_cluster_queue(r, f"queues.clusterQueues[{i}]") for i, r in enumerate(_items(raw, "clusterQueues"))]
    seen: set[str] = set()
    inactive: dict[str, str] = {}
    for i, cq in enumerate(cqs):
        if cq.name in seen:
            raise ConfigError(f"queues.clusterQueues[{i}].metadata.name: duplicate {cq.name}")
        seen.add(cq.name)
        for gi, group in enumerate(cq.resource_groups):
            for fi, fq in enumerate(group.flavors):
                if fq.name in flavors or cq.name in inactive:
                    continue
                if strict:
                    raise ConfigError(
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
                raise ConfigError(f"queues.localQueues[{i}].spec.clusterQueue: unknown ClusterQueue {lq.cluster_queue}")
            inactive.setdefault(lq.cluster_queue, f"ClusterQueue {lq.cluster_queue} does not exist")
        local[(lq.namespace, lq.name)] = lq
    kai = tuple(
        parse_kai_queue(r, f"queues.kaiQueues[{i}]", creation=float(i)) for i, r in enumerate(_items(raw, "kaiQueues"))
    )
    _check_kai_tree(kai)
    fs = raw.get("fairSharing") or {}
    if not isinstance(fs, Mapping):
        raise ConfigError("queues.fairSharing: must be an object")
    strategies = tuple(fs.get("preemptionStrategies") or DEFAULT_STRATEGIES)
    if strategies not in _STRATEGY_LISTS:
        raise ConfigError(
            "queues.fairSharing.preemptionStrategies: must be [LessThanOrEqualToFinalShare], "
            "[LessThanInitialShare] or [LessThanOrEqualToFinalShare, LessThanInitialShare]"
        )
    pbfs = fs.get("priorityBasedFairShare", False)
    if not isinstance(pbfs, bool):
        raise ConfigError("queues.fairSharing.priorityBasedFairShare: must be true or false")
    k_value = fs.get("kValue", 1.0)
    if isinstance(k_value, bool) or not isinstance(k_value, int | float):
        raise ConfigError("queues.fairSharing.kValue: must be a number")
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
    )


def _device_class_mappings(raw: Any) -> dict[str, str]:
    """``[{name, deviceClassNames}]`` (Kueue's shape) as DeviceClass -> resource name."""
    if raw is None:
        return {}
    if not isinstance(raw, list):
        raise ConfigError("queues.deviceClassMappings: must be a list")
    out: dict[str, str] = {}
    for i, item in enumerate(raw):
        path = f"queues.deviceClassMappings[{i}]"
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str) or not item["name"]:
            raise ConfigError(f"{path}.name: required (the resource the devices count as, e.g. nvidia.com/gpu)")
        classes = item.get("deviceClassNames")
        if not isinstance(classes, list) or not classes or not all(isinstance(c, str) and c for c in classes):
            raise ConfigError(f"{path}.deviceClassNames: must be a non-empty list of DeviceClass names")
        for j, name in enumerate(classes):
            if name in out:
                raise ConfigError(f"{path}.deviceClassNames[{j}]: DeviceClass {name} is mapped twice")
            out[name] = item["name"]
    return out


def queue_requests(
    pod: PodInfo, config: QueueConfig, claims: Mapping[str, ResourceClaim]
) -> tuple[dict[str, int], str]:
    """What a pod asks of its queue: its container requests plus, per Kueue's deviceClassMappings,
    the devices its ResourceClaims request from a mapped DeviceClass (ExactCount's count, or what
    was allocated). The second value says why the devices cannot be counted ("" when they can)."""
    requests = dict(pod.resources.requests)
    if not config.device_classes or not pod.claims:
        return requests, ""
    for ref in pod.claims:
        claim = claims.get(f"{pod.namespace}/{ref.claim}")
        if claim is None:
            continue  # not created yet: the DRA check holds the pod back anyway
        allocated: dict[str, int] = {}
        for result in claim.allocation.devices if claim.allocation is not None else ():
            allocated[result.request] = allocated.get(result.request, 0) + 1
        for request in claim.devices.requests:
            if request.exactly is not None:
                choices = [
                    (
                        request.name,
                        request.exactly.device_class_name,
                        request.exactly.allocation_mode,
                        request.exactly.count,
                    )
                ]
            else:  # firstAvailable: the alternative allocated, or else the first (preferred) one
                choices = [
                    (f"{request.name}/{sub.name}", sub.device_class_name, sub.allocation_mode, sub.count)
                    for sub in request.first_available
                ]
                chosen = [c for c in choices if c[0] in allocated]
                choices = chosen or choices[:1]
            for name, device_class, mode, count in choices:
                resource = config.device_classes.get(device_class)
                if resource is None:
                    continue
                if name in allocated:
                    count = allocated[name]
                elif mode != ALLOCATION_MODE_EXACT_COUNT:
                    return requests, (
                        f"ResourceClaim {claim.key} request {name}: allocationMode {mode} of mapped "
                        f"DeviceClass {device_class} cannot be counted against a queue before allocation"
                    )
                requests[resource] = requests.get(resource, 0) + count
    return requests, ""


def _check_kai_tree(queues: tuple[KaiQueue, ...]) -> None:
    """Unique names, parents that exist, no cycles: KAI divides top-down along this tree."""
    index = {}
    for i, q in enumerate(queues):
        if q.name in index:
            raise ConfigError(f"queues.kaiQueues[{i}].metadata.name: duplicate {q.name}")
        index[q.name] = i
    parents = {q.name: q.parent for q in queues}
    for i, q in enumerate(queues):
        if q.parent is not None and q.parent not in parents:
            raise ConfigError(f"queues.kaiQueues[{i}].spec.parentQueue: unknown queue {q.parent}")
        seen, node = {q.name}, q.parent
        while node is not None:
            if node in seen:
                raise ConfigError(f"queues.kaiQueues[{i}].spec.parentQueue: cycle through {node}")
            seen.add(node)
            node = parents[node]


@dataclass(slots=True)
class QueueUsage:
    """Per-ClusterQueue usage of bound non-terminal and assumed pods, maintained per pod event."""

    config: QueueConfig
    usage: dict[str, dict[FlavorResource, float]] = field(default_factory=dict)
    _counted: dict[str, tuple[str, dict[FlavorResource, float]]] = field(default_factory=dict)
    cache: Any = None  # app.cache.ClusterCache, when attached
    clock: Callable[[], float] = time.monotonic
    # When each pod was first counted: Kueue's "most recently admitted first" among preemption candidates.
    admitted_at: dict[str, float] = field(default_factory=dict)
    _version: int = 0  # bumped on every usage change; the tree snapshot is rebuilt only after one
    _snapshot: tuple[int, TreeUsage] | None = None

    def contribution(self, entry: Counted | None) -> tuple[str | None, Usage | None]:
        """What a counted pod (node, pod, assumed) adds: its ClusterQueue and per (flavor, resource) amounts."""
        if entry is None or self.cache is None:
            return None, None
        node_name, pod, _assumed = entry
        cq = self.config.cluster_queue_for(pod.namespace, dict(pod.queue_labels))
        node = self.cache.nodes.get(node_name)
        if cq is None or node is None:
            return None, None
        amounts: dict[FlavorResource, float] = {}
        requests, _why = queue_requests(pod, self.config, self.cache.dra.claims)
        for resource, amount in requests.items():
            flavor = self.config.flavor_for(cq, resource, node.labels)
            if flavor is not None and amount:
                amounts[(flavor, resource)] = amount / 1000.0 if resource == "cpu" else float(amount)
        return cq, amounts

    def recount(self) -> None:
        """Rebuild all usage from the cache (start-up, or after the queue configuration changed)."""
        self.usage.clear()
        self._counted.clear()
        self._version += 1
        if self.cache is not None:
            for uid, entry in self.cache.counted_items():
                self.account(uid, *self.contribution(entry))
        for uid in set(self.admitted_at) - set(self._counted):
            del self.admitted_at[uid]

    def reconfigure(self, config: QueueConfig) -> None:
        """Swap in a new queue configuration (e.g. from watched Kueue objects) and recount usage."""
        self.config = config
        self._snapshot = None
        self.recount()

    def account(self, uid: str, cluster_queue: str | None, amounts: Mapping[FlavorResource, float] | None) -> None:
        """Set what pod ``uid`` adds (None: nothing); takes out its previous contribution first."""
        old = self._counted.pop(uid, None)
        if old is not None:
            self._add(old[0], old[1], -1.0)
        if cluster_queue is not None and amounts:
            contribution = dict(amounts)
            self._counted[uid] = (cluster_queue, contribution)
            self._add(cluster_queue, contribution, 1.0)
            self.admitted_at.setdefault(uid, self.clock())
        else:
            self.admitted_at.pop(uid, None)

    def counted(self, uid: str) -> tuple[str, Usage] | None:
        """The ClusterQueue and (flavor, resource) amounts pod ``uid`` counts, if any."""
        return self._counted.get(uid)

    def _add(self, cq: str, amounts: Mapping[FlavorResource, float], sign: float) -> None:
        self._version += 1
        used = self.usage.setdefault(cq, {})
        for fr, v in amounts.items():
            total = used.get(fr, 0.0) + sign * v
            if abs(total) > 1e-9:
                used[fr] = total
            else:
                used.pop(fr, None)

    def snapshot(self) -> TreeUsage:
        """Usage of every node of the tree; immutable, so it is shared until the usage changes."""
        if self._snapshot is None or self._snapshot[0] != self._version:
            self._snapshot = (self._version, self.config.tree.tree_usage(self.usage))
        return self._snapshot[1]

    def shares(self, weighted: bool = True) -> dict[str, DominantResourceShare]:
        snap = self.snapshot()
        weights = self.config.weight if weighted else (lambda _f, _r: 1.0)
        return {key: dominant_resource_share(snap, key, weights) for key in self.config.tree.nodes}

    def share_of(self, cluster_queue: str) -> DominantResourceShare:
        return dominant_resource_share(self.snapshot(), cq_key(cluster_queue), self.config.weight)


def queues_view(config: QueueConfig | None, usage: QueueUsage | None = None) -> dict[str, Any]:
    """JSON for /debug/queues: per node of the tree and (flavor, resource), the quota numbers and
    weighted/unweighted DRS. Usage is empty until the cache feeds ``QueueUsage``."""
    if config is None:
        return {"enabled": False}
    snap = (usage or QueueUsage(config)).snapshot()
    tree = config.tree
    nodes: dict[str, Any] = {}
    for key in tree.post_order:
        node = tree.nodes[key]
        weighted = dominant_resource_share(snap, key, config.weight)
        plain = dominant_resource_share(snap, key)
        used = snap.usage[key]
        resources = []
        for fr in sorted(set(node.subtree_quota) | set(used)):
            quota, u = node.subtree_quota.get(fr, 0.0), used.get(fr, 0.0)
            resources.append(
                {
                    "flavor": fr[0],
                    "resource": fr[1],
                    "subtreeQuota": quota,
                    "localQuota": node.local_quota.get(fr, 0.0),
                    "borrowingLimit": node.borrowing_limit.get(fr),
                    "usage": u,
                    "borrowed": max(0.0, u - quota),
                    "potentialAvailable": tree.potential_available(key, fr),
                    "available": snap.available(key, fr),
                    "weight": config.weight(*fr),
                }
            )
        nodes[key] = {
            "parent": node.parent,
            "fairSharingWeight": node.weight,
            "weightedShare": weighted.share,
            "weightedShareRounded": weighted.rounded,  # what Kueue writes to status.fairSharing.weightedShare
            "unweightedShare": plain.share,
            "borrowedResources": [{"flavor": f, "resource": r} for f, r in sorted(weighted.borrowed_frs)],
            "dominantResource": weighted.dominant_resource,
            "unweightedDominantResource": plain.dominant_resource,
            "borrowing": weighted.borrowing,
            "resources": resources,
        }
    return {
        "enabled": True,
        "preemptionStrategies": list(config.preemption_strategies),
        "priorityBasedFairShare": config.priority_based_fair_share,
        "inactive": dict(config.inactive),
        "deviceClassMappings": dict(config.device_classes),
        # Defaults in effect where a field is omitted (KAI's differ from its CRD's zeros on purpose).
        "defaults": {
            "fairSharingWeight": 1.0,
            "resourceWeight": 1.0,
            "kai": {"limit": -1, "overQuotaWeight": 1.0, "priority": 100},
        },
        "nodes": nodes,
    }
