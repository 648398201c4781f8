"""Kueue's quota tree: Cohorts (nested) and ClusterQueues, per (flavor, resource) pair.

Definitions follow Kueue's resource_node.go: SubtreeQuota, localQuota (capacity kept back by a
lendingLimit), cohort Usage as the usage spilling past each child's localQuota, potentialAvailable
(the most a node could ever use) and available (what it may use now, borrowing included).
The tree is immutable; usage is a separate per-ClusterQueue mapping so one tree serves many snapshots.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fairshare.errors import QueueConfigError
from fairshare.flavor import crd_object
from k8s_semantics.quantity import QuantityError, parse_quantity

__all__ = [
    "ClusterQueue",
    "Cohort",
    "FlavorQuotas",
    "FlavorResource",
    "LocalQueue",
    "QuotaTree",
    "ResourceGroup",
    "ResourceQuota",
    "TreeUsage",
    "Usage",
    "build_tree",
    "cohort_key",
    "cq_key",
    "parse_cluster_queue",
    "parse_cohort",
    "parse_local_queue",
]

FlavorResource = tuple[str, str]
"""(flavor name, resource name)."""

Usage = Mapping[FlavorResource, float]


@dataclass(frozen=True, slots=True)
class ResourceQuota:
    nominal_quota: float = 0.0
    borrowing_limit: float | None = None
    lending_limit: float | None = None


@dataclass(frozen=True, slots=True)
class FlavorQuotas:
    name: str
    resources: Mapping[str, ResourceQuota]


@dataclass(frozen=True, slots=True)
class ResourceGroup:
    covered_resources: tuple[str, ...]
    flavors: tuple[FlavorQuotas, ...]


@dataclass(frozen=True, slots=True)
class ClusterQueue:
    name: str
    cohort: str | None = None
    resource_groups: tuple[ResourceGroup, ...] = ()
    weight: float = 1.0
    reclaim_within_cohort: str = "Never"
    within_cluster_queue: str = "Never"

    def flavors_for(self, resource: str) -> tuple[str, ...]:
        for group in self.resource_groups:
            if resource in group.covered_resources:
                return tuple(f.name for f in group.flavors)
        return ()


@dataclass(frozen=True, slots=True)
class Cohort:
    name: str
    parent: str | None = None
    resource_groups: tuple[ResourceGroup, ...] = ()
    weight: float = 1.0


@dataclass(frozen=True, slots=True)
class LocalQueue:
    namespace: str
    name: str
    cluster_queue: str


def _quotas(groups: Iterable[ResourceGroup]) -> dict[FlavorResource, ResourceQuota]:
    return {(f.name, r): q for g in groups for f in g.flavors for r, q in f.resources.items()}


@dataclass(frozen=True, slots=True)
class _Node:
    key: str  # "cq/<name>" or "cohort/<name>"
    parent: str | None
    children: tuple[str, ...]
    weight: float
    subtree_quota: Mapping[FlavorResource, float]
    local_quota: Mapping[FlavorResource, float]
    borrowing_limit: Mapping[FlavorResource, float]


def cq_key(name: str) -> str:
    return f"cq/{name}"


def cohort_key(name: str) -> str:
    return f"cohort/{name}"


@dataclass(frozen=True, slots=True)
class QuotaTree:
    """Immutable quota tree; node keys are ``cq/<name>`` and ``cohort/<name>``."""

    cluster_queues: Mapping[str, ClusterQueue]
    cohorts: Mapping[str, Cohort]
    nodes: Mapping[str, _Node]
    # Nodes children-first, so one pass bubbles usage to the roots.
    post_order: tuple[str, ...]
    roots: tuple[str, ...]
    potential: Mapping[str, Mapping[FlavorResource, float]] = field(default_factory=dict)

    def root_of(self, key: str) -> str:
        node = self.nodes[key]
        while node.parent is not None:
            node = self.nodes[node.parent]
        return node.key

    def path(self, key: str) -> list[str]:
        """The node and its ancestors, node first."""
        out = [key]
        while (parent := self.nodes[out[-1]].parent) is not None:
            out.append(parent)
        return out

    def potential_available(self, key: str, fr: FlavorResource) -> float:
        return self.potential[key].get(fr, 0.0)

    def tree_usage(self, cq_usage: Mapping[str, Usage]) -> TreeUsage:
        """Usage of every node: ClusterQueues' own, cohorts' spilled past children's localQuota."""
        usage: dict[str, dict[FlavorResource, float]] = {}
        for key in self.post_order:
            node = self.nodes[key]
            if key.startswith("cq/"):
                usage[key] = dict(cq_usage.get(key[3:], {}))
            else:
                total: dict[FlavorResource, float] = {}
                for child in node.children:
                    local = self.nodes[child].local_quota
                    for fr, used in usage[child].items():
                        spill = max(0.0, used - local.get(fr, 0.0))
                        if spill:
                            total[fr] = total.get(fr, 0.0) + spill
                usage[key] = total
        return TreeUsage(self, usage)


