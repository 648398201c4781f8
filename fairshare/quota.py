"""Kueue's quota tree: Cohorts (nested) and ClusterQueues, per (flavor, resource) pair.

Definitions follow Kueue's resource_node.go: SubtreeQuota, localQuota (capacity kept back by a
lendingLimit), cohort Usage as the usage spilling past each child's localQuota, potentialAvailable
(the most a node could ever use) and available (what it may use now, borrowing included).
The tree is immutable; usage is a separate per-ClusterQueue mapping so one tree serves many snapshots.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from fairshare.flavor import ConfigError

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
                raise ConfigError(f"cohorts.{p[7:]}.parentName: cycle in the cohort tree")
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
