"""Wiring: build the cache, service and background tasks for snapshot or cluster mode."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from dataclasses import dataclass, field

from app import gctuning
from app.cluster.binding import ApiBinder, ApiClaimWriter
from app.cluster.cache import ClusterCache
from app.cluster.eviction import ApiEvictor, Evictor, SnapshotEvictor
from app.cluster.kube import KubeClient
from app.cluster.kueue_watch import KUEUE_SOURCES, KueueSource
from app.cluster.reflector import DRA_RESOURCES, GANG_RESOURCES, Reflector, node_resource, pod_resource
from app.cluster.requeue import ApiRetryRequester, Held, Requeuer
from app.cluster.snapshot import SOURCES, SnapshotBinder, SnapshotClaimWriter, load_snapshot
from app.cluster.workloads import WORKLOADS_SOURCE, WorkloadAdmissions
from app.config import ExtenderConfiguration
from app.http.server import ExtenderVerbs, create_app
from app.operator.metrics import Metrics
from app.pipeline.dynamicresources import ClaimWriter
from app.pipeline.reclaimer import Reclaimer
from app.service import Binder, ExtenderService

__all__ = ["Runtime", "build_cluster_runtime", "build_snapshot_runtime", "readiness"]

log = logging.getLogger("kube_gpu_extender")
EXPIRY_INTERVAL = 5.0


def readiness(cache: ClusterCache, sources: tuple[str, ...], stale_after: float) -> tuple[bool, str]:
    """Ready once every source has synced and none has been disconnected longer than ``stale_after``."""
    now = cache.clock()
    for name in sources:
        state = cache.sources.get(name)
        if state is None or not state.synced:
            # Say why, when a list failed: "not synced yet" alone hides an unreachable API server.
            return False, f"{name} not synced yet" + (f": {state.last_error}" if state and state.last_error else "")
        if state.disconnected_since is not None and now - state.disconnected_since > stale_after:
            return False, f"{name} watch broken for {now - state.disconnected_since:.0f}s: {state.last_error}"
    return True, ""


@dataclass
class Runtime:
    config: ExtenderConfiguration
    cache: ClusterCache
    service: ExtenderService
    metrics: Metrics
    reflectors: list[Reflector] = field(default_factory=list)
    client: KubeClient | None = None
    # Kueue's own queue objects, when queues.watchKueue is on (cluster mode); its view() is for /debug/queues.
    kueue_source: KueueSource | None = None
    # The reclaim loop (queues.reclaim); it idles while its mode is off or another replica leads.
    reclaimer: Reclaimer | None = None
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def app(self) -> ExtenderVerbs:
        return create_app(self.service, lifespan_hooks=(self.start, self.stop))

    async def start(self) -> None:
        self._tasks = [asyncio.create_task(r.run(), name=f"reflector-{r.resource.name}") for r in self.reflectors]
        self._tasks.append(asyncio.create_task(self._expire_loop(), name="assume-expiry"))
        if self.reclaimer is not None:
            self._tasks.append(asyncio.create_task(self.reclaimer.run(), name="reclaim"))
        if self.service.requeuer is not None:
            self._tasks.append(asyncio.create_task(self.service.requeuer.run(), name="requeue"))
        gctuning.freeze_and_tune()  # what start-up made lives for good; request garbage is acyclic
        if self.reflectors:  # cluster mode: the cache is built by the first lists, after this
            self._tasks.append(asyncio.create_task(self._freeze_when_listed(), name="gc-freeze"))

    async def _freeze_when_listed(self, poll: float = 0.5, min_interval: float = 60.0) -> None:
        """Freeze again once the watches have listed, and after every relist: the cache the lists
        built lives for good too. Left unfrozen, every full collection walks it (~0.1 s at 5,000
        nodes and 50,000 pods, ~0.3 s at 15,000 and 150,000), a pause for every verb in flight.
        Frozen objects are never collected as cycles; the cache's pods and nodes form none, so those
        a watch later replaces are freed by reference counting all the same. At most once per
        ``min_interval`` (each freeze is one full collection): a source that keeps relisting costs
        little."""
        frozen_after: int | None = None  # the lists made when it last froze
        frozen_at = -math.inf
        while True:
            ready = not self.service.not_ready_reason()
            lists = sum(state.relists for state in self.cache.sources.values())
            if ready and lists != frozen_after and time.monotonic() - frozen_at >= min_interval:
                gctuning.freeze_and_tune()
                frozen_after, frozen_at = lists, time.monotonic()
            await asyncio.sleep(poll)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.client is not None:
            await self.client.close()

    async def _expire_loop(self) -> None:
        while True:
            await asyncio.sleep(EXPIRY_INTERVAL)
            for assumption in self.cache.expire():
                if assumption.held_for:  # a gang's plan ran out of time: its room goes back
                    log.info(
                        "hold of %s on %s for %s expired", assumption.pod.key, assumption.node, assumption.held_for
                    )
                else:
                    log.warning("assumption of %s on %s expired unconfirmed", assumption.pod.key, assumption.node)
            for inflight in self.cache.dra.expire():
                log.warning("in-flight allocation of %s on %s expired unconfirmed", inflight.pod, inflight.node)


def _runtime(
    config: ExtenderConfiguration,
    cache: ClusterCache,
    binder: Binder,
    sources: tuple[str, ...],
    claim_writer: ClaimWriter,
    reflectors: list[Reflector] | None = None,
    client: KubeClient | None = None,
    metrics: Metrics | None = None,
) -> Runtime:
    metrics = metrics or Metrics()
    service = ExtenderService(
        config,
        cache,
        binder,
        metrics,
        readiness=lambda: readiness(cache, sources, config.cache.staleAfterSeconds),
        claim_writer=claim_writer,
    )
    runtime = Runtime(config, cache, service, metrics, reflectors or [], client)
    if service.fairness is not None:
        evictor: Evictor = ApiEvictor(client) if client is not None else SnapshotEvictor(cache)
        runtime.reclaimer = Reclaimer(
            service.fairness,
            evictor,
            ready=lambda: not service.not_ready_reason(),
            on_eviction=lambda queue, outcome: metrics.reclaim_evictions.labels(queue, outcome).inc(),
            on_decision=metrics.reclaim_decision_seconds.observe,
        )
    return runtime


def _watch_kueue(config: ExtenderConfiguration) -> bool:
    queue_config = config.queue_config()
    return queue_config is not None and queue_config.watch_kueue


def build_snapshot_runtime(config: ExtenderConfiguration, snapshot: str) -> Runtime:
    cache = ClusterCache(assume_ttl=config.cache.assumeTTLSeconds)
    load_snapshot(snapshot, cache)
    if _watch_kueue(config):
        log.warning("queues.watchKueue applies only in cluster mode; using the queues: lists of the config file")
    return _runtime(config, cache, SnapshotBinder(cache), SOURCES, SnapshotClaimWriter(cache.dra))


def build_cluster_runtime(config: ExtenderConfiguration, kubeconfig: str | None) -> Runtime:
    cache = ClusterCache(assume_ttl=config.cache.assumeTTLSeconds)
    metrics = Metrics()
    client = KubeClient.from_kubeconfig(kubeconfig)
    resources = (
        node_resource,
        pod_resource,
        *(DRA_RESOURCES if config.dra.enabled else ()),
        *(GANG_RESOURCES if config.gangs.enabled else ()),
    )
    reflectors = [Reflector(client, cache, resource, metrics) for resource in resources]
    watch_kueue = _watch_kueue(config)
    # Kueue's sources count for /readyz: filter must not run on the file's tree before Kueue's was listed.
    # Workloads too: their admission times order victims, which must not change across a restart.
    names = tuple(r.resource.name for r in reflectors) + ((*KUEUE_SOURCES, WORKLOADS_SOURCE) if watch_kueue else ())
    runtime = _runtime(config, cache, ApiBinder(client), names, ApiClaimWriter(client), reflectors, client, metrics)
    service = runtime.service
    if config.cache.requeueAfterSeconds > 0:

        def requested(held: Held, outcome: str, error: str) -> None:
            metrics.retry_requests.labels(outcome).inc()
            service.record("requeue", held.key, outcome, **({"error": error} if error else {}))

        requester = ApiRetryRequester(client)
        service.requeuer = Requeuer(cache, requester, after=config.cache.requeueAfterSeconds, on_request=requested)
    fairness = service.fairness
    if watch_kueue and fairness is not None and config.queues is not None:
        runtime.kueue_source = runtime.service.kueue_source = KueueSource(config.queues, fairness, clock=cache.clock)
        runtime.reflectors += [Reflector(client, cache, r, metrics) for r in runtime.kueue_source.resources()]
        fairness.workloads = WorkloadAdmissions()
        runtime.reflectors.append(Reflector(client, cache, fairness.workloads.resource(), metrics))
    return runtime