@dataclass(frozen=True, slots=True)
class TreeUsage:
    """A usage snapshot over a tree; answers available/borrowing per node."""

    tree: QuotaTree
    usage: Mapping[str, Mapping[FlavorResource, float]]

    def available(self, key: str, fr: FlavorResource) -> float:
        node = self.tree.nodes[key]
        used = self.usage[key].get(fr, 0.0)
        quota = node.subtree_quota.get(fr, 0.0)
        if node.parent is None:
            return max(0.0, quota - used)
        local = node.local_quota.get(fr, 0.0)
        from_parent = self.available(node.parent, fr)
        limit = node.borrowing_limit.get(fr)
        if limit is not None:
            from_parent = min(from_parent, quota - local - max(0.0, used - local) + limit)
        return max(0.0, max(0.0, local - used) + from_parent)

    def borrowing(self, key: str) -> bool:
        quota = self.tree.nodes[key].subtree_quota
        return any(used > quota.get(fr, 0.0) for fr, used in self.usage[key].items())

    def with_delta(self, cq: str, delta: Usage, sign: float = 1.0) -> TreeUsage:
        """The snapshot with ``sign * delta`` applied to one ClusterQueue, bubbled up its path."""
        usage = dict(self.usage)
        key = cq_key(cq)
        changes = {fr: sign * v for fr, v in delta.items()}
        for node_key in self.tree.path(key):
            old = usage[node_key]
            new = dict(old)
            for fr, d in changes.items():
                new[fr] = new.get(fr, 0.0) + d
            usage[node_key] = new
            node = self.tree.nodes[node_key]
            if node.parent is None:
                break
            local = node.local_quota
            changes = {
                fr: max(0.0, new.get(fr, 0.0) - local.get(fr, 0.0)) - max(0.0, old.get(fr, 0.0) - local.get(fr, 0.0))
                for fr in changes
            }
        return TreeUsage(self.tree, usage)


