"""The extender verbs over the cache and the scheduling profile, independent of the HTTP framework.

Filter and prioritize are pure reads of the cache; bind (``app.bind``) is the only verb that writes
(the assume ledger, then the API). Everything between two awaits runs atomically on the event loop,
so the fit re-check and the assumption in bind cannot interleave with another bind or filter.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from app.bind import Binder, BindVerb
from app.cluster.bindless import BindlessPods
from app.cluster.cache import ClusterCache
from app.cluster.objects import ObjectError, pod_from_obj
from app.cluster.requeue import Requeuer
from app.config import ExtenderConfiguration
from app.http import go_layout, wire
from app.operator.metrics import Metrics
from app.pipeline.build import build_pipeline
from app.pipeline.claims import DraClaims
from app.pipeline.dynamicresources import ClaimWriter
from app.pipeline.fairness import Fairness
from app.pipeline.framework import FilterCycle, FilterError, Pipeline
from app.pipeline.gangs import Gangs
from app.pipeline.nodes import REASON_NODE_NOT_IN_CACHE
from app.pipeline.queues import Queues
from fairshare.usage import QueueUsage
from scoring.best_scored import BEST_SCORED
from scoring.framework import Code, PodInfo
from scoring.managed_fit import ManagedResourcesFit, insufficient_reason
from scoring.profile import Profile
from scoring.table import Batch
from scoring.tie_break import TiePick
from scoring.verdicts import BatchVerdicts

__all__ = [
    "REASON_NODE_NOT_IN_CACHE",
    "Binder",
    "ExtenderService",
]

log = logging.getLogger("kube_gpu_extender.decisions")

_PENDING_PODS = 10_000  # pods seen in /filter, so /bind can assume them before the watch delivers them
_POD_MEMO = 64  # parsed pods by request bytes: filter, then prioritize, of the same pod


def _closed(*args: Any, **kwargs: Any) -> None:
    """A closed service's record: decisions after ``close`` are not kept."""


