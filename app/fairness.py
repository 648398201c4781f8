"""Queue decisions for the verbs: which nodes a queued pod may use (filter), the FlavorFairness score
(prioritize), fair-sharing victims (preempt), and what /debug shows about them.

It reads the usage the cache keeps current (``QueueUsage`` for Kueue ClusterQueues per flavor,
``KaiUsage`` for KAI queues per resource) and calls the pure ``fairshare`` functions. A node's
flavor depends only on the values of the flavors' label keys, so each request computes one verdict
per distinct label signature, not one per node.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from app.cache_events import CacheEvent, NodeChanged, PodChanged, PodCounted
from app.kai_usage import KaiUsage, kai_amounts
from app.queues import KAI_QUEUE_LABEL, KUEUE_QUEUE_LABEL, QueueConfig, QueueUsage, queue_requests, queues_view
from fairshare.admission import QuotaVerdict, Verdict, check_quota
from fairshare.flavor import PodPlacement, flavor_fits_pod, node_matches_flavor
from fairshare.flavor_fairness import NAME as FLAVOR_FAIRNESS
from fairshare.flavor_fairness import flavor_fairness_score
from fairshare.kai import QueueResource
from fairshare.preemption import Candidate, fair_preemption
from fairshare.quota import FlavorResource, TreeUsage
from scoring.framework import NodeInfo, PodInfo

__all__ = ["FLAVOR_FAIRNESS", "Fairness", "FlavorFairness", "PreemptChoice", "QueuedPod"]

_PLACEMENTS = 1024  # placements of recently seen queued pods, for prioritize and preempt


@dataclass(frozen=True, slots=True)
class QueuedPod:
    """A pod's queue, resolved once per request. ``missing`` says why its queue cannot be used."""

    kind: Literal["kueue", "kai"]
    queue: str
    requests: Mapping[str, float]  # Kueue: in Kueue units (cpu in cores); KAI: base units (milli-CPU, bytes)
    covered: tuple[str, ...] = ()
    missing: str = ""


@dataclass(frozen=True, slots=True)
class NodeFairness:
    """The fairness verdict of one label signature (hence of every node carrying it)."""

    flavors: Mapping[str, str]  # resource -> flavor; empty when the node's flavor is not allowed
    request: Mapping[FlavorResource, float]
    verdict: Verdict
    reason: str = ""
    borrowing: bool = False
    flavor_index: int = 0
    flavor_count: int = 1


@dataclass(frozen=True, slots=True)
class PreemptChoice:
    """``keep``: quota is not what blocks the pod, judge the scheduler's victims by node fit only.
    ``replace``: these victims (UIDs, highest priority first). ``drop``: no valid set on this node."""

    action: Literal["keep", "replace", "drop"]
    victims: tuple[str, ...] = ()
    reason: str = ""
    detail: tuple[dict[str, Any], ...] = ()


class NodeSignatures:
    """Each node's flavor-label signature (the values of every flavor's label keys) as a small integer,
    kept at cache-update time: a request then judges each distinct signature once and maps the
    verdicts onto its nodes with numpy, instead of reading every node's labels."""

    def __init__(self, keys: tuple[str, ...]) -> None:
        self.keys = keys
        self.ids: dict[tuple[str | None, ...], int] = {}
        self.labels: list[dict[str, str]] = []  # id -> the labels that decide flavors
        self.by_node: dict[str, int] = {}

    def set_node(self, name: str, labels: Mapping[str, str] | None) -> None:
        if labels is None:
            self.by_node.pop(name, None)
            return
        signature = tuple(labels.get(k) for k in self.keys)
        sid = self.ids.get(signature)
        if sid is None:
            sid = self.ids[signature] = len(self.labels)
            self.labels.append({k: v for k, v in zip(self.keys, signature, strict=True) if v is not None})
        self.by_node[name] = sid

    def lookup(self, names: Sequence[str]) -> npt.NDArray[np.int64]:
        """Signature id per name; -1 for nodes the cache does not know."""
        get = self.by_node.get
        return np.fromiter((get(n, -1) for n in names), dtype=np.int64, count=len(names))