def build_tree(cluster_queues: Iterable[ClusterQueue], cohorts: Iterable[Cohort]) -> QuotaTree:
    """Link queues and cohorts (implicit cohorts are created, as Kueue does) and fold quotas up."""
    cqs = {cq.name: cq for cq in cluster_queues}
    chs = {c.name: c for c in cohorts}
    for cq in cqs.values():
        if cq.cohort is not None and cq.cohort not in chs:
            chs[cq.cohort] = Cohort(cq.cohort)
    for c in list(chs.values()):
        if c.parent is not None and c.parent not in chs:
            chs[c.parent] = Cohort(c.parent)
    parent: dict[str, str | None] = {cq_key(n): (cohort_key(c.cohort) if c.cohort else None) for n, c in cqs.items()}
    parent.update({cohort_key(n): (cohort_key(c.parent) if c.parent else None) for n, c in chs.items()})
    children: dict[str, list[str]] = {k: [] for k in parent}
    for k, p in sorted(parent.items()):
        if p is not None:
            children[p].append(k)
    for start in parent:  # cohort cycles would never terminate below
        seen = {start}
        p = parent[start]
        while p is not None:
            if p in seen:
                raise QueueConfigError(f"cohorts.{p[7:]}.parentName: cycle in the cohort tree")
            seen.add(p)
            p = parent[p]
    order: list[str] = []

    def visit(k: str) -> None:
        for child_key in children[k]:
            visit(child_key)
        order.append(k)

    roots = tuple(sorted(k for k, p in parent.items() if p is None))
    for r in roots:
        visit(r)
    nodes: dict[str, _Node] = {}
    for k in order:
        spec = cqs[k[3:]] if k.startswith("cq/") else chs[k[7:]]
        quotas = _quotas(spec.resource_groups)
        subtree = {fr: q.nominal_quota for fr, q in quotas.items()}
        for child_key in children[k]:
            child = nodes[child_key]
            for fr, sq in child.subtree_quota.items():
                subtree[fr] = subtree.get(fr, 0.0) + sq - child.local_quota.get(fr, 0.0)
        local = {
            fr: max(0.0, subtree.get(fr, 0.0) - q.lending_limit)
            for fr, q in quotas.items()
            if q.lending_limit is not None
        }
        borrow = {fr: q.borrowing_limit for fr, q in quotas.items() if q.borrowing_limit is not None}
        nodes[k] = _Node(k, parent[k], tuple(children[k]), spec.weight, subtree, local, borrow)
    potential: dict[str, dict[FlavorResource, float]] = {}
    for k in reversed(order):  # parents before children
        node = nodes[k]
        root_quota = nodes[_root(nodes, k)].subtree_quota
        pot: dict[FlavorResource, float] = {}
        for fr in root_quota:
            if node.parent is None:
                value = node.subtree_quota.get(fr, 0.0)
            else:
                value = node.local_quota.get(fr, 0.0) + potential[node.parent][fr]
                limit = node.borrowing_limit.get(fr)
                if limit is not None:
                    value = min(value, node.subtree_quota.get(fr, 0.0) + limit)
            pot[fr] = value
        potential[k] = pot
    return QuotaTree(cqs, chs, nodes, tuple(order), roots, potential)


def _root(nodes: Mapping[str, _Node], key: str) -> str:
    while (p := nodes[key].parent) is not None:
        key = p
    return key


def _number(raw: object, path: str, *, minimum: float = 0.0) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise QueueConfigError(f"{path}: must be a number or quantity")
    if isinstance(raw, str):
        try:
            value = float(parse_quantity(raw))
        except QuantityError as exc:
            raise QueueConfigError(f"{path}: {exc}") from None
    else:
        value = float(raw)
    if value < minimum:
        raise QueueConfigError(f"{path}: must be >= {minimum:g}")
    return value


def _weight(spec: Mapping[str, Any], path: str) -> float:
    fs = spec.get("fairSharing")
    if fs is None:
        return 1.0
    if not isinstance(fs, Mapping):
        raise QueueConfigError(f"{path}.fairSharing: must be an object")
    if "weight" not in fs:
        return 1.0
    weight = _number(fs["weight"], f"{path}.fairSharing.weight")
    if 0 < weight <= 1e-9:
        raise QueueConfigError(f"{path}.fairSharing.weight: must be 0 or > 1e-9")
    return weight


