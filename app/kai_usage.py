"""KAI queues at run time: allocated and pending requests per queue, fair shares, and the filter check.

KAI divides each resource independently over a queue tree (``fairshare.kai``). The division needs
every queue's request = allocated + pending, and the cluster's total. The cache calls ``refresh``
for a pod whenever the pod or what it counts changes, so allocated and pending sums stay current
and the shares are recomputed only when one of them (or the node set) changed.

Units are KAI's: cpu in millicores, memory in MB (10^6 bytes), ``gpu`` for any ``*/gpu`` extended
resource (nvidia.com/gpu, amd.com/gpu); other resources keep their name and base unit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from app.queues import KAI_QUEUE_LABEL, QueueConfig, queue_requests
from fairshare.kai import UNLIMITED, KaiQueue, QueueResource, fair_shares

__all__ = ["KaiUsage", "kai_amounts"]

_EPSILON = 1e-9
Amounts = dict[str, float]


def kai_amounts(requests: Mapping[str, int]) -> Amounts:
    """Requests (milli-CPU, bytes, units) in KAI's units and names."""
    out: Amounts = {}
    for name, amount in requests.items():
        if not amount:
            continue
        if name == "cpu":
            key, value = "cpu", float(amount)
        elif name == "memory":
            key, value = "memory", amount / 1e6
        elif name.endswith("/gpu"):
            key, value = "gpu", float(amount)
        else:
            key, value = name, float(amount)
        out[key] = out.get(key, 0.0) + value
    return out


def _add(sums: dict[str, Amounts], queue: str, amounts: Mapping[str, float], sign: float) -> None:
    target = sums.setdefault(queue, {})
    for resource, value in amounts.items():
        total = target.get(resource, 0.0) + sign * value
        if abs(total) > _EPSILON:
            target[resource] = total
        else:
            target.pop(resource, None)


