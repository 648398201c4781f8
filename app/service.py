"""The extender verbs over the cache and the scheduling profile, independent of the HTTP framework.

Filter and prioritize are pure reads of the cache; bind is the only verb that writes (the assume
ledger, then the API). Everything between two awaits runs atomically on the event loop, so the fit
re-check and the assumption in bind cannot interleave with another bind or filter.
"""

from __future__ import annotations

import logging
import operator
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

import msgspec
import numpy as np
import numpy.typing as npt

from allocator import AllocationError
from app import wire
from app.bindless import BindlessPods
from app.cache import ClusterCache
from app.config import ExtenderConfiguration
from app.dynamicresources import ClaimWriteError, ClaimWriter, DynamicResources, PodClaims, Reservation
from app.fairness import Fairness, FlavorFairness
from app.metrics import Metrics
from app.objects import ObjectError, pod_from_obj, pod_placement
from app.queues import QueueUsage
from k8s_semantics.quantity import QuantityError
from scoring import priority_scale
from scoring.best_scored import BEST_SCORED, best_scored_batch
from scoring.framework import Code, NodeInfo, PodInfo, Status
from scoring.managed_fit import ManagedResourcesFit, insufficient_reason
from scoring.resources import parse_resource_list
from scoring.table import EXACT_LIMIT, Batch, BatchVerdicts

__all__ = [
    "REASON_NODE_NOT_IN_CACHE",
    "BindError",
    "Binder",
    "ExtenderService",
]

log = logging.getLogger("kube_gpu_extender.decisions")

# Short, reusable reasons: kube-scheduler aggregates identical strings in the FailedScheduling event.
REASON_NODE_NOT_IN_CACHE = "node(s) unknown to the GPU extender"
REASON_INVALID_NODE = "node(s) with invalid allocatable"

_PENDING_PODS = 10_000  # pods seen in /filter, so /bind can assume them before the watch delivers them
_UNPARSABLE: Mapping[str, Any] = {"status.allocatable": "unparsable"}
_POD_MEMO = 64  # parsed pods by request bytes: filter, then prioritize, of the same pod
_SCORE_TAIL = [f"{score}}}".encode() for score in range(11)]  # closes a prebuilt '{"Host":...,"Score":'


class BindError(Exception):
    """A failed Binding. ``definite`` is False when the API may have applied it (timeout, lost reply)."""

    def __init__(self, message: str, *, kind: str = "api", definite: bool = True, bound_to: str | None = None):
        super().__init__(message)
        self.kind = kind
        self.definite = definite
        self.bound_to = bound_to


class Binder(Protocol):
    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None: ...


@dataclass(slots=True)
class _Verdict:
    name: str
    node: NodeInfo | None
    status: Status