class Fairness:
    """The service's one entry point to queues: verdicts, scores, victims and the /debug views."""

    def __init__(self, usage: QueueUsage, kai: KaiUsage | None = None, wall_clock: Callable[[], float] = time.time):
        self.usage = usage
        self.kai = kai
        self.wall_clock = wall_clock
        self.decisions: deque[dict[str, Any]] = deque(maxlen=100)
        self._placements: OrderedDict[str, PodPlacement] = OrderedDict()
        self.signatures = self._signatures_of_cached_nodes()

    def _signatures_of_cached_nodes(self) -> NodeSignatures:
        signatures = NodeSignatures(self.config.flavor_label_keys)
        if self.usage.cache is not None:
            for name, node in self.usage.cache.nodes.items():
                signatures.set_node(name, node.labels)
        return signatures

    def set_node(self, name: str, labels: Mapping[str, str] | None) -> None:
        """A node was added, changed (labels: its flavor may change) or deleted (None)."""
        self.signatures.set_node(name, labels)

    @staticmethod
    def attach(cache: Any, config: QueueConfig | None, wall_clock: Callable[[], float] = time.time) -> Fairness | None:
        """Fairness fed by the cache: every change of what a pod counts, and every pod event."""
        if config is None:
            return None
        usage = QueueUsage(config, cache=cache)
        kai = KaiUsage(config, cache=cache)

        usage.recount()
        kai.recount()
        fairness = Fairness(usage, kai, wall_clock)

        def on_event(event: CacheEvent) -> None:
            match event:
                case PodCounted(uid=uid, counted=counted):
                    usage.account(uid, *usage.contribution(counted))
                    kai.refresh(uid)
                case PodChanged(uid=uid):
                    kai.refresh(uid)
                case NodeChanged(name=name, labels=labels):
                    fairness.set_node(name, labels)

        cache.subscribe(on_event)
        return fairness

    @property
    def config(self) -> QueueConfig:
        return self.usage.config

    def reconfigure(self, config: QueueConfig) -> None:
        """A new queue configuration (config reload, watched Kueue objects): recount all usage."""
        self.usage.reconfigure(config)
        if self.kai is not None:
            self.kai.reconfigure(config)
        self.signatures = self._signatures_of_cached_nodes()  # the flavors' label keys may have changed

    # ------------------------------------------------------------------ pods
    def remember_placement(self, uid: str, placement: PodPlacement) -> None:
        self._placements[uid] = placement
        self._placements.move_to_end(uid)
        while len(self._placements) > _PLACEMENTS:
            self._placements.popitem(last=False)

    def has_placement(self, uid: str) -> bool:
        return uid in self._placements

    def placement(self, uid: str) -> PodPlacement | None:
        """What filter read from the pod's spec; None when it was not seen (flavor rules are then skipped)."""
        return self._placements.get(uid)

    def queued(self, pod: PodInfo) -> QueuedPod | None:
        """The pod's queue (Kueue label first, then KAI), or None: pods without one are not subject to quota."""
        labels = dict(pod.queue_labels)
        config = self.config
        if KUEUE_QUEUE_LABEL in labels:
            name = labels[KUEUE_QUEUE_LABEL]
            cq = config.cluster_queue_for(pod.namespace, labels)
            if cq is None:
                return QueuedPod("kueue", name, {}, missing=config.why_not_admitting(pod.namespace, labels))
            raw, why = self._requests(pod)
            requests = {r: (a / 1000.0 if r == "cpu" else float(a)) for r, a in raw.items() if a}
            covered = tuple(r for r in requests if config.tree.cluster_queues[cq].flavors_for(r))
            return QueuedPod("kueue", cq, requests, covered, missing=why)
        if KAI_QUEUE_LABEL in labels and self.kai is not None and config.kai_queues:
            raw, why = self._requests(pod)
            return QueuedPod("kai", labels[KAI_QUEUE_LABEL], {r: float(a) for r, a in raw.items()}, missing=why)
        return None

    def _requests(self, pod: PodInfo) -> tuple[dict[str, int], str]:
        """Container requests plus the devices of mapped DeviceClasses its claims ask for."""
        claims = self.usage.cache.dra.claims if self.usage.cache is not None else {}
        return queue_requests(pod, self.config, claims)

    def _snapshot_without(self, pod: PodInfo) -> TreeUsage:
        """The usage snapshot; a retried pod must not compete with its own assumption."""
        snap = self.usage.snapshot()
        own = self.usage.counted(pod.uid)
        return snap if own is None else snap.with_delta(own[0], own[1], -1.0)

    # ------------------------------------------------------------------ per node signature
    def _judge(
        self, queued: QueuedPod, placement: PodPlacement | None, labels: Mapping[str, str], snap: TreeUsage
    ) -> NodeFairness:
        config = self.config
        spec = config.tree.cluster_queues[queued.queue]
        flavors: dict[str, str] = {}
        index, count = 0, 1
        for resource in queued.covered:
            candidates = spec.flavors_for(resource)
            why = ""
            for position, name in enumerate(candidates):
                flavor = config.flavors.get(name)
                if flavor is None or not node_matches_flavor(labels, flavor):
                    continue
                why = (flavor_fits_pod(flavor, placement) or "") if placement is not None else ""
                if not why:
                    flavors[resource] = name
                    if position >= index:
                        index, count = position, len(candidates)
                    break
            if resource not in flavors:
                reason = why or f"node's flavor is not allowed for ClusterQueue {queued.queue} ({resource})"
                return NodeFairness({}, {}, Verdict.UNRESOLVABLE, reason)
        request = {(flavors[r], r): queued.requests[r] for r in queued.covered}
        verdict: QuotaVerdict = check_quota(snap, queued.queue, request)
        return NodeFairness(flavors, request, verdict.verdict, verdict.reason, verdict.borrowing, index, count)

    def _judged(
        self, pod: PodInfo, queued: QueuedPod, names: Sequence[str], snap: TreeUsage | None = None
    ) -> tuple[npt.NDArray[np.int64], dict[int, NodeFairness]]:
        """Signature id per node and one verdict per distinct signature among them."""
        ids = self.signatures.lookup(names)
        snap = snap if snap is not None else self._snapshot_without(pod)
        placement = self.placement(pod.uid)
        labels = self.signatures.labels
        verdicts = {sid: self._judge(queued, placement, labels[sid], snap) for sid in set(ids.tolist()) if sid >= 0}
        return ids, verdicts

    def _per_node(
        self, pod: PodInfo, queued: QueuedPod, names: Sequence[str]
    ) -> Iterable[tuple[str, NodeFairness | None]]:
        ids, verdicts = self._judged(pod, queued, names)
        for name, sid in zip(names, ids.tolist(), strict=True):
            yield name, verdicts.get(sid)

    # ------------------------------------------------------------------ filter
    def filter(self, pod: PodInfo, names: Sequence[str]) -> dict[str, tuple[bool, str]]:
        """Nodes the pod's queue may not use: name -> (unresolvable, reason); recorded for /debug/queues."""
        queued = self.queued(pod)
        if queued is None or not names:
            return {}
        out = self._rejections(pod, queued, names)
        if out:
            reasons: dict[str, int] = {}
            for _hard, reason in out.values():
                reasons[reason] = reasons.get(reason, 0) + 1
            self._record("filter", pod, queued, rejected=len(out), of=len(names), reasons=reasons)
        return out

    def _rejections(self, pod: PodInfo, queued: QueuedPod, names: Sequence[str]) -> dict[str, tuple[bool, str]]:
        if queued.missing:
            return dict.fromkeys(names, (True, queued.missing))
        if queued.kind == "kai":
            assert self.kai is not None
            rejection = self.kai.check(pod.uid, queued.queue, {r: int(v) for r, v in queued.requests.items()})
            return {} if rejection is None else dict.fromkeys(names, rejection)
        if not queued.covered:
            return {}  # nothing the queue limits: every flavor question is moot
        ids, verdicts = self._judged(pod, queued, names)
        rejected = [sid for sid, judged in verdicts.items() if judged.verdict is not Verdict.FITS]
        if not rejected:
            return {}
        out: dict[str, tuple[bool, str]] = {}
        for position in np.flatnonzero(np.isin(ids, rejected)).tolist():
            judged = verdicts[int(ids[position])]
            out[names[position]] = (judged.verdict is Verdict.UNRESOLVABLE, judged.reason)
        return out

    def admits(self, pod: PodInfo, node: str) -> str | None:
        """Bind's re-check, atomic with the assumption: the quota may have been used up since filter
        (kube-scheduler filters the next pod before the previous one's bind arrives)."""
        queued = self.queued(pod)
        if queued is None:
            return None
        rejection = self._rejections(pod, queued, [node]).get(node)
        if rejection is None:
            return None
        self._record("bind", pod, queued, node=node, action="refused", reason=rejection[1])
        return rejection[1]

    def record_bind(self, pod: PodInfo, node: str) -> None:
        """An admission: the flavors the pod took, whether it borrows, and its queue's share now."""
        queued = self.queued(pod)
        if queued is None or queued.missing:
            return
        detail: dict[str, Any] = {"node": node, "action": "admitted"}
        judged = dict(self._per_node(pod, queued, [node])).get(node) if queued.kind == "kueue" else None
        if judged is not None:
            share = self.usage.share_of(queued.queue)
            detail.update(flavors=dict(judged.flavors), borrowing=judged.borrowing, weightedShare=share.share)
        self._record("bind", pod, queued, **detail)

    # ------------------------------------------------------------------ prioritize
    def scores(self, pod: PodInfo, names: Sequence[str]) -> npt.NDArray[np.int64]:
        """FlavorFairness 0..100 per node (0 where the node's flavor is not allowed or unknown)."""
        queued = self.queued(pod)
        if queued is None or queued.kind != "kueue" or queued.missing or not queued.covered:
            return np.zeros(len(names), dtype=np.int64)
        snap = self._snapshot_without(pod)
        ids, verdicts = self._judged(pod, queued, names, snap)
        by_id = np.zeros(len(self.signatures.labels) + 1, dtype=np.int64)  # slot 0: unknown nodes (id -1)
        weights = self.config.weight
        for sid, judged in verdicts.items():
            if judged.flavors:
                by_id[sid + 1] = flavor_fairness_score(
                    snap, queued.queue, judged.request, judged.flavor_index, judged.flavor_count, weights
                )
        scores: npt.NDArray[np.int64] = by_id[ids + 1]
        return scores

    # ------------------------------------------------------------------ preempt
    def preempt_choice(self, pod: PodInfo, node_name: str, scheduler_victims: Sequence[str]) -> PreemptChoice:
        """Fair-sharing victims on one node, Kueue's rules; KAI reclaim rules for KAI pods."""
        queued = self.queued(pod)
        if queued is None:
            return PreemptChoice("keep")
        if queued.missing:
            return PreemptChoice("drop", reason=queued.missing)
        if queued.kind == "kai":
            return self._kai_victims(pod, queued, scheduler_victims)
        cache = self.usage.cache
        node = cache.nodes.get(node_name) if cache is not None else None
        if node is None:
            return PreemptChoice("drop", reason="node unknown to the GPU extender")
        snap = self._snapshot_without(pod)
        judged = self._judge(queued, self.placement(pod.uid), node.labels, snap)
        if judged.verdict is Verdict.FITS:
            return PreemptChoice("keep")
        if judged.verdict is Verdict.UNRESOLVABLE:
            return PreemptChoice("drop", reason=judged.reason)
        candidates = []
        for uid, (where, other, assumed) in cache.counted_on(node_name):
            counted = self.usage.counted(uid)
            if where != node_name or assumed or counted is None or uid == pod.uid:
                continue  # only pods bound on this node; an assumption in flight is not a victim
            admitted = self.usage.admitted_at.get(uid, 0.0)
            candidates.append(Candidate(uid, counted[0], other.priority, admitted, counted[1]))
        config = self.config
        victims = fair_preemption(
            snap,
            queued.queue,
            judged.request,
            candidates,
            priority=pod.priority,
            weights=config.weight,
            strategies=config.preemption_strategies,
        )
        if not victims:
            return PreemptChoice("drop", reason=f"no fair-sharing victims on this node for ClusterQueue {queued.queue}")
        order = sorted(range(len(victims)), key=lambda i: (-victims[i].candidate.priority, i))
        chosen = [victims[i] for i in order]
        detail = tuple(
            {"uid": v.candidate.uid, "clusterQueue": v.candidate.cluster_queue, "reason": v.reason} for v in chosen
        )
        return PreemptChoice("replace", tuple(v.candidate.uid for v in chosen), detail=detail)

    def _kai_victims(self, pod: PodInfo, queued: QueuedPod, scheduler_victims: Sequence[str]) -> PreemptChoice:
        """Keep the scheduler's victims that KAI's reclaim rules allow (same queue, or a queue that
        stays above its fair share and a reclaimer within its own); drop the node if none remain."""
        assert self.kai is not None
        kai, cache = self.kai, self.kai.cache
        reclaimer = kai.queues.get(queued.queue)
        if reclaimer is None:
            return PreemptChoice("drop", reason=f"KAI queue {queued.queue} does not exist")
        amounts = kai_amounts({r: int(v) for r, v in queued.requests.items()})
        # The preemptor is pending: its request counts in the division even before the watch shows it.
        unseen = not kai.is_pending(pod.uid) and cache is not None and cache.counted(pod.uid) is None
        shares = kai.fair_shares((queued.queue, amounts) if unseen else None)
        request = {r: v for r, v in amounts.items() if r in reclaimer.resources}
        own = kai.allocated.get(queued.queue, {})
        can_reclaim = all(
            own.get(r, 0.0) + v <= shares.get(queued.queue, {}).get(r, 0.0) + 1e-9 for r, v in request.items()
        )
        remaining = {q: dict(a) for q, a in kai.allocated.items()}
        kept, detail = [], []
        for uid in scheduler_victims:
            counted = cache.counted(uid) if cache is not None else None
            victim_queue = kai.queue_of(dict(counted[1].queue_labels)) if counted is not None else None
            if victim_queue is None or victim_queue not in kai.queues or victim_queue == queued.queue:
                kept.append(uid)
                detail.append({"uid": uid, "queue": victim_queue, "reason": "SameQueueOrUnqueued"})
                continue
            assert counted is not None
            spec = kai.queues[victim_queue].resources
            left = remaining.setdefault(victim_queue, {})
            above = any(
                left.get(r, 0.0) > _allocatable_share(spec.get(r), shares.get(victim_queue, {}).get(r, 0.0)) + 1e-9
                for r in request
            )
            if can_reclaim and above:
                kept.append(uid)
                detail.append({"uid": uid, "queue": victim_queue, "reason": "MaintainFairShare"})
                for r, v in kai.amounts(counted[1]).items():
                    left[r] = left.get(r, 0.0) - v
        if not kept and scheduler_victims:
            return PreemptChoice("drop", reason=f"KAI reclaim rules allow none of the victims for queue {queued.queue}")
        return PreemptChoice("replace", tuple(kept), detail=tuple(detail))

    def record_preempt(self, pod: PodInfo, node: str, choice: PreemptChoice) -> None:
        queued = self.queued(pod)
        if queued is not None and choice.action != "keep":
            self._record(
                "preempt",
                pod,
                queued,
                node=node,
                action=choice.action,
                reason=choice.reason,
                victims=list(choice.detail),
            )

    # ------------------------------------------------------------------ debug
    def explain(self, pod: PodInfo, names: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Per node: the queue, flavors, quota verdict and FlavorFairness score."""
        queued = self.queued(pod)
        if queued is None:
            return {}
        if queued.missing or queued.kind == "kai":
            rejection = self._rejections(pod, queued, names[:1]).get(names[0]) if names else None
            verdict = {"queue": queued.queue, "kind": queued.kind, "passed": rejection is None}
            if rejection is not None:
                verdict.update(unresolvable=rejection[0], reason=rejection[1])
            return dict.fromkeys(names, verdict)
        scores = dict(zip(names, self.scores(pod, names).tolist(), strict=True))
        out = {}
        for name, judged in self._per_node(pod, queued, names):
            if judged is None:
                continue
            out[name] = {
                "queue": queued.queue,
                "kind": "kueue",
                "passed": judged.verdict is Verdict.FITS,
                "verdict": judged.verdict.value,
                "reason": judged.reason,
                "flavors": dict(judged.flavors),
                "borrowing": judged.borrowing,
                FLAVOR_FAIRNESS: scores[name],
            }
        return out

    def view(self) -> dict[str, Any]:
        out = queues_view(self.config, self.usage)
        if self.kai is not None and self.config.kai_queues:
            out["kai"] = self.kai.view()
        out["decisions"] = list(self.decisions)
        return out

    def _record(self, verb: str, pod: PodInfo, queued: QueuedPod, **detail: Any) -> None:
        self.decisions.append(
            {
                "time": self.wall_clock(),
                "verb": verb,
                "pod": pod.key,
                "queue": queued.queue,
                "kind": queued.kind,
                **detail,
            }
        )


def _allocatable_share(spec: QueueResource | None, fair_share: float) -> float:
    """KAI's allocatable share: max(deserved, fair share), capped by the limit."""
    if spec is None:
        return fair_share
    share = max(spec.deserved, fair_share)
    return share if spec.limit < 0 else min(share, spec.limit)


class FlavorFairness:
    """The FlavorFairness score plugin, combined with the others by its profile weight.

    It reads queue state the pure scoring plugins cannot see, so it lives on the adapter side; it
    applies only to pods of a Kueue ClusterQueue (others are scored by the rest of the profile).
    """

    name = FLAVOR_FAIRNESS

    def __init__(self, fairness: Fairness | None) -> None:
        self.fairness = fairness

    def applies(self, pod: PodInfo) -> bool:
        if self.fairness is None:
            return False
        queued = self.fairness.queued(pod)
        # Pods of no ClusterQueue, or requesting nothing it covers, have no flavor to prefer.
        return queued is not None and queued.kind == "kueue" and not queued.missing and bool(queued.covered)

    def score(self, pod: PodInfo, node: NodeInfo) -> int:
        return int(self.fairness.scores(pod, [node.name])[0]) if self.fairness is not None else 0

    def score_batch(self, pod: PodInfo, batch: Any) -> Any:
        if self.fairness is None:
            return np.zeros(len(batch), dtype=np.int64)
        return self.fairness.scores(pod, batch.names)
