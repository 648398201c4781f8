"""Trace-driven simulation: schedule a pod trace through the extender's own verbs, per policy.

Every pod goes through ``ExtenderService.filter`` → ``prioritize`` → ``bind`` with wire bodies, in
process, exactly as kube-scheduler would call them; the cache and its node table are the service's
own. The simulator plays kube-scheduler's part: it offers the nodes whose GPU model the pod accepts
(``gpu_spec``, a node-affinity check kube-scheduler does before calling an extender), then chooses
among the nodes that passed the extender's filter as kube-scheduler does with the profile of a
KubeSchedulerConfiguration (``simulator.schedconfig``): one node left is taken without prioritize;
otherwise each node's total is the modelled in-tree score plugins (NodeResourcesFit,
NodeResourcesBalancedAllocation: ``scoring.intree``, ``scoring.balanced``) times their weights plus
the extender's /prioritize answer · weight · 10, the highest total wins and ties are broken with a
seeded random choice (``scoring.kube_scheduler``). Without a scheduler config (``scheduler=None``,
the CLI's ``--scheduler-config none``) the extender's priority alone decides, as before.

Policies differ only in the plugins of the extender configuration, so baselines run the same code
(``simulator.policies``).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Iterable, Sequence

import msgspec
import numpy as np

from app import gctuning
from app.cluster.cache import ClusterCache
from app.cluster.objects import NodeObject, pod_from_obj
from app.cluster.snapshot import SnapshotBinder, SnapshotClaimWriter
from app.config import ExtenderConfiguration
from app.http import go_layout
from app.http.wire import WireError
from app.service import ExtenderService
from scoring.framework import PodInfo
from scoring.kube_scheduler import select_host_batch
from scoring.table import EXACT_LIMIT, Int64Array
from scoring.tie_break import choosing, drawing
from simulator import sharing as dra
from simulator.inflate import DEFAULT_TARGET, inflate, shuffled
from simulator.metrics import (
    CHECKPOINTS,
    GpuLedger,
    ShareMetrics,
    demand_milli,
    pod_kind,
    typical_shapes,
)
from simulator.policies import POLICIES, policy_config
from simulator.result import LEFTOVER_SHOWN, FirstFailure, PolicyResult
from simulator.schedconfig import SchedulerConfig
from simulator.trace import SimNode, SimPod
from simulator.unschedulable import UnschedulableShapes, shape

__all__ = [
    "LEFTOVER_SHOWN",
    "MODES",
    "POLICIES",
    "SHARING",
    "TIE_BREAKS",
    "FirstFailure",
    "PolicyResult",
    "check_order",
    "event_count",
    "policy_config",
    "schedule_order",
    "simulate",
]

MODES = ("fill", "replay", "inflate")
SHARING = dra.SHARING
TIE_BREAKS = ("random", "lowest-name")
_encode = msgspec.json.encode


# ---------------------------------------------------------------------------------------- the run
class _Scheduler:
    """kube-scheduler's part around one ExtenderService: candidates, the choice, the bind call."""

    def __init__(
        self,
        config: ExtenderConfiguration,
        nodes: Sequence[SimNode],
        seed: int,
        scheduler: SchedulerConfig | None = None,
        sharing: str = "none",
        tie_break: str = "random",
        clock: Callable[[], float] | None = None,
    ) -> None:
        # ``clock``: the cache's clock (assumptions, gang holds); job runs pass the simulated time.
        self.cache = ClusterCache() if clock is None else ClusterCache(clock=clock)
        self.sharing = sharing
        # Like kube-scheduler, the simulator reads no per-node reasons while some node passes: the
        # extender need not write them (the shipped deploy/extender-config.yaml does the same).
        config = config.model_copy(update={"filterFailures": "WhenUnschedulable"})
        writer = SnapshotClaimWriter(self.cache.dra) if sharing == "dra" else None
        self.rng = random.Random(seed)
        # kube-scheduler picks among equal totals at random; the FGD artifact's selectHost took the
        # lexicographically smallest node name (a fixed packing order), which ``lowest-name`` plays.
        # An extender with ``tieBreak.random`` makes that pick itself, with the same rule and draw: a
        # tie resolves the same whichever side takes it.
        # (``randrange`` draws the position ``choice`` would: the extender's draw reads no names.)
        self.choose: Callable[[Sequence[str]], str] = self.rng.choice if tie_break == "random" else min
        random_pick = tie_break == "random"
        self.service = ExtenderService(
            config,
            self.cache,
            SnapshotBinder(self.cache),
            claim_writer=writer,
            tie_pick=drawing(self.rng.randrange) if random_pick else choosing(self.choose),
        )
        if sharing == "dra":
            self.cache.dra.upsert_class(dra.device_class())
        for node in nodes:
            allocatable = dra.without_gpu_allocatable(node) if sharing == "dra" else dict(node.allocatable)
            self.cache.upsert_node(NodeObject(node.name, allocatable, dict(node.labels)))
        if sharing == "dra":
            self.cache.dra.replace_slices(s for s in map(dra.node_slice, nodes) if s is not None)
        self.nodes = {node.name: node for node in nodes}
        self.scheduler = scheduler
        self.kube = scheduler.scoring() if scheduler is not None else None
        self._names = [node.name for node in nodes]
        self._all_names = _encode(self._names)
        self._by_spec: dict[frozenset[str], tuple[bytes, list[str]]] = {}
        self.unschedulable = UnschedulableShapes()

    def candidates(self, pod: SimPod) -> tuple[bytes, list[str]]:
        """Nodes whose GPU model the pod accepts, as encoded NodeNames (and names), cached per spec."""
        if not pod.gpu_spec or not pod.gpus:
            return self._all_names, self._names
        entry = self._by_spec.get(pod.gpu_spec)
        if entry is None:
            names = [n.name for n in self.nodes.values() if n.model in pod.gpu_spec]
            entry = self._by_spec[pod.gpu_spec] = (_encode(names), names)
        return entry

    async def schedule(self, pod: SimPod) -> str | None:
        """Filter, choose, bind; the chosen node, or None when no node passes (known without a filter
        call for a shape that failed since the last deletion: ``simulator.unschedulable``). With DRA
        the pod's ResourceClaim is in the cache before the pod comes, as in a cluster, and goes when
        it fails."""
        key = shape(pod)
        if self.unschedulable.known(key):
            return None
        claim = dra.pod_claim(pod) if self.sharing == "dra" else None
        if claim is not None:
            self.cache.dra.upsert_claim(claim)
        node = await self._schedule(pod)
        if node is None:
            try:
                info = self.service.pod_info(pod.body)  # parsed by the filter call
            except WireError:  # a pod the filter could not read: refused, not remembered
                info = None
            if info is not None and not info.queue_labels and not info.pod_group:  # (fair shares, gangs)
                self.unschedulable.failed(key)
            if claim is not None:
                self.cache.dra.delete_claim(claim.key)
        return node

    def submit(self, pod: SimPod) -> None:
        """The pod enters the cache unbound, as the watches show a pending pod (with DRA, its claim
        first); job runs submit a job's pods before any of them is scheduled, so a gang's first member
        finds the others."""
        claim = dra.pod_claim(pod) if self.sharing == "dra" else None
        if claim is not None:
            self.cache.dra.upsert_claim(claim)
        self.cache.upsert_pod(pod_from_obj(msgspec.json.decode(pod.body)))

    async def attempt(self, pod: SimPod) -> tuple[str | None, str]:
        """Filter, choose, bind a submitted pod: the node and /bind's error ("" when bound), or
        (None, "") when no node passes. Either failure leaves the pod pending."""
        return await self._place(pod)

    def devices(self, pod: SimPod) -> dict[int, int] | None:
        """GPU index -> milli-GPUs the pod's claim was allocated (None without DRA)."""
        if self.sharing != "dra" or not pod.gpus:
            return None
        claim = self.cache.dra.claims.get(f"{pod.namespace}/{dra.claim_name(pod)}")
        return {int(d.device.rsplit("-", 1)[1]): milli for d, milli in dra.allocated_milli(claim).items()}

    def delete(self, pod: SimPod) -> None:
        """The pod is gone: so are its claim (and with it its devices) and its requests."""
        self.unschedulable.freed()
        self.cache.delete_pod(pod.uid)
        if self.sharing == "dra" and pod.gpus:
            self.cache.dra.delete_claim(f"{pod.namespace}/{dra.claim_name(pod)}")

    async def _schedule(self, pod: SimPod) -> str | None:
        node, error = await self._place(pod)
        if error:
            raise RuntimeError(f"bind of {pod.name} to {node} failed: {error}")
        return node

    async def _place(self, pod: SimPod) -> tuple[str | None, str]:
        """The chosen node and /bind's error ("" when bound); (None, "") when no node passes."""
        names, _ = self.candidates(pod)
        pod_part = b'{"Pod":' + pod.body + b',"Nodes":null,"NodeNames":'  # Go's layout, as kube-scheduler sends
        passed = self.service.filter_passed(pod_part + names + b"}")  # no FailedNodes: nobody reads them here
        if not passed:
            return None, ""
        node = self._extender_choice(pod_part, passed) if self.kube is None else self._choice(pod, pod_part, passed)
        bind = {"PodName": pod.name, "PodNamespace": pod.namespace, "PodUID": pod.uid, "Node": node}
        answer = await self.service.bind(_encode(bind))
        return node, str(answer["Error"] or "")

    def _priorities(self, pod_part: bytes, passed: list[str]) -> tuple[Sequence[str], Int64Array]:
        """The extender's /prioritize answer: hosts and their priorities, in its order."""
        encoded = go_layout.encoded_node_names(passed)  # filter's answer, as the service encoded it
        return self.service.priorities(pod_part + (_encode(passed) if encoded is None else encoded) + b"}")

    def _extender_choice(self, pod_part: bytes, passed: list[str]) -> str:
        """No scheduler config: the highest extender priority, ties at random."""
        return select_host_batch(*self._priorities(pod_part, passed), self.choose)

    def _choice(self, pod: SimPod, pod_part: bytes, passed: list[str]) -> str:
        """kube-scheduler's choice: one node is taken unscored; else in-tree totals + extender priority."""
        assert self.kube is not None and self.scheduler is not None
        if len(passed) == 1:
            return passed[0]  # kube-scheduler neither scores nor calls prioritize
        needs_pod = bool(self.kube.plugins or self.scheduler.extender_managed_resources)
        info = self.service.pod_info(pod.body) if needs_pod else None  # parsed by the filter call
        priorities = np.zeros(len(passed), dtype=np.int64)
        if self.kube.extender_weight and (info is None or self.scheduler.interested(info)):
            hosts, scores = self._priorities(pod_part, passed)
            if hosts is passed or list(hosts) == passed:  # (the very list: the wire kept it)
                priorities = scores
            else:  # a node the answer leaves out scores nothing
                by_host = dict(zip(hosts, scores.tolist(), strict=True))
                priorities = np.array([by_host.get(name, 0) for name in passed], dtype=np.int64)
        plugin_totals = np.zeros(len(passed), dtype=np.int64)
        if info is not None and self.kube.applies(info):  # e.g. GPUs through claims: nothing to gather
            plugin_totals = self._plugin_totals(info, passed)
        return select_host_batch(passed, self.kube.totals_batch(plugin_totals, priorities), self.choose)

    def _plugin_totals(self, pod: PodInfo, passed: list[str]) -> Int64Array:
        """Σ weight · score of the modelled in-tree plugins per node, from the cache's node table."""
        assert self.kube is not None
        table = self.cache.table
        amounts = [*pod.resources.requests.values(), pod.resources.non_zero_cpu, pod.resources.non_zero_memory]
        if table.exact and all(abs(v) < EXACT_LIMIT for v in amounts):
            batch = table.batch(passed)
            if batch is not None and batch.all_known:
                totals = self.kube.plugin_totals_batch(pod, batch)
                if totals is not None:
                    return totals
        snapshots = [self.cache.node_info(name) for name in passed]
        scalar = [self.kube.plugin_total(pod, node) if node is not None else 0 for node in snapshots]
        return np.array(scalar, dtype=np.int64)