class ExtenderService:
    def __init__(
        self,
        config: ExtenderConfiguration,
        cache: ClusterCache,
        binder: Binder,
        metrics: Metrics | None = None,
        *,
        readiness: Callable[[], tuple[bool, str]] | None = None,
        wall_clock: Callable[[], float] = time.time,
        claim_writer: ClaimWriter | None = None,
    ) -> None:
        self.config = config
        self.cache = cache
        self.binder = binder
        self.claim_writer = claim_writer
        # Pods with ResourceClaims are ours to allocate only when DRA is on and claims can be written.
        self.dra = DynamicResources(cache.dra) if config.dra.enabled and claim_writer is not None else None
        cache.dra.proposal_ttl = config.dra.proposalTTLSeconds
        self.metrics = metrics or Metrics()
        self.fairness = Fairness.attach(cache, config.queue_config(), wall_clock)
        self.kueue_source: Any = None  # app.kueue_watch.KueueSource when Kueue's objects are watched
        self.profile = config.build_profile(FlavorFairness(self.fairness))
        self.fit = ManagedResourcesFit(config.managed_resource_names)
        self.readiness = readiness or (lambda: (True, ""))
        self.wall_clock = wall_clock
        self.decisions: deque[dict[str, Any]] = deque(maxlen=config.server.decisionHistory)
        self._pending: OrderedDict[str, PodInfo] = OrderedDict()
        self._pod_memo: OrderedDict[bytes, PodInfo] = OrderedDict()
        # Filter's lag detection (filter_caught_up): the cache generation at which each pod was last left
        # with no node, the generation of the last fruitless wait, and the shortages that contradict
        # kube-scheduler (it counts these resources too, and only sends nodes where they fit).
        self._rejected: OrderedDict[str, int] = OrderedDict()
        self._caught_up_at = -1
        # Reasons a lagging cache gives: a node kube-scheduler knows and we do not yet, or a resource
        # both count that kube-scheduler already saw freed.
        self._lag_reasons = frozenset(
            [REASON_NODE_NOT_IN_CACHE, *(insufficient_reason(r) for r in config.scheduler_counted_resources)]
        )
        self.metrics.register_cache(self._cache_metrics)
        # Pods this filter saw that kube-scheduler's own binder bound (the cache's PodChanged events tell).
        self.bindless = BindlessPods(cache, self.metrics, wall_clock=wall_clock)

    def _cache_metrics(self) -> dict[str, dict[str, float]]:
        return {
            "objects": {kind: float(count) for kind, count in self.cache.counts().items()},
            "ledger": {"size": float(len(self.cache.ledger))},
            "synced": {name: float(state.synced) for name, state in self.cache.sources.items()},
            **(
                {"queue_weighted_share": {key: drs.share for key, drs in self.fairness.usage.shares().items()}}
                if self.fairness is not None
                else {}
            ),
        }

    @property
    def queue_usage(self) -> QueueUsage | None:
        return self.fairness.usage if self.fairness is not None else None

    # ------------------------------------------------------------------ helpers
    def _pod(self, obj: Mapping[str, Any] | bytes) -> PodInfo:
        """Parse the request's pod (memoised by its exact bytes) and remember it for /bind."""
        pod = self._pod_memo.get(obj) if isinstance(obj, bytes) else None
        if pod is None:
            try:
                pod = pod_from_obj(wire.decode_pod(obj) if isinstance(obj, bytes) else obj)
            except ObjectError as exc:
                raise wire.WireError(f"Pod: {exc}") from None
            if isinstance(obj, bytes):
                _remember(self._pod_memo, obj, pod, _POD_MEMO)
        if self.fairness is not None and pod.queue_labels and not self.fairness.has_placement(pod.uid):
            # Only queued pods need nodeSelector/affinity/tolerations (which flavors they may use).
            try:
                raw = wire.decode_pod(obj) if isinstance(obj, bytes) else obj
                self.fairness.remember_placement(pod.uid, pod_placement(raw))
            except ObjectError as exc:
                raise wire.WireError(f"Pod: {exc}") from None
        _remember(self._pending, pod.uid, pod, _PENDING_PODS)
        return pod

    def pod_info(self, raw: bytes) -> PodInfo:
        """The pod of a request body's ``Pod`` bytes as the verbs parse it (memoised by those bytes);
        the simulator reads the pod it just filtered without parsing it again."""
        return self._pod(raw)

    def _node_for(self, pod: PodInfo, name: str, allocatable: Mapping[str, Any] | None) -> NodeInfo | None:
        node = self.cache.node_info(name)
        if node is None and allocatable is not None:
            node = self.cache.node_info_for(name, parse_resource_list(allocatable, "status.allocatable"))
        counted = self.cache.counted(pod.uid)
        if node is not None and counted is not None and counted[0] == name:
            node = _without(node, pod)  # a retried pod must not compete with its own assumption
        return node

    def _verdict(self, pod: PodInfo, name: str, allocatable: Mapping[str, Any] | None) -> _Verdict:
        """One node through the scalar pipeline (the definition the batch path must match)."""
        try:
            node = self._node_for(pod, name, allocatable)
        except (QuantityError, wire.WireError):
            return _Verdict(name, None, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, REASON_INVALID_NODE))
        if node is None:
            return _Verdict(name, None, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, REASON_NODE_NOT_IN_CACHE))
        return _Verdict(name, node, self.profile.filter(pod, node))

    def _verdicts(self, pod: PodInfo, args: wire.ExtenderArgs) -> Iterator[_Verdict]:
        candidates = _Candidates.of(args)
        for name in candidates.names:
            yield self._verdict(pod, name, candidates.allocatable(name))

    def _candidates(self, pod: PodInfo, args: wire.ExtenderArgs) -> tuple[_Candidates, Batch | None]:
        """Candidates in request order, each once, and their table rows (None: use the scalar path)."""
        candidates = _Candidates.of(args, dedupe=False)
        if not self._exact(pod):
            return _Candidates.of(args), None
        batch = self._batch(pod, candidates.names)
        if batch is None or (not batch.known.all() and _repeats(candidates.names, batch)):
            candidates = _Candidates.of(args)  # repeated names: dedupe (rare), then gather again
            batch = self._batch(pod, candidates.names)
        return candidates, batch

    def _exact(self, pod: PodInfo) -> bool:
        """Whether the node table answers exactly for this pod (else the scalar path judges)."""
        return self.cache.table.exact and all(abs(v) < EXACT_LIMIT for v in pod.resources.requests.values())

    def _batch(self, pod: PodInfo, names: list[str]) -> Batch | None:
        """The table rows of ``names``, with this pod's own requests discounted where it is counted."""
        counted = self.cache.counted(pod.uid)
        return self.cache.table.batch(names, (counted[0], pod.resources) if counted else None)

    def _filter_verdicts(
        self, pod: PodInfo, args: wire.ExtenderArgs
    ) -> tuple[_Candidates, Batch | None, BatchVerdicts]:
        """Verdicts for all candidates: batched from the node table, one by one for unknown nodes."""
        candidates, batch = self._candidates(pod, args)
        names = candidates.names
        if batch is None:
            verdicts = BatchVerdicts.passing(len(names))
            for position, name in enumerate(names):
                verdicts.set(position, self._verdict(pod, name, candidates.allocatable(name)).status)
            return candidates, batch, verdicts
        verdicts = self.profile.filter_batch(pod, batch)
        for position in np.flatnonzero(~batch.known).tolist():
            name = names[position]
            verdicts.set(position, self._verdict(pod, name, candidates.allocatable(name)).status)
        if batch.known.all():
            verdicts.rows = batch.rows
        return candidates, batch, verdicts

    def _record(
        self, verb: str, pod: str, outcome: str, *, level: int = logging.DEBUG, msg: str = "decision", **detail: Any
    ) -> None:
        """Keep a decision for /debug and log it: DEBUG for the per-request ones (filter, prioritize),
        INFO for those that change state (binds, preemption), WARNING for failed binds."""
        entry = {"time": self.wall_clock(), "verb": verb, "pod": pod, "outcome": outcome, **detail}
        self.decisions.append(entry)
        self.metrics.results.labels(verb, outcome).inc()
        if log.isEnabledFor(level):
            log.log(level, msg, extra={"decision": entry})

    def not_ready_reason(self) -> str:
        ready, reason = self.readiness()
        return "" if ready else reason

    def ready_detail(self) -> str:
        """/readyz's detail while ready: "ready", plus what an operator must know although it is."""
        warning = self.bindless.warning()
        return f"ready; warning: {warning}" if warning else "ready"

    # ------------------------------------------------------------------ filter
    def filter(self, body: bytes) -> dict[str, Any]:
        return self._filter(body)[0]

    async def filter_caught_up(self, body: bytes) -> dict[str, Any]:
        """``filter``, judged once more after the cache changes when the answer may come from a cache
        that lags kube-scheduler's.

        kube-scheduler retries an unschedulable pod on a cluster event (a pod deleted, say) that its own
        informer saw a moment before our watch did. Rejected again on our stale count, the pod would wait
        for the next event, which in a quiet cluster comes only with the 5-minute flush. So when no node
        passes and either this pod was rejected before with nothing changed since, or a node
        kube-scheduler passed is short of a resource both count, wait up to ``cache.catchUpSeconds`` for
        the cache to move. A wait that times out is not repeated until the cache changes, so an idle
        backlog costs at most one wait per change.
        """
        generation = self.cache.generation
        result, suspect = self._filter(body)
        timeout = self.config.cache.catchUpSeconds
        if not suspect or timeout <= 0 or self._caught_up_at == generation:
            return result
        if await self.cache.changed_after(generation, timeout):
            self.metrics.filter_catch_up.labels("changed").inc()
            return self._filter(body)[0]
        self.metrics.filter_catch_up.labels("unchanged").inc()
        self._caught_up_at = generation
        return result

    def _filter(self, body: bytes) -> tuple[dict[str, Any], bool]:
        """The filter answer, and whether it may come from a cache that lags kube-scheduler's."""
        try:
            args = wire.decode_extender_args(body)
            pod = self._pod(args.pod_raw)
        except wire.WireError as exc:
            self._record("filter", "?", "error", error=str(exc))
            return wire.filter_result(error=f"invalid filter request: {exc}"), False
        self.bindless.filtered(pod)
        not_ready = self.not_ready_reason()
        if not_ready:
            if self.config.cache.notReadyPolicy == "Fail":
                self._record("filter", pod.key, "not-ready", error=not_ready)
                return wire.filter_result(error=f"GPU extender not ready: {not_ready}"), False
            self._record("filter", pod.key, "not-ready-pass", error=not_ready)
            candidates = _Candidates.of(args)
            return candidates.result(candidates.names), False
        candidates, batch, verdicts = self._filter_verdicts(pod, args)
        names = candidates.names
        if self.dra is not None and (pod.claims or pod.claims_pending):
            try:
                self._filter_claims(pod, names, verdicts)
            except AllocationError as exc:
                self._record("filter", pod.key, "error", error=str(exc))
                return wire.filter_result(error=f"cannot allocate the claims of pod {pod.key}: {exc}"), False
        passed = verdicts.passed(names)
        quota = self._quota_rejections(pod, passed)
        failed = verdicts.failed(names, Code.UNSCHEDULABLE)
        unresolvable = verdicts.failed(names, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)
        if quota:
            passed = [n for n in passed if n not in quota]
            for name, (hard, reason) in quota.items():
                (unresolvable if hard else failed)[name] = reason
        feasible = len(passed)
        if self.config.filterReturns == BEST_SCORED and len(passed) > 1:
            keep = verdicts.codes == 0
            if quota:
                keep &= np.array([name not in quota for name in names], dtype=np.bool_)
            subset = None if batch is None else batch.subset(keep)
            passed = self._best_scored(pod, candidates.subset(passed), subset)  # the others: left out, not failed
        elif verdicts.rows is not None and not quota:  # prioritize will ask about exactly these
            self.cache.table.remember(passed, verdicts.rows[verdicts.codes == 0])
        reasons = verdicts.reason_counts()
        for reason, count in reasons.items():
            self.metrics.filter_failures.labels(reason).inc(count)
        if feasible != len(passed):
            self._record("filter", pod.key, "ok", passed=len(passed), feasible=feasible, failed=reasons)
        else:
            self._record("filter", pod.key, "ok", passed=len(passed), failed=reasons)
        suspect = False
        if passed or not names:
            self._rejected.pop(pod.uid, None)
        else:
            suspect = self._rejected.get(pod.uid) == self.cache.generation or not self._lag_reasons.isdisjoint(reasons)
            self._rejected[pod.uid] = self.cache.generation
            self._rejected.move_to_end(pod.uid)
            while len(self._rejected) > _PENDING_PODS:
                self._rejected.popitem(last=False)
        return candidates.result(passed, failed, unresolvable), suspect

    def _filter_claims(self, pod: PodInfo, names: list[str], verdicts: BatchVerdicts) -> None:
        """DynamicResources on the nodes that passed so far (it is the most expensive check)."""
        assert self.dra is not None
        positions = np.flatnonzero(verdicts.codes == 0).tolist()
        claims = self.dra.prefilter(pod)
        if isinstance(claims, Status):
            for position in positions:
                verdicts.set(position, claims)
            return
        by_name = {names[position]: position for position in positions}
        for name, status in self.dra.filter_nodes(pod, claims, list(by_name)).items():
            verdicts.set(by_name[name], status)

    def _quota_rejections(self, pod: PodInfo, names: list[str]) -> dict[str, tuple[bool, str]]:
        """Queues (app/fairness.py): nodes whose flavor the pod's queue may not use or has no quota left on."""
        if self.fairness is None or not pod.queue_labels:
            return {}
        return self.fairness.filter(pod, names)

    # ------------------------------------------------------------------ prioritize
    def prioritize(self, body: bytes, plugin: str | None = None) -> list[dict[str, Any]] | msgspec.Raw:
        """``HostPriorityList`` (as JSON-ready objects or prebuilt bytes); on trouble ``[]``
        (kube-scheduler ignores prioritize errors anyway)."""
        try:
            args = wire.decode_extender_args(body)
            pod = self._pod(args.pod_raw)
        except wire.WireError as exc:
            self._record("prioritize", "?", "error", error=str(exc))
            return []
        not_ready = self.not_ready_reason()
        if not_ready:
            self._record("prioritize", pod.key, "not-ready", error=not_ready)
            return []
        candidates, batch = self._candidates(pod, args)
        names = candidates.names
        priorities = self._priorities(pod, candidates, batch, plugin)
        self._record("prioritize", pod.key, "ok", plugin=plugin or "", nodes=len(names))
        if batch is not None and batch.known.all():
            # Prebuilt per-node JSON from the table: no dict per node, no re-encoding of names.
            prefixes = map(self.cache.table.host_prefix.__getitem__, batch.rows.tolist())
            body = b",".join(map(operator.add, prefixes, map(_SCORE_TAIL.__getitem__, priorities)))
            return msgspec.Raw(b"[" + body + b"]")
        return [{"Host": name, "Score": score} for name, score in zip(names, priorities, strict=True)]

    def _priorities(self, pod: PodInfo, candidates: _Candidates, batch: Batch | None, plugin: str | None) -> list[int]:
        """0..10 per candidate: the profile's 0..100 node scores through the configured priority scale."""
        scores, known = self._node_scores(pod, candidates, batch, plugin)
        result: list[int] = priority_scale.scale_batch(self.config.priorityScale, scores, known).tolist()
        return result

    def _node_scores(
        self, pod: PodInfo, candidates: _Candidates, batch: Batch | None, plugin: str | None
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
        """The profile's 0..100 score per candidate, and whether the node could be scored at all."""
        names = candidates.names
        scores = None if batch is None else self.profile.node_scores_batch(pod, batch, plugin)
        if scores is None or batch is None:
            scores = np.zeros(len(names), dtype=np.int64)
            known = np.zeros(len(names), dtype=np.bool_)
        else:
            known = batch.known.copy()
        for position in np.flatnonzero(~known).tolist():
            name = names[position]
            score = self._node_score(pod, name, candidates.allocatable(name), plugin)
            if score is not None:
                scores[position], known[position] = score, True
        return scores, known

    def _best_scored(self, pod: PodInfo, candidates: _Candidates, batch: Batch | None) -> list[str]:
        """``filterReturns: BestScored``: the candidates the profile scores highest (prioritize then
        asks about these, so the table remembers their rows)."""
        scores, known = self._node_scores(pod, candidates, batch, None)
        keep = best_scored_batch(scores, known)
        best = [name for name, kept in zip(candidates.names, keep.tolist(), strict=True) if kept]
        if batch is not None and batch.known.all():
            self.cache.table.remember(best, batch.rows[keep])
        return best

    def _node_score(
        self, pod: PodInfo, name: str, allocatable: Mapping[str, Any] | None, plugin: str | None
    ) -> int | None:
        """One node's 0..100 score; None when the node is unknown or its allocatable invalid."""
        try:
            node = self._node_for(pod, name, allocatable)
        except (QuantityError, wire.WireError):
            return None
        return None if node is None else self.profile.node_score(pod, node, plugin)

    # ------------------------------------------------------------------ preempt
    def preempt(self, body: bytes) -> dict[str, Any]:
        """Per candidate node: for a queued pod, the fair-sharing victims instead of the scheduler's
        (or the node dropped when there is no valid set); then keep the node only if, without its
        victims, the pod fits our managed resources."""
        try:
            args = wire.decode_preempt_args(body)
            pod = self._pod(args.pod)
        except wire.WireError as exc:
            self._record(
                "preempt", "?", "error", level=logging.WARNING, msg=f"invalid preempt request: {exc}", error=str(exc)
            )
            # ExtenderPreemptionResult has no Error field: an empty map ends preemption for this pod.
            return {"NodeNameToMetaVictims": {}, "Error": f"invalid preempt request: {exc}"}
        not_ready = self.not_ready_reason()
        result: dict[str, Any] = {}
        dropped: dict[str, str] = {}
        fairness = self.fairness
        for node_name, victims in args.victims.items():
            uids = victims.uids
            if not_ready:
                result[node_name] = _meta_victims(uids, victims.num_pdb_violations)  # cannot judge: unchanged
                continue
            node = self.cache.node_info(node_name)
            if node is None:
                dropped[node_name] = REASON_NODE_NOT_IN_CACHE
                continue
            choice = fairness.preempt_choice(pod, node_name, uids) if fairness is not None else None
            if fairness is not None and choice is not None:
                fairness.record_preempt(pod, node_name, choice)
                if choice.action == "drop":
                    dropped[node_name] = choice.reason
                    continue
                if choice.action == "replace":
                    uids = list(choice.victims)  # the scheduler's PDB count is kept: we do not see PDBs
            requested = dict(node.requested)
            for uid in {*uids, pod.uid}:  # the preemptor too, if already assumed there
                counted = self.cache.counted(uid)
                if counted is None or counted[0] != node_name:
                    continue  # not counted on this node: nothing to give back
                for resource, amount in counted[1].resources.requests.items():
                    requested[resource] = requested.get(resource, 0) - amount
            status = self.fit.fits(pod, node.allocatable, requested)
            if status.passed:
                result[node_name] = _meta_victims(uids, victims.num_pdb_violations)
            elif choice is not None and choice.action == "replace":
                dropped[node_name] = f"the queue victims do not free enough of the node: {status.reason}"
            else:
                dropped[node_name] = status.reason
        self._record(
            "preempt",
            pod.key,
            "ok",
            level=logging.INFO,
            msg=f"preempt {pod.key}: victims kept on {len(result)} node(s), {len(dropped)} node(s) dropped",
            kept=sorted(result),
            dropped=dropped,
        )
        return {"NodeNameToMetaVictims": result}

    # ------------------------------------------------------------------ bind
    async def bind(self, body: bytes) -> dict[str, Any]:
        try:
            args = wire.decode_bind_args(body)
        except wire.WireError as exc:
            self._record(
                "bind",
                "?",
                "error",
                level=logging.WARNING,
                msg=f"bind failed: invalid bind request: {exc}",
                error=str(exc),
            )
            return {"Error": f"invalid bind request: {exc}"}
        key = f"{args.pod_namespace}/{args.pod_name}"
        pod = self.cache.pods.get(args.pod_uid) or self._pending.get(args.pod_uid)
        if pod is None:
            return self._bind_failed(key, "unknown-pod", f"pod {key} (uid {args.pod_uid}) is unknown to the extender")
        if (pod.namespace, pod.name) != (args.pod_namespace, args.pod_name):
            return self._bind_failed(key, "mismatch", f"pod uid {args.pod_uid} belongs to {pod.key}, not {key}")
        if pod.node_name == args.node:
            self._record("bind", key, "already-bound", level=logging.INFO, msg=_already(key, args.node), node=args.node)
            return {"Error": ""}
        if pod.node_name:
            return self._bind_failed(key, "bound-elsewhere", f"pod {key} is already bound to node {pod.node_name}")
        if args.node not in self.cache.nodes:
            return self._bind_failed(key, "unknown-node", f"node {args.node} is unknown to the extender")
        refusal = self.fairness.admits(pod, args.node) if self.fairness is not None else None
        if refusal is not None:
            return self._bind_failed(
                key, "quota", f"the queue of pod {key} can no longer use node {args.node}: {refusal}"
            )
        status = self.cache.assume(pod, args.node, check=lambda node: self.fit.filter(pod, node))
        if status is not None:
            return self._bind_failed(key, "no-fit", f"node {args.node} no longer fits pod {key}: {status.reason}")
        self.bindless.assumed(args.pod_uid, args.node)  # from here on a Binding to this node is ours
        # Reserve: the devices are in flight before the first await, like the assumption above.
        reservation: Reservation | None = None
        if self.dra is not None and (pod.claims or pod.claims_pending):
            try:
                chosen = self.dra.reserve(pod, args.node)
            except AllocationError as exc:
                chosen = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, str(exc))
            if isinstance(chosen, Status):
                self._release(args.pod_uid, args.node)
                return self._bind_failed(
                    key, "no-fit", f"node {args.node} cannot take the claims of pod {key}: {chosen.reason}"
                )
            reservation = chosen
            try:
                assert self.claim_writer is not None
                await self.dra.prebind(pod, reservation, self.claim_writer)
            except ClaimWriteError as exc:
                if exc.definite:
                    self._release(args.pod_uid, args.node)
                return self._bind_failed(key, "claim-write", f"writing the claims of pod {key} failed: {exc}")
        try:
            await self.binder.bind(args.pod_namespace, args.pod_name, args.pod_uid, args.node)
        except BindError as exc:
            if exc.bound_to == args.node:
                self._record(
                    "bind", key, "already-bound", level=logging.INFO, msg=_already(key, args.node), node=args.node
                )
                return {"Error": ""}
            if exc.definite:
                self._release(args.pod_uid, args.node)  # the API refused: release what we assumed
                if reservation is not None and not reservation.empty:
                    assert self.dra is not None and self.claim_writer is not None
                    await self.dra.unreserve(pod, self.dra.written(reservation), self.claim_writer)
            return self._bind_failed(key, exc.kind, f"binding pod {key} to node {args.node} failed: {exc}")
        self._record("bind", key, "bound", level=logging.INFO, msg=f"bound {key} to node {args.node}", node=args.node)
        if self.fairness is not None and pod.queue_labels:
            self.fairness.record_bind(pod, args.node)
        return {"Error": ""}

    def _release(self, uid: str, node: str) -> None:
        """Drop an assumption after a bind that failed for certain: a Binding to ``node`` is not ours."""
        self.cache.forget(uid)
        self.bindless.released(uid, node)

    def _bind_failed(self, key: str, kind: str, message: str) -> dict[str, Any]:
        self.metrics.bind_errors.labels(kind).inc()
        self._record("bind", key, "error", level=logging.WARNING, msg=f"bind failed: {message}", error=message)
        return {"Error": message}

    # ------------------------------------------------------------------ explain
    def explain(self, body: bytes) -> dict[str, Any]:
        """Per node: the filter verdict, each plugin's raw 0..100 score, the 0..10 score /prioritize would give
        among the nodes that pass (null for the others), and for
        a queued pod the fairness verdict (queue, flavors, quota verdict, FlavorFairness score)."""
        args = wire.decode_extender_args(body)
        pod = self._pod(args.pod_raw)
        claims: PodClaims | Status | None = None
        if self.dra is not None and (pod.claims or pod.claims_pending):
            claims = self.dra.prefilter(pod)
        nodes = []
        verdicts = list(self._verdicts(pod, args))
        fairness = {} if self.fairness is None else self.fairness.explain(pod, [v.name for v in verdicts])
        scores = {v.name: self.profile.score(pod, v.node) for v in verdicts if v.node is not None and v.status.passed}
        # Priorities as /prioritize would give them for the nodes that pass filter.
        ranked = list(scores)
        scaled = priority_scale.scale(self.config.priorityScale, [scores[n].node_score for n in ranked])
        priorities = dict(zip(ranked, scaled, strict=True))
        for verdict in verdicts:
            entry: dict[str, Any] = {
                "name": verdict.name,
                "filter": {
                    "passed": verdict.status.passed,
                    "reason": verdict.status.reason,
                    "code": verdict.status.code.value,
                },
            }
            if verdict.node is not None:
                score = scores.get(verdict.name) or self.profile.score(pod, verdict.node)
                entry.update(
                    scores=dict(score.plugin_scores),
                    nodeScore=score.node_score,
                    score=priorities.get(verdict.name),
                    managed={
                        r: {
                            "allocatable": verdict.node.allocatable.get(r, 0),
                            "requested": verdict.node.requested.get(r, 0),
                            "pod": pod.resources.requests.get(r, 0),
                        }
                        for r in self.fit.resources
                    },
                )
            if isinstance(claims, Status):
                entry["dra"] = {"passed": False, "reason": claims.reason}
            elif claims is not None and self.dra is not None:
                entry["dra"] = self.dra.explain(pod, claims, verdict.name)
            if verdict.name in fairness:
                entry["fairness"] = fairness[verdict.name]
            nodes.append(entry)
        return {"pod": pod.key, "notReady": self.not_ready_reason(), "nodes": nodes}


