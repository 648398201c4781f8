"""Queues for the verbs: the adapter between the cache and the pure ``fairshare`` policy.

It feeds the ledgers from cache events (``QueueUsage`` for Kueue ClusterQueues per flavor,
``KaiUsage`` for KAI queues per resource), resolves a pod's queue and placement, and asks
``fairshare`` for verdicts (filter, bind), the FlavorFairness score (prioritize) and victims
(preempt); it records decisions for /debug/queues. A node's flavor depends only on the values of
the flavors' label keys, so each request judges one verdict per distinct label signature.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from allocator.types import ResourceClaim
from app.cluster.cache import ClusterCache
from app.cluster.cache_events import CacheEvent, Counted, NodeChanged, PodChanged, PodCounted
from app.cluster.objects import NodeObject
from app.cluster.workloads import WorkloadAdmissions, kueue_group_name
from app.pipeline.node_signatures import NodeSignatures
from app.pipeline.nodes import REASON_NODE_NOT_IN_CACHE
from fairshare.admission import Verdict, check_quota
from fairshare.assignment import FlavorVerdict, QueuedPod, counted_usage, judge, queued_pod
from fairshare.config import QueueConfig
from fairshare.flavor import PodPlacement
from fairshare.flavor_fairness import NAME as FLAVOR_FAIRNESS
from fairshare.flavor_fairness import flavor_fairness_score
from fairshare.kai_usage import KaiUsage, SchedulerVictim, Share
from fairshare.preemption import Candidate
from fairshare.quota import FlavorResource, TreeUsage, Usage
from fairshare.requests import kai_amounts, kueue_amounts, queue_requests
from fairshare.usage import Contribution, QueueUsage, queues_view
from fairshare.victims import PreemptChoice, kueue_victims
from scoring.framework import NodeInfo, PodInfo

__all__ = ["FLAVOR_FAIRNESS", "Fairness", "FlavorFairness", "PreemptChoice"]

_PLACEMENTS = 1024  # placements of recently seen queued pods, for prioritize, bind and preempt


class Fairness:
    """The service's one entry point to queues: verdicts, scores, victims and the /debug views."""

    def __init__(
        self,
        config: QueueConfig,
        cache: ClusterCache | None = None,  # None: no pods or nodes but the signatures set here
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.cache = cache
        self.usage = QueueUsage(config)
        self.kai = KaiUsage(config)
        self.wall_clock = wall_clock
        self.workloads: WorkloadAdmissions | None = None  # Kueue's Workloads, when watched (runtime sets it)
        self.reclaim_view: Callable[[], dict[str, Any]] | None = None  # the reclaimer's state, for /debug/queues
        self.decisions: deque[dict[str, Any]] = deque(maxlen=100)
        self._placements: OrderedDict[str, PodPlacement] = OrderedDict()
        self._nodes_version: int | None = None
        self.signatures = self._signatures_of_cached_nodes()
        self.usage.recount(self._contributions())
        self.kai.recount(self._kai_shares())

    @staticmethod
    def attach(
        cache: ClusterCache, config: QueueConfig | None, wall_clock: Callable[[], float] = time.time
    ) -> Fairness | None:
        """Fairness fed by the cache: every change of what a pod counts, and every pod and node event."""
        if config is None:
            return None
        fairness = Fairness(config, cache, wall_clock)
        cache.subscribe(fairness.on_event)
        return fairness

    @property
    def config(self) -> QueueConfig:
        return self.usage.config

    def on_event(self, event: CacheEvent) -> None:
        match event:
            case PodCounted(uid=uid, counted=counted):
                self.usage.account(uid, *self._contribution(uid, counted, self.usage.counted(uid)))
                self.kai.set_pod(uid, *self._kai_share(uid))
            case PodChanged(uid=uid):
                self.kai.set_pod(uid, *self._kai_share(uid))
            case NodeChanged(name=name, labels=labels):
                self.set_node(name, labels)

    def set_node(self, name: str, labels: Mapping[str, str] | None) -> None:
        """A node was added, changed (labels: its flavor may change) or deleted (None)."""
        self.signatures.set_node(name, labels)

    def reconfigure(self, config: QueueConfig) -> None:
        """A new queue configuration (config reload, watched Kueue objects): recount all usage."""
        self.usage.reconfigure(config)
        self.usage.recount(self._contributions())  # read before the recount: each pod's recorded flavors
        self.kai.reconfigure(config)
        self.kai.recount(self._kai_shares())
        self.signatures = self._signatures_of_cached_nodes()  # the flavors' label keys may have changed
        if self.cache is not None:
            self.cache.freed.notify()  # quotas may have grown: pods held for quota may fit now

    # ------------------------------------------------------------------ feeding the ledgers
    def _signatures_of_cached_nodes(self) -> NodeSignatures:
        signatures = NodeSignatures(self.config.flavor_label_keys)
        for name, node in self._nodes().items():
            signatures.set_node(name, node.labels)
        return signatures

    def _nodes(self) -> Mapping[str, NodeObject]:
        return self.cache.nodes if self.cache is not None else {}

    def _claims(self) -> Mapping[str, ResourceClaim]:
        return self.cache.dra.claims if self.cache is not None else {}

    def _contribution(self, uid: str, entry: Counted | None, recorded: tuple[str, Usage] | None) -> Contribution:
        """What a counted pod (node, pod, assumed) adds: its ClusterQueue and (flavor, resource)
        amounts, under the flavors recorded when it was first counted."""
        if entry is None:
            return None, None
        node_name, pod, _assumed = entry
        config = self.config
        cq = config.cluster_queue_for(pod.namespace, dict(pod.queue_labels))
        node = self._nodes().get(node_name)
        if cq is None or node is None:
            return None, None
        requests = kueue_amounts(queue_requests(pod, config, self._claims())[0])
        return cq, counted_usage(config, cq, requests, node.labels, self.placement(uid), recorded)

    def _contributions(self) -> list[tuple[str, Contribution]]:
        """Every counted pod's contribution, keeping the flavors each was recorded under."""
        if self.cache is None:
            return []
        counted = self.usage.counted
        return [(uid, self._contribution(uid, entry, counted(uid))) for uid, entry in self.cache.counted_items()]

    def _kai_share(self, uid: str) -> tuple[Share | None, Share | None]:
        """What pod ``uid`` adds to its KAI queue: allocated (counted on a node) or pending."""
        if self.cache is None:
            return None, None
        counted = self.cache.counted(uid)
        pod = counted[1] if counted is not None else self.cache.pods.get(uid)
        if pod is None or (counted is None and (pod.node_name or pod.terminal)):
            return None, None
        queue = self.kai.queue_of(dict(pod.queue_labels))
        if queue not in self.kai.queues:
            return None, None
        share = (queue, self._kai_amounts(pod))
        return (share, None) if counted is not None else (None, share)

    def _kai_amounts(self, pod: PodInfo) -> dict[str, float]:
        """What a pod counts in its KAI queue (KAI units), devices of mapped DeviceClasses included."""
        return kai_amounts(queue_requests(pod, self.config, self._claims())[0])

    def _kai_shares(self) -> Iterable[tuple[str, Share | None, Share | None]]:
        if self.cache is None:
            return []
        uids = set(self.cache.pods) | {uid for uid, _ in self.cache.counted_items()}
        return [(uid, *self._kai_share(uid)) for uid in uids]

    def kai_ledger(self) -> KaiUsage:
        """The KAI ledger with the cluster's totals current."""
        return self._kai()

    def _kai(self) -> KaiUsage:
        """The KAI ledger with the cluster's totals current (recomputed only after node changes)."""
        version = self.cache.nodes_version if self.cache is not None else 0
        if version != self._nodes_version:
            self.kai.set_totals(node.allocatable for node in self._nodes().values() if not node.unschedulable)
            self._nodes_version = version
        return self.kai

    # ------------------------------------------------------------------ pods
    def admitted_at(self, pod: PodInfo) -> float:
        """When the cluster admitted the pod, from the API objects (so a restart changes nothing): its
        Kueue Workload's QuotaReserved/Admitted time when Workloads are watched, else the time the
        pod's object records for its binding (0 when unknown: ties then go by UID, as in Kueue)."""
        if self.workloads is not None:
            at = self.workloads.admitted_at(pod, kueue_group_name(pod))
            if at is not None:
                return at
        return pod.admitted_at

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
        return queued_pod(self.config, pod, self._claims())

    # ------------------------------------------------------------------ per node signature
    def _judged(
        self,
        pod: PodInfo,
        queued: QueuedPod,
        names: Sequence[str],
        snap: TreeUsage | None = None,
        rows: npt.NDArray[np.intp] | None = None,
    ) -> tuple[npt.NDArray[np.int64], dict[int, FlavorVerdict]]:
        """Signature id per node and one verdict per distinct signature among them; ``rows``: the
        nodes' rows in the cache's node table, when every one has one (read by row, not by name)."""
        if rows is not None and self.cache is not None:
            ids = self.signatures.by_row(self.cache.table)[rows]
        else:
            ids = self.signatures.lookup(names)
        snap = snap if snap is not None else self.usage.snapshot_without(pod.uid)
        placement = self.placement(pod.uid)
        labels = self.signatures.labels
        config = self.config
        verdicts = {sid: judge(config, queued, placement, labels[sid], snap) for sid in set(ids.tolist()) if sid >= 0}
        return ids, verdicts

    def _per_node(
        self, pod: PodInfo, queued: QueuedPod, names: Sequence[str]
    ) -> Iterable[tuple[str, FlavorVerdict | None]]:
        ids, verdicts = self._judged(pod, queued, names)
        for name, sid in zip(names, ids.tolist(), strict=True):
            yield name, verdicts.get(sid)

    # ------------------------------------------------------------------ filter
    def filter(
        self, pod: PodInfo, names: Sequence[str], rows: npt.NDArray[np.intp] | None = None
    ) -> dict[str, tuple[bool, str]]:
        """Nodes the pod's queue may not use: name -> (unresolvable, reason); recorded for /debug/queues.
        ``rows``: the nodes' rows in the cache's node table, when every one has one."""
        queued = self.queued(pod)
        if queued is None or not names:
            return {}
        out = self._rejections(pod, queued, names, rows)
        if out:
            reasons: dict[str, int] = {}
            for _hard, reason in out.values():
                reasons[reason] = reasons.get(reason, 0) + 1
            self.record("filter", pod, queued, rejected=len(out), of=len(names), reasons=reasons)
        return out

    def _rejections(
        self, pod: PodInfo, queued: QueuedPod, names: Sequence[str], rows: npt.NDArray[np.intp] | None = None
    ) -> dict[str, tuple[bool, str]]:
        if queued.missing:
            return dict.fromkeys(names, (True, queued.missing))
        if queued.kind == "kai":
            rejection = self._kai().check(pod.uid, queued.queue, {r: int(v) for r, v in queued.requests.items()})
            return {} if rejection is None else dict.fromkeys(names, rejection)
        if not queued.covered:
            return {}  # nothing the queue limits: every flavor question is moot
        ids, verdicts = self._judged(pod, queued, names, rows=rows)
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
        self.record("bind", pod, queued, node=node, action="refused", reason=rejection[1])
        return rejection[1]

    def group_admits(self, placements: Sequence[tuple[PodInfo, str]]) -> str:
        """Whether the queues take a gang's members at once on these nodes ("" when they do, else why
        not): a gang is one workload, so its quota is judged for the sum of its members. None of the
        members is counted yet (a group's holds are released before it is planned again)."""
        snap: TreeUsage | None = None
        kueue: dict[str, dict[FlavorResource, float]] = {}
        kai: dict[str, dict[str, int]] = {}
        nodes = self._nodes()
        for pod, node in placements:
            queued = self.queued(pod)
            if queued is None:
                continue
            if queued.missing:
                return queued.missing
            if queued.kind == "kai":
                kai_total = kai.setdefault(queued.queue, {})
                for resource, amount in queued.requests.items():
                    kai_total[resource] = kai_total.get(resource, 0) + int(amount)
                continue
            if not queued.covered:
                continue
            snap = snap if snap is not None else self.usage.snapshot()
            labels = nodes[node].labels if node in nodes else {}
            judged = judge(self.config, queued, pod.placement or self.placement(pod.uid), labels, snap)
            if not judged.flavors:
                return judged.reason
            total = kueue.setdefault(queued.queue, {})
            for flavor_resource, amount in judged.request.items():
                total[flavor_resource] = total.get(flavor_resource, 0.0) + amount
        for queue, request in kueue.items():
            assert snap is not None
            verdict = check_quota(snap, queue, request)
            if verdict.verdict is not Verdict.FITS:
                return verdict.reason
        for queue, requests in kai.items():
            rejection = self._kai().check("", queue, requests)
            if rejection is not None:
                return rejection[1]
        return ""

    def record_bind(self, pod: PodInfo, node: str) -> None:
        """An admission: the flavors the pod took, whether it borrows, and its queue's share now."""
        queued = self.queued(pod)
        if queued is None or queued.missing:
            return
        detail: dict[str, Any] = {"node": node, "action": "admitted"}
        judged = dict(self._per_node(pod, queued, [node])).get(node) if queued.kind == "kueue" else None
        if judged is not None:
            recorded = self.usage.counted(pod.uid)  # the flavors usage counts from now on
            flavors = {r: f for f, r in recorded[1]} if recorded is not None else dict(judged.flavors)
            share = self.usage.share_of(queued.queue)
            detail.update(flavors=flavors, borrowing=judged.borrowing, weightedShare=share.share)
        self.record("bind", pod, queued, **detail)

    # ------------------------------------------------------------------ prioritize
    def scores(
        self, pod: PodInfo, names: Sequence[str], rows: npt.NDArray[np.intp] | None = None
    ) -> npt.NDArray[np.int64]:
        """FlavorFairness 0..100 per node (0 where the node's flavor is not allowed or unknown); ``rows``:
        the nodes' rows in the cache's node table, when every one has one."""
        queued = self.queued(pod)
        if queued is None or queued.kind != "kueue" or queued.missing or not queued.covered:
            return np.zeros(len(names), dtype=np.int64)
        snap = self.usage.snapshot_without(pod.uid)
        ids, verdicts = self._judged(pod, queued, names, snap, rows)
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
        node = self._nodes().get(node_name)
        if node is None or self.cache is None:
            return PreemptChoice("drop", reason=REASON_NODE_NOT_IN_CACHE)
        snap = self.usage.snapshot_without(pod.uid)
        judged = judge(self.config, queued, self.placement(pod.uid), node.labels, snap)
        if judged.verdict is Verdict.FITS:
            return PreemptChoice("keep")
        if judged.verdict is Verdict.UNRESOLVABLE:
            return PreemptChoice("drop", reason=judged.reason)
        candidates = []
        for uid, (where, other, assumed) in self.cache.counted_on(node_name):
            counted = self.usage.counted(uid)
            if where != node_name or assumed or counted is None or uid == pod.uid:
                continue  # only pods bound on this node; an assumption in flight is not a victim
            candidates.append(Candidate(uid, counted[0], other.priority, self.admitted_at(other), counted[1]))
        return kueue_victims(self.config, snap, queued.queue, judged.request, candidates, pod.priority)

    def _kai_victims(self, pod: PodInfo, queued: QueuedPod, scheduler_victims: Sequence[str]) -> PreemptChoice:
        """KAI's reclaim rules over the scheduler's victims, each with its queue and what it counts."""
        kai = self._kai()
        victims: list[SchedulerVictim] = []
        for uid in scheduler_victims:
            counted = self.cache.counted(uid) if self.cache is not None else None
            if counted is None:
                victims.append((uid, None, {}))
                continue
            victim = counted[1]
            victims.append((uid, kai.queue_of(dict(victim.queue_labels)), self._kai_amounts(victim)))
        amounts = kai_amounts({r: int(v) for r, v in queued.requests.items()})
        # The preemptor is pending: its request counts in the division even before the watch shows it.
        unseen = not kai.is_pending(pod.uid) and self.cache is not None and self.cache.counted(pod.uid) is None
        return kai.reclaim_victims(queued.queue, amounts, victims, unseen=unseen)

    def record_preempt(self, pod: PodInfo, node: str, choice: PreemptChoice) -> None:
        queued = self.queued(pod)
        if queued is not None and choice.action != "keep":
            self.record(
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
        if self.config.kai_queues:
            out["kai"] = self._kai().view()
        out["decisions"] = list(self.decisions)
        if self.reclaim_view is not None:
            out["reclaim"] = self.reclaim_view()
        return out

    def record(self, verb: str, pod: PodInfo, queued: QueuedPod, **detail: Any) -> None:
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


class FlavorFairness:
    """The FlavorFairness score plugin, combined with the others by its profile weight.

    It reads queue state the pure scoring plugins cannot see, so it lives on the adapter side; it is
    built only when queues are on, and applies only to pods of a Kueue ClusterQueue (others are
    scored by the rest of the profile).
    """

    name = FLAVOR_FAIRNESS

    def __init__(self, fairness: Fairness) -> None:
        self.fairness = fairness

    def applies(self, pod: PodInfo) -> bool:
        queued = self.fairness.queued(pod)
        # Pods of no ClusterQueue, or requesting nothing it covers, have no flavor to prefer.
        return queued is not None and queued.kind == "kueue" and not queued.missing and bool(queued.covered)

    def score(self, pod: PodInfo, node: NodeInfo) -> int:
        return int(self.fairness.scores(pod, [node.name])[0])

    def score_batch(self, pod: PodInfo, batch: Any) -> Any:
        return self.fairness.scores(pod, batch.names, batch.rows if batch.all_known else None)
