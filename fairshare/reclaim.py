"""Reclaim: which running workloads of other queues a pending pod's queue may take back, cluster-wide.

kube-scheduler calls preempt only when lower-*priority* pods block a pod, so a queue that lent its
quota to an equal-priority borrower never gets it back through the preempt verb. The reclaimer asks
this module, for one pending pod (the beneficiary), which workloads to evict:

- Kueue (``kueue_reclaim``): the fair-sharing preemption of ``fairshare.preemption`` over the
  workloads of *other* ClusterQueues of the beneficiary's cohort tree (``reclaimWithinCohort``,
  within-nominal reclamation, LessThanOrEqualToFinalShare / LessThanInitialShare with the KEP-8902
  flavor weights), all-or-nothing, then fill-back. When quota is all that blocks the pod (some node
  has room), victims may be anywhere; otherwise they must also free room on one node.
- KAI (``kai_reclaim``): the reclaimer's queue stays within its fair share with the pod added, and
  each victim's queue is above its allocatable share (max(deserved, fair share), capped by the limit)
  before that victim is removed (MaintainFairShare). Victims come from one node, where the pod then
  fits; fill-back.

A workload is what is evicted as one: a pod, or every running pod of a gang (a Kueue pod group or a
KAI PodGroup), counted as one workload with its pods' summed usage. Workloads already being evicted
come first (Kueue's order), so a decision repeated while they terminate asks for nothing new.
Node choice is deterministic: fewest victims, then fewest pods, then the order the rooms are given in.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fairshare.drs import ResourceWeights, unweighted
from fairshare.kai import UNLIMITED, KaiQueue, QueueResource
from fairshare.preemption import DEFAULT_STRATEGIES, Candidate, fair_preemption
from fairshare.quota import TreeUsage, Usage

__all__ = [
    "MAINTAIN_FAIR_SHARE",
    "KaiView",
    "NodeRoom",
    "ReclaimChoice",
    "RunningPod",
    "Workload",
    "Workloads",
    "kai_can_reclaim",
    "kai_reclaim",
    "kueue_reclaim",
]

MAINTAIN_FAIR_SHARE = "MaintainFairShare"
MAX_NODES = 8  # node-constrained searches per decision: a bound on the decision's cost
_EPSILON = 1e-9


@dataclass(frozen=True, slots=True)
class RunningPod:
    uid: str
    node: str
    requests: Mapping[str, int]  # base units (milli-CPU, bytes, devices), what it holds on the node


@dataclass(frozen=True, slots=True)
class Workload:
    """A running pod or gang. ``usage``: Kueue (flavor, resource) amounts, or KAI resource amounts."""

    key: str
    queue: str
    priority: int
    admitted_at: float
    usage: Mapping[Any, float]  # Kueue: (flavor, resource) -> amount; KAI: resource -> amount
    pods: tuple[RunningPod, ...]
    evicted: bool = False  # already being evicted (or deleted): counted until its pods are gone


@dataclass(frozen=True, slots=True)
class NodeRoom:
    """A node the beneficiary may use: what is free there for the resources it asks, and (Kueue) its
    request under the flavors the node gives it."""

    name: str
    free: Mapping[str, int]
    request: Usage = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ReclaimChoice:
    """Victims, each with its reason, in the order taken; ``node``: where the pod fits once they are
    gone ("" when quota was all that blocked it and several nodes have room)."""

    node: str
    victims: tuple[tuple[Workload, str], ...]

    @property
    def pods(self) -> tuple[RunningPod, ...]:
        return tuple(p for w, _ in self.victims for p in w.pods)


class Workloads:
    """The running workloads of one cluster state, indexed for many decisions. Kept up to date between
    decisions with ``add`` and ``discard``; ``without`` gives the same index with some workloads left
    out (those an earlier decision of the round already evicts), sharing it. The policies order
    candidates themselves, so the order workloads were added in decides nothing."""

    def __init__(self, workloads: Iterable[Workload] = ()) -> None:
        self.by_key: dict[str, Workload] = {}
        self._by_node: dict[str, dict[str, Workload]] = {}  # node -> key -> workloads with pods there
        self.freed_on: dict[tuple[str, str], dict[str, int]] = {}  # (workload, node) -> what its pods hold there
        self._left_out: frozenset[str] = frozenset()
        self._all: tuple[Workload, ...] | None = None
        for w in workloads:
            self.add(w)

    def add(self, workload: Workload) -> None:
        """Add a workload, or replace the one with its key."""
        key = workload.key
        if key in self.by_key:
            self.discard(key)
        self.by_key[key] = workload
        freed_on = self.freed_on
        for pod in workload.pods:
            held = freed_on.get((key, pod.node))
            if held is None:
                held = freed_on[(key, pod.node)] = {}
                self._by_node.setdefault(pod.node, {})[key] = workload
            for r, v in pod.requests.items():
                held[r] = held.get(r, 0) + v
        self._all = None

    def discard(self, key: str) -> None:
        workload = self.by_key.pop(key, None)
        if workload is None:
            return
        for node in {pod.node for pod in workload.pods}:
            self.freed_on.pop((key, node), None)
            on_node = self._by_node.get(node)
            if on_node is not None:
                on_node.pop(key, None)
                if not on_node:
                    del self._by_node[node]
        self._all = None

    def without(self, keys: Collection[str]) -> Workloads:
        """This index with ``keys`` left out, sharing its data (valid until the next ``add``/``discard``)."""
        if not keys:
            return self
        view = Workloads.__new__(Workloads)
        view.by_key, view._by_node, view.freed_on = self.by_key, self._by_node, self.freed_on
        view._left_out, view._all = self._left_out | frozenset(keys), None
        return view

    @property
    def all(self) -> tuple[Workload, ...]:
        if self._all is None:
            left_out = self._left_out
            self._all = tuple(w for k, w in self.by_key.items() if k not in left_out)
        return self._all

    def on_node(self, node: str) -> list[Workload]:
        """The workloads with pods on ``node``."""
        on_node = self._by_node.get(node)
        if not on_node:
            return []
        left_out = self._left_out
        return [w for k, w in on_node.items() if k not in left_out]

    def node_fits(self, room: NodeRoom, requests: Mapping[str, int], removed: Sequence[str]) -> bool:
        """Whether ``requests`` fit on the room's node once the workloads ``removed`` (keys) are gone."""
        for resource, amount in requests.items():
            if amount <= 0:
                continue
            have = room.free.get(resource, 0)
            for key in removed:
                have += self.freed_on.get((key, room.name), {}).get(resource, 0)
            if amount > have:
                return False
        return True