class ExtenderService:
    """The verbs: each runs the pipeline's extension points over its participants (app/pipeline).
    ``tie_pick``: ``tieBreak.random``'s pick among tied nodes (None: a position drawn at random; the
    simulator passes its model of kube-scheduler's pick)."""

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
        tie_pick: TiePick | None = None,
    ) -> None:
        self.config = config
        self.cache = cache
        self.metrics = metrics or Metrics()
        self._pipeline, self.resources = build_pipeline(config, cache, claim_writer, wall_clock, tie_pick)
        self.kueue_source: Any = None  # app.cluster.kueue_watch.KueueSource when Kueue's objects are watched
        self.requeuer: Requeuer | None = None  # cluster mode: asks kube-scheduler to retry rejected pods
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
        self._bind_verb = BindVerb(
            cache, self._pipeline, binder, self.bindless, self.metrics, self._record, self._pending
        )

    def close(self) -> None:
        """Done with this service: nothing calls back into it any more (the cache's subscribers and
        listeners, the metrics' collector, the bind verb's record), so that it and its cache, made for
        one simulation run, are freed by reference counting when they go. Why: otherwise they wait
        for a full collection, which for an openb run's cache takes about a third of a second."""
        self.cache.close()
        self.metrics.close()
        self._bind_verb.record = _closed

    def _cache_metrics(self) -> dict[str, dict[str, float]]:
        gauges = {
            "objects": {kind: float(count) for kind, count in self.cache.counts().items()},
            "ledger": {"size": float(len(self.cache.ledger))},
            "synced": {name: float(state.synced) for name, state in self.cache.sources.items()},
        }
        for participant in self.pipeline.at("metrics"):
            gauges.update(participant.metrics())
        return gauges

    # The participants, for the operator surface (/debug, Kueue watches) and tests.
    @property
    def profile(self) -> Profile:
        return self.resources.profile

    @property
    def fit(self) -> ManagedResourcesFit:
        return self.resources.fit

    @property
    def fairness(self) -> Fairness | None:
        queues = self.pipeline.get(Queues)
        return queues.fairness if queues is not None else None

    @property
    def queue_usage(self) -> QueueUsage | None:
        fairness = self.fairness
        return fairness.usage if fairness is not None else None

    def binding_waits(self) -> list[dict[str, Any]]:
        """/bind calls waiting for their devices' binding conditions (for /debug)."""
        claims = self.pipeline.get(DraClaims)
        return claims.binding_waits() if claims is not None else []

    def gangs_view(self) -> dict[str, Any]:
        """The gangs' plans in force, their holds and recent decisions (for /debug and the console)."""
        gangs = self.pipeline.get(Gangs)
        return gangs.view() if gangs is not None else {"enabled": False, "groups": [], "decisions": []}

    @property
    def claim_writer(self) -> ClaimWriter | None:
        claims = self.pipeline.get(DraClaims)
        return claims.writer if claims is not None else None

    # ------------------------------------------------------------------ helpers
    def _pod(self, obj: Mapping[str, Any] | bytes) -> PodInfo:
        """Parse the request's pod (memoised by its exact bytes), let the participants read what they
        need of it, and remember it for /bind."""
        pod = self._pod_memo.get(obj) if isinstance(obj, bytes) else None
        if pod is None and isinstance(obj, bytes):
            pod = self._cached_pod(obj)
        if pod is None:
            try:
                pod = pod_from_obj(wire.decode_pod(obj) if isinstance(obj, bytes) else obj)
            except ObjectError as exc:
                raise wire.WireError(f"Pod: {exc}") from None
            if isinstance(obj, bytes):
                _remember(self._pod_memo, obj, pod, _POD_MEMO)
        for participant in self.pipeline.at("prepare", pod):
            participant.prepare(pod, obj)
        _remember(self._pending, pod.uid, pod, _PENDING_PODS)
        return pod

    def _cached_pod(self, raw: bytes) -> PodInfo | None:
        """The cache's pending pod when the request's Pod is that very version of it (same UID and
        resourceVersion: the API server's copy kube-scheduler received, as our watch did)."""
        uid, version = wire.pod_identity(raw)
        cached = self.cache.pods.get(uid) if version else None
        if cached is None or cached.resource_version != version or cached.node_name:
            return None
        return cached

    def pod_info(self, raw: bytes) -> PodInfo:
        """The pod of a request body's ``Pod`` bytes as the verbs parse it (memoised by those bytes);
        the simulator reads the pod it just filtered without parsing it again."""
        return self._pod(raw)

    def _record(
        self, verb: str, pod: str, outcome: str, *, level: int = logging.DEBUG, msg: str = "decision", **detail: Any
    ) -> None:
        """Keep a decision for /debug and log it: DEBUG for the per-request ones (filter, prioritize),
        INFO for those that change state (binds, preemption), WARNING for failed binds."""
        entry = {"time": self.wall_clock(), "verb": verb, "pod": pod, "outcome": outcome, **detail}
        self.decisions.append(entry)
        self.metrics.result(verb, outcome).inc()
        if log.isEnabledFor(level):
            log.log(level, msg, extra={"decision": entry})

    def record(self, verb: str, pod: str, outcome: str, **detail: Any) -> None:
        """A decision made outside the verbs (the requeuer's), kept for /debug and logged at INFO."""
        self._record(verb, pod, outcome, level=logging.INFO, **detail)

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
        answer = self.filter_or_wait(body)
        return answer if isinstance(answer, dict) else await answer

    def filter_or_wait(self, body: bytes) -> dict[str, Any] | Coroutine[Any, Any, dict[str, Any]]:
        """``filter_caught_up``'s answer when it needs no wait (nearly always), else the coroutine that
        waits for the cache and answers: the HTTP front answers without a task when it can."""
        generation = self.cache.generation
        result, suspect = self._filter(body)
        timeout = self.config.cache.catchUpSeconds
        if not suspect or timeout <= 0 or self._caught_up_at == generation:
            return result
        return self._filter_after_change(body, generation, timeout, result)

    async def _filter_after_change(
        self, body: bytes, generation: int, timeout: float, result: dict[str, Any]
    ) -> dict[str, Any]:
        if await self.cache.changed_after(generation, timeout):
            self.metrics.filter_catch_up.labels("changed").inc()
            return self._filter(body)[0]
        self.metrics.filter_catch_up.labels("unchanged").inc()
        self._caught_up_at = generation
        return result

    def filter_passed(self, body: bytes) -> list[str]:
        """The nodes ``filter`` passes, for an in-process caller that reads nothing else (the
        simulator): the same verdicts, without the per-node failure reasons of the wire answer."""
        passed: list[str] | None = self._filter(body, reasons=False)[0]["NodeNames"]
        return passed or []

    def _filter(self, body: bytes, *, reasons: bool = True) -> tuple[dict[str, Any], bool]:
        """The filter answer, and whether it may come from a cache that lags kube-scheduler's;
        ``reasons``: False leaves the per-node failure reasons out of it."""
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
            candidates = wire.Candidates.of(args)
            return candidates.result(candidates.names), False
        candidates, batch = self.resources.nodes.gather(pod, args)
        cycle = FilterCycle(pod, candidates, batch, BatchVerdicts.passing(len(candidates.names)))
        try:
            for participant in self.pipeline.at("filter", pod):
                participant.filter(cycle)
        except FilterError as exc:
            self._record("filter", pod.key, "error", error=str(exc))
            return wire.filter_result(error=str(exc)), False
        names, verdicts = candidates.names, cycle.verdicts
        keep = verdicts.codes == 0
        feasible = int(np.count_nonzero(keep))
        if self.config.filterReturns == BEST_SCORED and feasible > 1:  # the others: left out
            if batch is not None and 8 * feasible >= len(names):  # not few: score all, mask the rest
                passed = self.resources.best_scored(pod, candidates, batch, keep)
            else:
                passed = verdicts.passed(names)
                subset = None if batch is None else batch.subset(keep, passed)
                passed = self.resources.best_scored(pod, candidates.subset(passed), subset)
        elif batch is not None and batch.all_known:  # prioritize will ask about exactly these
            passed = verdicts.passed(names, self.cache.table.names_array(names))
            self.cache.table.remember(passed, batch.rows[keep])
            go_layout.remember_node_names(wire.encode(passed), passed)
        else:
            passed = verdicts.passed(names)
        failures = verdicts.reason_counts()
        for reason, count in failures.items():
            self.metrics.filter_failure(reason).inc(count)
        if feasible != len(passed):
            self._record("filter", pod.key, "ok", passed=len(passed), feasible=feasible, failed=failures)
        else:
            self._record("filter", pod.key, "ok", passed=len(passed), failed=failures)
        suspect = False
        if passed or not names:
            self._rejected.pop(pod.uid, None)
            if self.requeuer is not None:
                self.requeuer.passed(pod.uid)
        else:
            if self.requeuer is not None:
                self.requeuer.rejected(pod)
            suspect = self._rejected.get(pod.uid) == self.cache.generation or not self._lag_reasons.isdisjoint(failures)
            self._rejected[pod.uid] = self.cache.generation
            self._rejected.move_to_end(pod.uid)
            while len(self._rejected) > _PENDING_PODS:
                self._rejected.popitem(last=False)
        if not reasons or (passed and self.config.filterFailures == "WhenUnschedulable"):
            return candidates.result(passed), suspect  # the reasons would be read by nobody
        failed = self.resources.nodes.node_reasons(verdicts, names, batch, Code.UNSCHEDULABLE)
        unresolvable = self.resources.nodes.node_reasons(verdicts, names, batch, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)
        return candidates.result(passed, failed, unresolvable), suspect

    # ------------------------------------------------------------------ prioritize
    def prioritize(self, body: bytes, plugin: str | None = None) -> list[dict[str, Any]] | msgspec.Raw:
        """``HostPriorityList`` (as JSON-ready objects or prebuilt bytes); on trouble ``[]``
        (kube-scheduler ignores prioritize errors anyway)."""
        decided = self._prioritize(body, plugin)
        if decided is None:
            return []
        candidates, batch, priorities = decided
        if batch is not None and batch.all_known:
            return wire.host_priority_raw(self.cache.table.host_prefixes(batch.names, batch.rows), priorities)
        return wire.host_priority_list(candidates.names, priorities.tolist())

    def priorities(self, body: bytes) -> tuple[Sequence[str], npt.NDArray[np.int64]]:
        """/prioritize's answer before it is encoded: hosts and their 0..10 priorities, in order (none
        on trouble). The simulator reads it so; the decision is the verb's own."""
        decided = self._prioritize(body, None)
        if decided is None:
            return (), np.zeros(0, dtype=np.int64)
        return decided[0].names, decided[2]

    def _prioritize(
        self, body: bytes, plugin: str | None
    ) -> tuple[wire.Candidates, Batch | None, npt.NDArray[np.int64]] | None:
        try:
            args = wire.decode_extender_args(body)
            pod = self._pod(args.pod_raw)
        except wire.WireError as exc:
            self._record("prioritize", "?", "error", error=str(exc))
            return None
        not_ready = self.not_ready_reason()
        if not_ready:
            self._record("prioritize", pod.key, "not-ready", error=not_ready)
            return None
        candidates, batch = self.resources.nodes.gather(pod, args)
        priorities = self.resources.priorities(pod, candidates, batch, plugin)
        self._record("prioritize", pod.key, "ok", plugin=plugin or "", nodes=len(candidates.names))
        return candidates, batch, priorities

    # ------------------------------------------------------------------ preempt
    def preempt(self, body: bytes) -> dict[str, Any]:
        """Per candidate node: the participants may choose other victims (queues: fair sharing) or
        drop the node; then the node is kept only if evicting the victims lets the pod fit."""
        try:
            args = wire.decode_preempt_args(body)
            pod = self._pod(args.pod)
        except wire.WireError as exc:
            self._record(
                "preempt", "?", "error", level=logging.WARNING, msg=f"invalid preempt request: {exc}", error=str(exc)
            )
            return wire.preempt_result({}, error=f"invalid preempt request: {exc}")
        not_ready = self.not_ready_reason()
        result: dict[str, Any] = {}
        dropped: dict[str, str] = {}
        for node_name, victims in args.victims.items():
            if not_ready:  # cannot judge: unchanged
                result[node_name] = wire.meta_victims(victims.uids, victims.num_pdb_violations)
                continue
            reason = self._victims_on(pod, node_name, victims)
            if isinstance(reason, str):
                dropped[node_name] = reason
            else:
                result[node_name] = wire.meta_victims(reason, victims.num_pdb_violations)
        self._record(
            "preempt",
            pod.key,
            "ok",
            level=logging.INFO,
            msg=f"preempt {pod.key}: victims kept on {len(result)} node(s), {len(dropped)} node(s) dropped",
            kept=sorted(result),
            dropped=dropped,
        )
        return wire.preempt_result(result)

    def _victims_on(self, pod: PodInfo, node_name: str, victims: wire.Victims) -> list[str] | str:
        """The victims on one node (the scheduler's PDB count is kept: we do not see PDBs), or why the
        node is dropped."""
        node = self.cache.node_info(node_name)
        if node is None:
            return REASON_NODE_NOT_IN_CACHE
        uids, chosen_by = list(victims.uids), ""
        for participant in self.pipeline.at("select_victims", pod):
            choice = participant.select_victims(pod, node_name, uids)
            if choice is None:
                continue
            if choice.drop:
                return choice.drop
            uids, chosen_by = list(choice.victims), choice.chosen_by
        for participant in self.pipeline.at("check_victims", pod):
            reason = participant.check_victims(pod, node, uids)
            if reason:
                return f"{chosen_by} do not free enough of the node: {reason}" if chosen_by else reason
        return uids

    # ------------------------------------------------------------------ bind
    async def bind(self, body: bytes) -> dict[str, Any]:
        return await self._bind_verb.bind(body)

    @property
    def pipeline(self) -> Pipeline:
        """The participants every verb runs (tests swap it)."""
        return self._pipeline

    @pipeline.setter
    def pipeline(self, pipeline: Pipeline) -> None:
        self._pipeline = self._bind_verb.pipeline = pipeline

    @property
    def binder(self) -> Binder:
        """Who writes the Binding (the API in cluster mode; tests swap it)."""
        return self._bind_verb.binder

    @binder.setter
    def binder(self, binder: Binder) -> None:
        self._bind_verb.binder = binder

    # ------------------------------------------------------------------ explain
    def explain(self, body: bytes) -> dict[str, Any]:
        """Per node: the resource fit's verdict, plugin scores and the 0..10 score /prioritize would
        give, and under each other participant's name what it says about the node (for a pod with
        claims, "dra"; for a queued pod, "fairness": queue, flavors, quota verdict, FlavorFairness)."""
        args = wire.decode_extender_args(body)
        return self.explain_pod(self._pod(args.pod_raw), wire.Candidates.of(args))

    def explain_pod(self, pod: PodInfo, candidates: wire.Candidates | list[str]) -> dict[str, Any]:
        """``explain`` for a pod already parsed (the operator console explains pending pods of the cache)
        over candidates, or over these node names as the cache knows them."""
        if isinstance(candidates, list):
            candidates = wire.Candidates(list(dict.fromkeys(candidates)))
        nodes = self.resources.explain_nodes(pod, candidates)
        for participant in self.pipeline.at("explain", pod):
            detail = participant.explain(pod, candidates.names)
            for entry in nodes:
                if entry["name"] in detail:
                    entry[participant.name] = detail[entry["name"]]
        return {"pod": pod.key, "notReady": self.not_ready_reason(), "nodes": nodes}


def _remember(lru: OrderedDict[Any, PodInfo], key: Any, pod: PodInfo, limit: int) -> None:
    """Insert or refresh ``key`` in a bounded least-recently-used map."""
    lru[key] = pod
    lru.move_to_end(key)
    while len(lru) > limit:
        lru.popitem(last=False)