def _events(pods: Sequence[SimPod], mode: str, in_order: bool) -> list[tuple[float, int, int]]:
    """(time, order, pod index), order 0 = deletion, 1 = creation, 2 = deletion of a pod created at
    that same instant: deletions free capacity before that instant's creations, never before the
    pod's own creation. ``in_order``: creations in list order (inflated or shuffled traces)."""
    if in_order:
        return [(float(index), 1, index) for index in range(len(pods))]
    events = [(pod.created, 1, index) for index, pod in enumerate(pods)]
    if mode == "replay":
        events += [
            (pod.deleted, 0 if pod.deleted > pod.created else 2, index)
            for index, pod in enumerate(pods)
            if pod.deleted is not None
        ]
    events.sort()
    return events


def _free_whole(ledger: GpuLedger, scheduler: _Scheduler, names: Iterable[str]) -> int:
    """Entirely free GPUs on the named nodes."""
    rows = [ledger.index[name] for name in names if scheduler.nodes[name].gpus]
    return int((ledger.free[rows] == 1000).sum()) if rows else 0


class _Windows:
    """Fragmentation is followed only while the arrived workload is within a percent of a
    checkpoint (what the report averages); elsewhere binds cost nothing extra."""

    def __init__(self, total_milli: int, points: Iterable[int] = CHECKPOINTS) -> None:
        self.total = max(total_milli, 1)
        self.percents = {p + d for p in points for d in (-1, 0, 1)}

    def inside(self, arrived: int) -> bool:
        return round(100 * arrived / self.total) in self.percents