def _fits_free(room: NodeRoom, requests: Mapping[str, int]) -> bool:
    return all(amount <= room.free.get(r, 0) for r, amount in requests.items() if amount > 0)


def _best(choices: Sequence[ReclaimChoice]) -> ReclaimChoice | None:
    """Fewest victims, then fewest pods; the first such (rooms come in the caller's order)."""
    best: ReclaimChoice | None = None
    for choice in choices:
        if best is None or (len(choice.victims), len(choice.pods)) < (len(best.victims), len(best.pods)):
            best = choice
    return best


# ---------------------------------------------------------------------------------------------- Kueue
def kueue_reclaim(
    snapshot: TreeUsage,
    cluster_queue: str,
    priority: int,
    requests: Mapping[str, int],
    rooms: Sequence[NodeRoom],
    workloads: Workloads,
    *,
    weights: ResourceWeights = unweighted,
    strategies: Sequence[str] = DEFAULT_STRATEGIES,
    max_nodes: int = MAX_NODES,
) -> ReclaimChoice | None:
    """Victims that let a pending pod of ``cluster_queue`` (``requests``: its node requests) be admitted
    and placed; None when it needs none (quota and some node fit), or no valid set exists."""
    if not rooms or cluster_queue not in snapshot.tree.cluster_queues:
        return None

    def candidates(pool: Sequence[Workload]) -> list[Candidate]:
        return [
            Candidate(w.key, w.queue, w.priority, w.admitted_at, w.usage, w.evicted)
            for w in pool
            if w.queue != cluster_queue  # reclaim is between queues; within one, pod priority decides
        ]

    def quota_fits(request: Usage) -> bool:
        key = f"cq/{cluster_queue}"
        return all(v <= snapshot.available(key, fr) for fr, v in request.items())

    def choose(room: NodeRoom, pool: Sequence[Workload], node_bound: bool) -> ReclaimChoice | None:
        also: Callable[[Sequence[Candidate]], bool] | None = None
        if node_bound:
            also = lambda removed: workloads.node_fits(room, requests, [c.uid for c in removed])  # noqa: E731
        victims = fair_preemption(
            snapshot,
            cluster_queue,
            room.request,
            candidates(pool),
            priority=priority,
            weights=weights,
            strategies=strategies,
            also_fits=also,
        )
        if not victims:
            return None
        by_key = workloads.by_key
        return ReclaimChoice(
            room.name if node_bound else "", tuple((by_key[v.candidate.uid], v.reason) for v in victims)
        )

    free = [room for room in rooms if _fits_free(room, requests)]
    tried: set[tuple[tuple[tuple[str, str], float], ...]] = set()
    for room in free:  # a node has room: quota alone holds the pod back, victims may be anywhere
        if quota_fits(room.request):
            return None  # admissible and placeable now: kube-scheduler will bind it
        signature = tuple(sorted(room.request.items()))
        if signature in tried:
            continue
        tried.add(signature)
        found = choose(room, workloads.all, node_bound=False)
        if found is not None:
            return found
    if free:
        return None
    choices = []
    for room in rooms:  # no node has room: the victims must also free one
        if quota_fits(room.request):
            continue  # node room is missing, not quota: pod priority's business (the preempt verb)
        pool = workloads.on_node(room.name)
        reclaimable = [w for w in pool if w.queue != cluster_queue and snapshot.borrowing(f"cq/{w.queue}")]
        if not workloads.node_fits(room, requests, [w.key for w in reclaimable]):
            continue  # even every borrower's pods there would not make room
        found = choose(room, pool, node_bound=True)
        if found is not None:
            choices.append(found)
        if len(choices) >= max_nodes:
            break
    return _best(choices)