def _already(key: str, node: str) -> str:
    return f"{key} was already bound to node {node} (a retried bind): success"


def _meta_victims(uids: list[str], pdb_violations: int) -> dict[str, Any]:
    """One node's ``MetaVictims``: the victims by UID."""
    return {"Pods": [{"UID": uid} for uid in uids], "NumPDBViolations": pdb_violations}


def _without(node: NodeInfo, pod: PodInfo) -> NodeInfo:
    requested = dict(node.requested)
    for name, amount in pod.resources.requests.items():
        requested[name] = requested.get(name, 0) - amount
    return replace(
        node,
        requested=requested,
        non_zero_cpu=node.non_zero_cpu - pod.resources.non_zero_cpu,
        non_zero_memory=node.non_zero_memory - pod.resources.non_zero_memory,
        pod_count=node.pod_count - 1,
    )


@dataclass(frozen=True, slots=True)
class _Candidates:
    """Candidate names in request order, each once; in NodeList mode also their allocatable."""

    names: list[str]
    by_name: dict[str, wire.RequestNode] | None = None

    @staticmethod
    def of(args: wire.ExtenderArgs, *, dedupe: bool = True) -> _Candidates:
        if args.node_names is not None:
            return _Candidates(list(dict.fromkeys(args.node_names)) if dedupe else args.node_names)
        by_name: dict[str, wire.RequestNode] = {}
        for node in args.nodes or ():
            by_name.setdefault(node.name, node)  # the first occurrence wins; dicts keep that order
        return _Candidates(list(by_name), by_name)

    def result(
        self,
        passed: list[str],
        failed: Mapping[str, str] | None = None,
        unresolvable: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """The filter answer in the request's mode: names, or the request's Node objects unchanged."""
        if self.by_name is None:
            return wire.filter_result(node_names=passed, failed=failed, unresolvable=unresolvable)
        nodes = [self.by_name[name].raw for name in passed]
        return wire.filter_result(nodes=nodes, failed=failed, unresolvable=unresolvable)

    def subset(self, names: list[str]) -> _Candidates:
        """These candidates only (``names`` come from this request, each once)."""
        if self.by_name is None:
            return _Candidates(names)
        return _Candidates(names, {name: self.by_name[name] for name in names})

    def allocatable(self, name: str) -> Mapping[str, Any] | None:
        if self.by_name is None:
            return None
        try:
            return self.by_name[name].allocatable or {}
        except wire.WireError:
            return _UNPARSABLE  # judged like an invalid quantity: "node(s) with invalid allocatable"


def _remember(lru: OrderedDict[Any, PodInfo], key: Any, pod: PodInfo, limit: int) -> None:
    """Insert or refresh ``key`` in a bounded least-recently-used map."""
    lru[key] = pod
    lru.move_to_end(key)
    while len(lru) > limit:
        lru.popitem(last=False)


def _repeats(names: list[str], batch: Batch) -> bool:
    """Whether names unknown to the table repeat (the table itself reports repeated known names)."""
    unknown = [names[i] for i in np.flatnonzero(~batch.known).tolist()]
    return len(set(unknown)) < len(unknown)