async def _run(
    policy: str,
    config: ExtenderConfiguration,
    nodes: Sequence[SimNode],
    pods: Sequence[SimPod],
    mode: str,
    seed: int,
    progress: Callable[[int], None] | None,
    scheduler_config: SchedulerConfig | None,
    sharing: str,
    in_order: bool,
    shapes_from: Sequence[SimPod],
    tie_break: str,
) -> PolicyResult:
    scheduler = _Scheduler(config, nodes, seed, scheduler_config, sharing, tie_break)
    result = PolicyResult(policy, mode, sum(node.gpus for node in nodes), sharing=sharing, seed=seed, pods=len(pods))
    ledger = GpuLedger(nodes, typical_shapes(shapes_from))
    metrics = result.metrics = ShareMetrics(ledger.total_milli)
    windows = _Windows(ledger.total_milli)
    placed_on: dict[int, str] = {}
    allocated = arrived = 0
    events = _events(pods, mode, in_order)
    for step, (_, order, index) in enumerate(events, 1):
        pod = pods[index]
        if order != 1:
            node = placed_on.pop(index, None)
            if node is not None:
                scheduler.delete(pod)
                ledger.give_back(pod)
                allocated -= pod.gpus
                del result.placements[pod.name]
            continue
        result.gpu_demand += pod.gpus
        result.shared_gpu_pods += pod.shares_gpu
        arrived += demand_milli(pod)
        ledger.track(windows.inside(arrived))
        node = await scheduler.schedule(pod)
        kind = pod_kind(pod)
        if node is None:
            result.failed[pod.kind] += 1
            metrics.failed[kind] += 1
            if pod.gpus and result.first_gpu_failure is None:
                free = _free_whole(ledger, scheduler, scheduler.nodes)
                fragmented = _free_whole(ledger, scheduler, scheduler.candidates(pod)[1])
                result.first_gpu_failure = FirstFailure(
                    pod.name, pod.gpus, result.gpu_demand, allocated, free, fragmented
                )
        else:
            ledger.take(pod, node, scheduler.devices(pod))
            result.placed[pod.kind] += 1
            metrics.placed[kind] += 1
            placed_on[index] = result.placements[pod.name] = node
            allocated += pod.gpus
            result.peak_allocated_gpus = max(result.peak_allocated_gpus, allocated)
            result.gpu_placed += pod.gpus
            result.cpu_pods_on_gpu_nodes += pod.gpus == 0 and scheduler.nodes[node].gpus > 0
        if pod.gpus:
            result.curve.append((result.gpu_demand, allocated))
        metrics.arrived.append(arrived)
        metrics.allocated.append(ledger.allocated)
        if windows.inside(arrived):
            metrics.fragmented[len(metrics.arrived) - 1] = ledger.fragmentation()
        if progress is not None and step % 256 == 0:
            progress(256)
    result.final_allocated_gpus = allocated
    result.leftover = ledger.leftover()
    scheduler.service.close()  # freed by reference counting as this returns, not by a full collection
    return result


