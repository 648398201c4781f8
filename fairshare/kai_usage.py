"""KAI queues at run time: allocated and pending requests per queue, fair shares, the filter check
and the reclaim rules for preemption.

KAI divides each resource independently over a queue tree (``fairshare.kai``). The division needs
every queue's request = allocated + pending, and the cluster's total. The adapter sets what each pod
contributes (``set_pod``) whenever the pod or what it counts changes, and the totals when the nodes
change, so allocated and pending sums stay current and the shares are recomputed only after a change.

Units are KAI's (``fairshare.requests.kai_amounts``): cpu in millicores, memory in MB, ``gpu`` for
any ``*/gpu`` extended resource; other resources keep their name and base unit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from fairshare.config import KAI_QUEUE_LABEL, QueueConfig
from fairshare.kai import UNLIMITED, KaiQueue, QueueResource, fair_shares
from fairshare.requests import kai_amounts
from fairshare.usage import add_amounts
from fairshare.victims import PreemptChoice

__all__ = ["Amounts", "KaiUsage", "SchedulerVictim", "Share"]

_EPSILON = 1e-9
Amounts = dict[str, float]
Share = tuple[str, Amounts]  # a leaf queue and what one pod counts in it
# A victim kube-scheduler chose: its UID, KAI queue (None: not in one) and what it counts there.
SchedulerVictim = tuple[str, str | None, Mapping[str, float]]


def _add(sums: dict[str, Amounts], queue: str, amounts: Mapping[str, float], sign: float) -> None:
    add_amounts(sums.setdefault(queue, {}), amounts, sign)


@dataclass(slots=True)
class KaiUsage:
    config: QueueConfig
    allocated: dict[str, Amounts] = field(default_factory=dict)  # leaf queue -> bound + assumed pods
    pending: dict[str, Amounts] = field(default_factory=dict)  # leaf queue -> unbound pods not assumed
    totals: Amounts = field(default_factory=dict)  # allocatable of schedulable nodes, KAI units
    _allocated_of: dict[str, Share] = field(default_factory=dict)
    _pending_of: dict[str, Share] = field(default_factory=dict)
    _version: int = 0  # bumped on every change the division reads
    _shares: tuple[int, dict[str, Amounts]] | None = None
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
    def set_pod(self, uid: str, allocated: Share | None, pending: Share | None) -> None:
        """What pod ``uid`` contributes now: allocated (bound or assumed) or pending, or neither."""
        self._set(self._allocated_of, self.allocated, uid, allocated)
        self._set(self._pending_of, self.pending, uid, pending)

    def _set(
        self,
        of: dict[str, Share],
        sums: dict[str, Amounts],
        uid: str,
        new: Share | None,
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

    def recount(self, pods: Iterable[tuple[str, Share | None, Share | None]]) -> None:
        """Rebuild all sums from every pod's contribution (start-up, new configuration)."""
        self.allocated.clear()
        self.pending.clear()
        self._allocated_of.clear()
        self._pending_of.clear()
        self._version += 1
        for uid, allocated, pending in pods:
            self.set_pod(uid, allocated, pending)

    def reconfigure(self, config: QueueConfig) -> None:
        """Swap in a new queue configuration; ``recount`` next."""
        self.config = config
        self._shares = None
        self._index()

    def set_totals(self, allocatable: Iterable[Mapping[str, int]]) -> None:
        """The cluster's total: the allocatable of every schedulable node (base units)."""
        totals: Amounts = {}
        for node in allocatable:
            for resource, value in kai_amounts(node).items():
                totals[resource] = totals.get(resource, 0.0) + value
        if totals != self.totals:
            self.totals = totals
            self._version += 1

    def is_pending(self, uid: str) -> bool:
        return uid in self._pending_of

    # ------------------------------------------------------------------ division
    def fair_shares(self, extra: tuple[str, Amounts] | None = None) -> dict[str, Amounts]:
        """Fair share per queue and resource; ``extra`` adds a request not yet seen by the watch."""
        if extra is None and self._shares is not None and self._shares[0] == self._version:
            return self._shares[1]
        requests: dict[str, Amounts] = {}
        for sums in (self.allocated, self.pending):
            for queue, amounts in sums.items():
                _add(requests, queue, amounts, 1.0)
        if extra is not None:
            _add(requests, extra[0], extra[1], 1.0)
        resources = {r for q in self.config.kai_queues for r in q.resources}
        totals = {r: v for r, v in self.totals.items() if r in resources}
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
            self._shares = (self._version, shares)
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
        totals = self.totals
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

    # ------------------------------------------------------------------ preempt
    def reclaim_victims(
        self, queue: str, amounts: Amounts, scheduler_victims: Sequence[SchedulerVictim], *, unseen: bool
    ) -> PreemptChoice:
        """Keep the scheduler's victims that KAI's reclaim rules allow (same queue, or a queue that
        stays above its fair share and a reclaimer within its own); drop the node if none remain.
        ``amounts``: the reclaimer's request in KAI units; ``unseen``: not yet pending in this
        ledger (its request then counts in the division anyway)."""
        reclaimer = self.queues.get(queue)
        if reclaimer is None:
            return PreemptChoice("drop", reason=f"KAI queue {queue} does not exist")
        shares = self.fair_shares((queue, amounts) if unseen else None)
        request = {r: v for r, v in amounts.items() if r in reclaimer.resources}
        own = self.allocated.get(queue, {})
        can_reclaim = all(
            own.get(r, 0.0) + v <= shares.get(queue, {}).get(r, 0.0) + _EPSILON for r, v in request.items()
        )
        remaining = {q: dict(a) for q, a in self.allocated.items()}
        kept: list[str] = []
        detail: list[dict[str, Any]] = []
        for uid, victim_queue, victim_amounts in scheduler_victims:
            if victim_queue is None or victim_queue not in self.queues or victim_queue == queue:
                kept.append(uid)
                detail.append({"uid": uid, "queue": victim_queue, "reason": "SameQueueOrUnqueued"})
                continue
            spec = self.queues[victim_queue].resources
            left = remaining.setdefault(victim_queue, {})
            above = any(
                left.get(r, 0.0) > _allocatable_share(spec.get(r), shares.get(victim_queue, {}).get(r, 0.0)) + _EPSILON
                for r in request
            )
            if can_reclaim and above:
                kept.append(uid)
                detail.append({"uid": uid, "queue": victim_queue, "reason": "MaintainFairShare"})
                for r, v in victim_amounts.items():
                    left[r] = left.get(r, 0.0) - v
        if not kept and scheduler_victims:
            return PreemptChoice("drop", reason=f"KAI reclaim rules allow none of the victims for queue {queue}")
        return PreemptChoice("replace", tuple(kept), detail=tuple(detail))

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
        return {"totals": dict(self.totals), "queues": out}


def _allocatable_share(spec: QueueResource | None, fair_share: float) -> float:
    """KAI's allocatable share: max(deserved, fair share), capped by the limit."""
    if spec is None:
        return fair_share
    share = max(spec.deserved, fair_share)
    return share if spec.limit < 0 else min(share, spec.limit)