def _resource_groups(raw: object, path: str, has_cohort: bool) -> tuple[ResourceGroup, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or len(raw) > 16:
        raise QueueConfigError(f"{path}: must be a list of at most 16 resource groups")
    groups: list[ResourceGroup] = []
    seen_resources: set[str] = set()
    for gi, g in enumerate(raw):
        gpath = f"{path}[{gi}]"
        if not isinstance(g, Mapping):
            raise QueueConfigError(f"{gpath}: must be an object")
        covered = g.get("coveredResources")
        if not isinstance(covered, list) or not covered or not all(isinstance(r, str) for r in covered):
            raise QueueConfigError(f"{gpath}.coveredResources: must list 1-64 resource names")
        if dup := seen_resources.intersection(covered):
            raise QueueConfigError(f"{gpath}.coveredResources: {sorted(dup)[0]} is covered by another group")
        seen_resources.update(covered)
        flavors_raw = g.get("flavors")
        if not isinstance(flavors_raw, list) or not 1 <= len(flavors_raw) <= 64:
            raise QueueConfigError(f"{gpath}.flavors: must list 1-64 flavors")
        flavors: list[FlavorQuotas] = []
        for fi, f in enumerate(flavors_raw):
            fpath = f"{gpath}.flavors[{fi}]"
            if not isinstance(f, Mapping) or not isinstance(f.get("name"), str):
                raise QueueConfigError(f"{fpath}.name: required")
            res_raw = f.get("resources")
            if not isinstance(res_raw, list):
                raise QueueConfigError(f"{fpath}.resources: must be a list")
            resources: dict[str, ResourceQuota] = {}
            for ri, r in enumerate(res_raw):
                rpath = f"{fpath}.resources[{ri}]"
                if not isinstance(r, Mapping) or r.get("name") not in covered:
                    raise QueueConfigError(f"{rpath}.name: must be one of coveredResources")
                limits: dict[str, float | None] = {}
                for field_name in ("borrowingLimit", "lendingLimit"):
                    if r.get(field_name) is None:
                        limits[field_name] = None
                    elif not has_cohort:
                        raise QueueConfigError(f"{rpath}.{field_name}: must be null without a cohort")
                    else:
                        limits[field_name] = _number(r[field_name], f"{rpath}.{field_name}")
                resources[str(r["name"])] = ResourceQuota(
                    _number(r.get("nominalQuota", 0), f"{rpath}.nominalQuota"),
                    limits["borrowingLimit"],
                    limits["lendingLimit"],
                )
            if set(resources) != set(covered):
                raise QueueConfigError(f"{fpath}.resources: must list exactly the coveredResources")
            flavors.append(FlavorQuotas(str(f["name"]), resources))
        groups.append(ResourceGroup(tuple(covered), tuple(flavors)))
    return tuple(groups)


_RECLAIM = ("Never", "LowerPriority", "Any")
_WITHIN = ("Never", "LowerPriority", "LowerOrNewerEqualPriority")


def parse_cluster_queue(raw: object, path: str) -> ClusterQueue:
    """A Kueue ClusterQueue (``metadata.name`` + ``spec``, or flat)."""
    name, spec, spath = crd_object(raw, path)
    cohort = spec.get("cohortName", spec.get("cohort"))
    if cohort is not None and not isinstance(cohort, str):
        raise QueueConfigError(f"{spath}.cohortName: must be a string")
    preemption = spec.get("preemption") or {}
    if not isinstance(preemption, Mapping):
        raise QueueConfigError(f"{spath}.preemption: must be an object")
    reclaim = preemption.get("reclaimWithinCohort", "Never")
    within = preemption.get("withinClusterQueue", "Never")
    if reclaim not in _RECLAIM:
        raise QueueConfigError(f"{spath}.preemption.reclaimWithinCohort: must be one of {', '.join(_RECLAIM)}")
    if within not in _WITHIN:
        raise QueueConfigError(f"{spath}.preemption.withinClusterQueue: must be one of {', '.join(_WITHIN)}")
    return ClusterQueue(
        name,
        cohort or None,
        _resource_groups(spec.get("resourceGroups"), f"{spath}.resourceGroups", bool(cohort)),
        _weight(spec, spath),
        str(reclaim),
        str(within),
    )


def parse_cohort(raw: object, path: str) -> Cohort:
    """A Kueue Cohort (v1beta2: ``spec.parentName``, own ``resourceGroups`` and ``fairSharing``)."""
    name, spec, spath = crd_object(raw, path)
    parent = spec.get("parentName")
    if parent is not None and not isinstance(parent, str):
        raise QueueConfigError(f"{spath}.parentName: must be a string")
    return Cohort(
        name,
        parent or None,
        _resource_groups(spec.get("resourceGroups"), f"{spath}.resourceGroups", bool(parent)),
        _weight(spec, spath),
    )


def parse_local_queue(raw: object, path: str) -> LocalQueue:
    """A Kueue LocalQueue: a namespaced name pointing to ``spec.clusterQueue``."""
    name, spec, spath = crd_object(raw, path)
    assert isinstance(raw, Mapping)  # crd_object checked it
    meta = raw.get("metadata")
    namespace = (meta.get("namespace") if isinstance(meta, Mapping) else None) or raw.get("namespace")
    if not isinstance(namespace, str) or not namespace:
        raise QueueConfigError(f"{path}.metadata.namespace: required")
    cq = spec.get("clusterQueue")
    if not isinstance(cq, str) or not cq:
        raise QueueConfigError(f"{spath}.clusterQueue: required")
    return LocalQueue(namespace, name, cq)