def check_order(pods: Sequence[SimPod], mode: str) -> None:
    """Replay needs the trace's times: a trace without ``creation_time`` is an error there."""
    if mode == "replay" and any(pod.file_ordered for pod in pods):
        raise ValueError(
            "mode replay needs creation_time on every pod; this trace has none (file order): "
            "use --mode fill --shuffle or --mode inflate"
        )


def schedule_order(
    pods: Sequence[SimPod], nodes: Sequence[SimNode], mode: str, seed: int, shuffle: bool, target: float
) -> tuple[list[SimPod], bool]:
    """The pods to submit and whether in list order (inflate, shuffled fill) or by creation time."""
    if mode == "inflate":
        return inflate(pods, nodes, target, seed), True
    if shuffle and mode == "fill":
        return shuffled(pods, seed), True
    return list(pods), False


def simulate(
    policy: str,
    base: ExtenderConfiguration,
    nodes: Sequence[SimNode],
    pods: Sequence[SimPod],
    *,
    mode: str = "fill",
    seed: int = 0,
    progress: Callable[[int], None] | None = None,
    scheduler: SchedulerConfig | None = None,
    sharing: str = "dra",
    shuffle: bool = False,
    target: float = DEFAULT_TARGET,
    tie_break: str = "random",
) -> PolicyResult:
    """Run the whole trace under one policy on a fresh cache; ``progress(n)`` reports handled events.

    ``scheduler``: the kube-scheduler profile that chooses among the nodes that pass the extender's
    filter (``simulator.schedconfig.load_scheduler_config``); None lets the extender's priority alone decide.
    ``sharing``: ``dra`` (GPUs as shareable DRA devices, pods with claims: ``simulator.sharing``) or
    ``none`` (whole GPUs of the device plugin). ``mode``: fill (creation order, deletions ignored;
    ``shuffle``: a seeded random order), replay (creations and deletions in time), inflate (the FGD
    paper's experiment: ``simulator.inflate`` up to ``target`` x the cluster's GPUs, seeded).
    ``tie_break``: ``random`` (kube-scheduler) or ``lowest-name`` (the FGD artifact's selectHost).
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r} (known: {', '.join(MODES)})")
    if sharing not in SHARING:
        raise ValueError(f"unknown sharing {sharing!r} (known: {', '.join(SHARING)})")
    if tie_break not in TIE_BREAKS:
        raise ValueError(f"unknown tie-break {tie_break!r} (known: {', '.join(TIE_BREAKS)})")
    check_order(pods, mode)
    config = policy_config(base, policy, pods)
    started = time.perf_counter()
    ordered, in_order = schedule_order(pods, nodes, mode, seed, shuffle, target)
    if sharing == "dra":
        ordered = [dra.with_claim(pod) for pod in ordered]
    with gctuning.tuned():  # as the service runs it (about 9 % of a run's time)
        result = asyncio.run(
            _run(policy, config, nodes, ordered, mode, seed, progress, scheduler, sharing, in_order, pods, tie_break)
        )
    result.wall_seconds = time.perf_counter() - started
    return result


def event_count(pods: Sequence[SimPod], mode: str) -> int:
    """Events of a fill or replay run (inflate: the length of the inflated list)."""
    return len(pods) + (sum(pod.deleted is not None for pod in pods) if mode == "replay" else 0)