@dataclass(slots=True)
class KaiUsage:
    config: QueueConfig
    cache: Any = None  # app.cache.ClusterCache
    allocated: dict[str, Amounts] = field(default_factory=dict)  # leaf queue -> bound + assumed pods
    pending: dict[str, Amounts] = field(default_factory=dict)  # leaf queue -> unbound pods not assumed
    _allocated_of: dict[str, tuple[str, Amounts]] = field(default_factory=dict)
    _pending_of: dict[str, tuple[str, Amounts]] = field(default_factory=dict)
    _version: int = 0
    _shares: tuple[tuple[int, int], dict[str, Amounts]] | None = None
    _totals: tuple[int, Amounts] | None = None
    queues: dict[str, KaiQueue] = field(init=False)
    leaves: frozenset[str] = field(init=False)
    _chains: dict[str, list[str]] = field(init=False)

    def __post_init__(self) -> None:
        self._index()

    def _index(self) -> None:
        """Queue lookups the hot paths use, built once per configuration."""
        self.queues = {q.name: q for q in self.config.kai_queues}
        parents = {q.parent for q in self.config.kai_queues}
        self.leaves = frozenset(q.name for q in self.config.kai_queues if q.name not in parents)
        self._chains = {}
        for name in self.queues:
            chain = [name]  # parse_queue_config rejects unknown parents and cycles
            while (parent := self.queues[chain[-1]].parent) is not None:
                chain.append(parent)
            self._chains[name] = chain

    def queue_of(self, labels: Mapping[str, str]) -> str | None:
        """The pod's KAI queue name (its ``kai.scheduler/queue`` label), or None."""
        return labels.get(KAI_QUEUE_LABEL) or None

    def is_leaf(self, queue: str) -> bool:
        return queue in self.leaves

    def ancestors(self, queue: str) -> list[str]:
        """The queue and its parents, queue first."""
        return self._chains.get(queue, [queue])

    # ------------------------------------------------------------------ accounting
    def refresh(self, uid: str) -> None:
        """Re-derive what pod ``uid`` contributes (allocated or pending) from the cache."""
        if self.cache is None:
            return
        pod = self.cache.pods.get(uid)
        counted = self.cache.counted(uid)
        allocated: tuple[str, Amounts] | None = None
        pending: tuple[str, Amounts] | None = None
        if counted is not None:
            queue = self.queue_of(dict(counted[1].queue_labels))
            if queue in self.queues:
                allocated = (queue, self.amounts(counted[1]))
        elif pod is not None and not pod.node_name and not pod.terminal:
            queue = self.queue_of(dict(pod.queue_labels))
            if queue in self.queues:
                pending = (queue, self.amounts(pod))
        self._set(self._allocated_of, self.allocated, uid, allocated)
        self._set(self._pending_of, self.pending, uid, pending)

    def amounts(self, pod: Any) -> Amounts:
        """A pod's requests in KAI units, devices of mapped DeviceClasses included."""
        requests, _why = queue_requests(pod, self.config, self.cache.dra.claims)
        return kai_amounts(requests)

    def _set(
        self,
        of: dict[str, tuple[str, Amounts]],
        sums: dict[str, Amounts],
        uid: str,
        new: tuple[str, Amounts] | None,
    ) -> None:
        old = of.get(uid)
        if old == new:
            return
        if old is not None:
            _add(sums, old[0], old[1], -1.0)
            del of[uid]
        if new is not None:
            _add(sums, new[0], new[1], 1.0)
            of[uid] = new
        self._version += 1

    def recount(self) -> None:
        self.allocated.clear()
        self.pending.clear()
        self._allocated_of.clear()
        self._pending_of.clear()
        self._version += 1
        if self.cache is not None:
            for uid in set(self.cache.pods) | {uid for uid, _ in self.cache.counted_items()}:
                self.refresh(uid)

    def reconfigure(self, config: QueueConfig) -> None:
        self.config = config
        self._shares = None
        self._index()
        self.recount()

    def is_pending(self, uid: str) -> bool:
        return uid in self._pending_of

    # ------------------------------------------------------------------ division
    def totals(self) -> Amounts:
        """Allocatable of schedulable nodes, in KAI units (recomputed only when nodes changed)."""
        version = getattr(self.cache, "nodes_version", 0)
        if self._totals is None or self._totals[0] != version:
            totals: Amounts = {}
            for node in getattr(self.cache, "nodes", {}).values():
                if node.unschedulable:
                    continue
                for resource, value in kai_amounts(node.allocatable).items():
                    totals[resource] = totals.get(resource, 0.0) + value
            self._totals = (version, totals)
        return self._totals[1]

    def fair_shares(self, extra: tuple[str, Amounts] | None = None) -> dict[str, Amounts]:
        """Fair share per queue and resource; ``extra`` adds a request not yet seen by the watch."""
        key = (self._version, getattr(self.cache, "nodes_version", 0))
        if extra is None and self._shares is not None and self._shares[0] == key:
            return self._shares[1]
        requests: dict[str, Amounts] = {}
        for sums in (self.allocated, self.pending):
            for queue, amounts in sums.items():
                _add(requests, queue, amounts, 1.0)
        if extra is not None:
            _add(requests, extra[0], extra[1], 1.0)
        resources = {r for q in self.config.kai_queues for r in q.resources}
        totals = {r: v for r, v in self.totals().items() if r in resources}
        queues = [
            replace(
                q,
                resources={
                    r: replace(q.resources.get(r, QueueResource()), request=requests.get(q.name, {}).get(r, 0.0))
                    for r in resources
                },
            )
            for q in self.config.kai_queues
        ]
        shares = fair_shares(
            queues, totals, priority_based=self.config.priority_based_fair_share, k_value=self.config.k_value
        )
        if extra is None:
            self._shares = (key, shares)
        return shares

    def _allocated_subtree(self, queue: str) -> Amounts:
        """Allocated summed over the leaf queues under ``queue``."""
        out: Amounts = {}
        known = self.queues
        for leaf, amounts in self.allocated.items():
            if leaf in known and queue in self.ancestors(leaf):
                for resource, value in amounts.items():
                    out[resource] = out.get(resource, 0.0) + value
        return out

    # ------------------------------------------------------------------ filter
    def check(self, uid: str, queue: str, requests: Mapping[str, int]) -> tuple[bool, str] | None:
        """Whether one more pod of ``queue`` may be allocated: None, or (unresolvable, reason).

        Limit on the queue and every ancestor (``OverLimit``, unresolvable). Then, per resource the
        queue's spec lists, allocated + request must stay within the fair share, unless the request
        fits in idle capacity: what the cluster has beyond every queue's allocation and every other
        leaf queue's unmet fair share (resolvable: reclaiming may make room).
        """
        queues = self.queues
        if queue not in queues:
            return True, f"KAI queue {queue} does not exist"
        if not self.is_leaf(queue):
            return True, f"KAI queue {queue} is a parent queue; only leaf queues hold pods"
        amounts = kai_amounts(requests)
        own = self._allocated_of.get(uid)
        allocated = dict(self.allocated.get(queue, {}))
        if own is not None and own[0] == queue:  # a retried pod must not compete with its own assumption
            for resource, value in own[1].items():
                allocated[resource] = allocated.get(resource, 0.0) - value
        for name in self.ancestors(queue):
            spec = queues[name].resources
            used = allocated
            if name != queue:
                used = self._allocated_subtree(name)
                for resource, value in own[1].items() if own is not None and own[0] == queue else ():
                    used[resource] = used.get(resource, 0.0) - value
            for resource, value in amounts.items():
                limit = spec[resource].limit if resource in spec else UNLIMITED
                if limit != UNLIMITED and used.get(resource, 0.0) + value > limit + _EPSILON:
                    return True, (
                        f"OverLimit: KAI queue {name} {resource} allocated {used.get(resource, 0.0):g} + "
                        f"request {value:g} > limit {limit:g}"
                    )
        extra = None if self.is_pending(uid) or own is not None else (queue, amounts)
        shares = self.fair_shares(extra)
        totals = self.totals()
        for resource, value in sorted(amounts.items()):
            if resource not in queues[queue].resources:
                continue
            share = shares.get(queue, {}).get(resource, 0.0)
            if allocated.get(resource, 0.0) + value <= share + _EPSILON:
                continue
            idle = totals.get(resource, 0.0) - sum(a.get(resource, 0.0) for a in self.allocated.values())
            if own is not None:
                idle += own[1].get(resource, 0.0)
            for other, other_shares in shares.items():
                if other != queue and self.is_leaf(other):
                    unmet = other_shares.get(resource, 0.0) - self.allocated.get(other, {}).get(resource, 0.0)
                    idle -= max(0.0, unmet)
            if value > idle + _EPSILON:
                return False, (
                    f"KAI queue {queue} over its fair share of {resource}: allocated "
                    f"{allocated.get(resource, 0.0):g} + request {value:g} > fair share {share:g}, "
                    f"and only {max(0.0, idle):g} is idle"
                )
        return None

    # ------------------------------------------------------------------ debug
    def view(self) -> dict[str, Any]:
        shares = self.fair_shares()
        out = {}
        for q in self.config.kai_queues:
            resources = {}
            for resource in sorted(set(q.resources) | set(shares.get(q.name, {}))):
                spec = q.resources.get(resource, QueueResource())
                allocated = (
                    self.allocated.get(q.name, {}) if self.is_leaf(q.name) else self._allocated_subtree(q.name)
                ).get(resource, 0.0)
                resources[resource] = {
                    "deserved": spec.deserved,
                    "limit": spec.limit,
                    "overQuotaWeight": spec.over_quota_weight,
                    "allocated": allocated,
                    "pending": self.pending.get(q.name, {}).get(resource, 0.0),
                    "fairShare": shares.get(q.name, {}).get(resource, 0.0),
                }
            out[q.name] = {"parent": q.parent, "priority": q.priority, "resources": resources}
        return {"totals": self.totals(), "queues": out}