# ------------------------------------------------------------------------------------------------ KAI
@dataclass(frozen=True, slots=True)
class KaiView:
    """What KAI's reclaim rules read: per leaf queue its allocation and fair share (the division with
    the pending requests, the beneficiary's included), and the queue specs."""

    allocated: Mapping[str, Mapping[str, float]]
    shares: Mapping[str, Mapping[str, float]]
    queues: Mapping[str, KaiQueue]


def _allocatable_share(spec: QueueResource | None, fair_share: float) -> float:
    """max(deserved, fair share), capped by the limit."""
    if spec is None:
        return fair_share
    share = max(spec.deserved, fair_share)
    return share if spec.limit == UNLIMITED or spec.limit < 0 else min(share, spec.limit)


def kai_can_reclaim(view: KaiView, queue: str, request: Mapping[str, float]) -> bool:
    """The reclaimer's queue stays within its fair share, with the request, on every resource it lists."""
    spec = view.queues.get(queue)
    if spec is None:
        return False
    own, share = view.allocated.get(queue, {}), view.shares.get(queue, {})
    return all(own.get(r, 0.0) + v <= share.get(r, 0.0) + _EPSILON for r, v in request.items() if r in spec.resources)


def kai_reclaim(
    view: KaiView,
    queue: str,
    request: Mapping[str, float],
    requests: Mapping[str, int],
    rooms: Sequence[NodeRoom],
    workloads: Workloads,
    *,
    max_nodes: int = MAX_NODES,
) -> ReclaimChoice | None:
    """Victims on one node that KAI's reclaim rules allow and that make room for the pod there.
    ``request``: the pod in KAI units; ``requests``: in node units."""
    if not rooms or any(_fits_free(room, requests) for room in rooms):
        return None  # some node has room: nothing to reclaim
    if not kai_can_reclaim(view, queue, request):
        return None
    contested = [r for r, v in request.items() if v > 0]

    def over_share(name: str, left: Mapping[str, float]) -> bool:
        spec = view.queues[name].resources
        share = view.shares.get(name, {})
        return any(left.get(r, 0.0) > _allocatable_share(spec.get(r), share.get(r, 0.0)) + _EPSILON for r in contested)

    def ratio(name: str) -> float:
        """How far a queue is above its fair share on the contested resources (victims' queue order)."""
        share, own = view.shares.get(name, {}), view.allocated.get(name, {})
        return max((own.get(r, 0.0) / share[r] if share.get(r, 0.0) > 0 else float("inf")) for r in contested)

    choices = []
    for room in rooms:
        pool = [w for w in workloads.on_node(room.name) if w.queue != queue and w.queue in view.queues]
        if not pool or not workloads.node_fits(room, requests, [w.key for w in pool]):
            continue
        ratios = {name: ratio(name) for name in {w.queue for w in pool}}
        ordered = sorted(pool, key=lambda w: (not w.evicted, -ratios[w.queue], w.priority, -w.admitted_at, w.key))
        left = {name: dict(view.allocated.get(name, {})) for name in ratios}
        taken: list[Workload] = []
        for w in ordered:
            if not over_share(w.queue, left[w.queue]):
                continue
            taken.append(w)
            for r, v in w.usage.items():
                left[w.queue][r] = left[w.queue].get(r, 0.0) - v
            if workloads.node_fits(room, requests, [t.key for t in taken]):
                break
        else:
            continue
        kept = list(taken)
        for w in reversed(taken[:-1]):  # fill back
            if workloads.node_fits(room, requests, [t.key for t in kept if t is not w]):
                kept.remove(w)
        choices.append(ReclaimChoice(room.name, tuple((w, MAINTAIN_FAIR_SHARE) for w in kept)))
        if len(choices) >= max_nodes:
            break
    return _best(choices)
