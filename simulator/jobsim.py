"""Job traces through the extender: pod-by-pod placement against gangs, with and without topology.

Event-driven on a simulated clock, which is also the cache's clock (gang holds expire on it). A job
arrives: its PodGroup (gang policies) and its pods enter the cache, pending, and its pods are
scheduled one at a time, in order, as kube-scheduler's queue would pop them: filter → choose →
bind through ``simulator.simulate._Scheduler``, the same path as every other run. A job *runs* once
all of its pods are bound; ``duration`` later its pods are deleted. After every instant that freed
capacity (a job ended, or one that gave up had bound pods), the pending jobs' pods are tried again
in arrival order, then the jobs arriving at that instant are tried. Gang holds left in force (a
member not bound in the same instant) wake the run when they run out, as the extender's expiry loop
would, and everything pending is tried again. The run ends when no event is left (or only expiries
that start no job); a job not running by then was not placed.

Policies (``JOB_POLICIES``):

* ``pod-by-pod``: no PodGroups and ``gangs.enabled: false``: each pod binds on its own, so a job
  can hold GPUs with some of its pods while it waits for the rest;
* ``gang``: one PodGroup per job (``minCount`` = size) and gangs on: all of a job's pods or none;
* ``gang-topology``: as ``gang``, with the PodGroup's ``schedulingConstraints.topology`` on
  ``example.com/rack``: every pod in one rack, or the job waits;
* ``gang-topology-preferred``: as ``gang``, with Kueue's preferred-topology annotation on the pods:
  one rack when one fits, anywhere otherwise.

A job's ``topology`` column overrides what the two topology policies ask of it.

**Retries the simulator skips.** kube-scheduler retries an unschedulable pod when an event may have
made room for it. The simulator tries again only what can change: a pod (or a gang) of some shape
that failed is not tried again until some node freed since can host one pod of that shape, counted
from the simulator's own record of what is bound (room only grows where pods left). In the same
spirit, after one pod of a job fails, the job's other pods (same shape, same cluster) are not tried
in that round. ``retry_hints=False`` tries everything; tests check both give the same placements.
"""

from __future__ import annotations

import asyncio
import heapq
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from app import gctuning
from app.cluster.podgroups import podgroup_from_obj
from app.config import ExtenderConfiguration
from simulator import sharing as dra
from simulator.jobreport import JobResult
from simulator.jobs import RACK_LABEL, Job, podgroup_obj, with_racks
from simulator.policies import policy_config
from simulator.schedconfig import SchedulerConfig
from simulator.simulate import SHARING, TIE_BREAKS, _Scheduler
from simulator.trace import GPU, NAMESPACE, SimNode, SimPod

__all__ = [
    "DEFAULT_RACK_SIZE",
    "JOB_POLICIES",
    "JobRun",
    "job_config",
    "simulate_jobs",
]

JOB_POLICIES = ("pod-by-pod", "gang", "gang-topology", "gang-topology-preferred")
DEFAULT_RACK_SIZE = 16
# At one instant: ends and expired holds free room first, arrivals come last.
_END, _EXPIRE, _GIVE_UP, _ARRIVE = 0, 1, 2, 3


def job_config(base: ExtenderConfiguration, policy: str) -> ExtenderConfiguration:
    """The scoring policy's configuration with gangs on (gang policies) or off (``pod-by-pod``)."""
    if policy not in JOB_POLICIES:
        raise ValueError(f"unknown job policy {policy!r} (known: {', '.join(JOB_POLICIES)})")
    data = base.model_dump(mode="json")
    gangs = dict(data.get("gangs") or {})
    gangs["enabled"] = policy != "pod-by-pod"
    if policy == "gang-topology-preferred" and RACK_LABEL not in gangs.get("topologyLevels", []):
        gangs["topologyLevels"] = [*gangs.get("topologyLevels", []), RACK_LABEL]
    data["gangs"] = gangs
    return ExtenderConfiguration.model_validate(data)


def _topology(policy: str, job: Job) -> str:
    """What the job asks of racks under the policy: "required", "preferred" or ""."""
    if policy in ("pod-by-pod", "gang"):
        return ""
    asked = job.topology or ("required" if policy == "gang-topology" else "preferred")
    return "" if asked == "none" else asked


@dataclass(slots=True)
class _Job:
    job: Job
    pods: list[SimPod]
    topology: str
    grouped: bool
    nodes: dict[int, str] = field(default_factory=dict)  # pod index -> node
    started: float | None = None
    done: bool = False
    partly: bool = False  # some, not all, pods were bound after a try

    @property
    def signature(self) -> tuple[Any, ...]:
        """Jobs alike to the extender: the pod shape, and for a gang its size and topology."""
        if not self.grouped:
            return (self.job.shape,)
        return self.job.shape, self.job.size, self.topology


@dataclass(slots=True)
class _SimClock:
    """A run's simulated time. The cache reads it through this object, not through the run, so that
    the run and its cache refer to each other nowhere and go by reference counting when it ends."""

    now: float = 0.0

    def read(self) -> float:
        return self.now


class JobRun:
    """One job policy over a job trace on a fresh cache (``simulate_jobs`` runs it)."""

    def __init__(
        self,
        policy: str,
        config: ExtenderConfiguration,
        nodes: Sequence[SimNode],
        jobs: Sequence[Job],
        *,
        scoring: str,
        seed: int,
        scheduler: SchedulerConfig | None,
        sharing: str,
        tie_break: str,
        give_up: float | None,
        retry_hints: bool,
    ) -> None:
        self.clock = _SimClock()
        self.policy = policy
        self.give_up = give_up
        self.hints = retry_hints
        self.scheduler = _Scheduler(config, nodes, seed, scheduler, sharing, tie_break, clock=self.clock.read)
        self.rack = {node.name: node.labels.get(RACK_LABEL, "") for node in nodes}
        self.free = {node.name: [node.allocatable.get(r, 0) for r in ("cpu", "memory", GPU)] for node in nodes}
        ordered = sorted(jobs, key=lambda job: job.arrival)  # stable: file order at one instant
        self.jobs: list[_Job] = []
        for job in ordered:
            topology = _topology(policy, job)
            grouped = policy != "pod-by-pod"
            preferred = RACK_LABEL if topology == "preferred" else ""
            pods = job.pods(group=grouped, preferred_topology=preferred)
            if sharing == "dra":
                pods = [dra.with_claim(pod) for pod in pods]
            self.jobs.append(_Job(job, pods, topology, grouped))
        self.result = JobResult(
            policy,
            scoring,
            seed,
            sum(node.gpus for node in nodes),
            len(jobs),
            sum(job.gpus for job in jobs),
            window=float(ordered[-1].arrival - ordered[0].arrival) if ordered else 0.0,
        )
        self.first_arrival = float(ordered[0].arrival) if ordered else 0.0
        self.pending: dict[int, None] = {}  # job indices with pods not bound, in arrival order
        self.blocked: dict[tuple[Any, ...], set[str]] = {}  # signature -> nodes freed since it last failed
        self.events: list[tuple[float, int, int]] = []
        self.allocated = self.partial = 0  # GPUs bound; of them, held by jobs not running
        self.wakeups: set[float] = set()  # instants an _EXPIRE event is queued for
        self.expired = False  # holds ran out this instant: retry every pending job
        self.idle_started = -1  # jobs placed when only expiries were left (-1: other events were left)
        self.last = 0.0

    # ------------------------------------------------------------------ the loop
    @property
    def now(self) -> float:
        return self.clock.now

    @now.setter
    def now(self, value: float) -> None:
        self.clock.now = value

    async def run(self) -> JobResult:
        self.events = [(float(entry.job.arrival), _ARRIVE, index) for index, entry in enumerate(self.jobs)]
        heapq.heapify(self.events)
        while self.events:
            if self._only_wakeups_left():
                break
            now = self.events[0][0]
            self._advance(now)
            freed: set[str] = set()
            arrivals: list[int] = []
            while self.events and self.events[0][0] == now:
                _, kind, index = heapq.heappop(self.events)
                if kind == _END:
                    freed |= self._remove(index)
                elif kind == _EXPIRE:
                    self._expire()
                elif kind == _GIVE_UP:
                    freed |= self._give_up(index)
                else:
                    arrivals.append(index)
            for nodes in self.blocked.values():
                nodes |= freed
            if freed or self.expired:
                self.expired = False
                for index in list(self.pending):
                    await self._try(index)
            for index in arrivals:
                self._submit(index)
                await self._try(index)
            self._wake_for_holds()
            self._record()
        result = self.result
        result.makespan = self.now
        result.partial_at_end = sum(1 for index in self.pending if self.jobs[index].nodes)
        result.partly_placed = sum(1 for entry in self.jobs if entry.partly)
        self.scheduler.service.close()  # freed by reference counting as the run ends (simulator.simulate)
        return result

    def _only_wakeups_left(self) -> bool:
        """Nothing but hold expiries left, and the last expiry with nothing else left started no job:
        retrying would cycle (plan, hold, expire) for ever, so the run ends here."""
        if len(self.events) > len(self.wakeups):  # one _EXPIRE event per queued wake-up instant
            self.idle_started = -1
            return False
        if self.idle_started == self.result.placed:
            return True
        self.idle_started = self.result.placed
        return False

    def _wake_for_holds(self) -> None:
        """Gang holds left in force (members not bound in the same instant): wake when the first runs
        out, as the extender's expiry loop would, and retry then. Until then, no retry is skipped."""
        deadlines = [a.expires_at for a in self.scheduler.cache.ledger.values() if a.held_for]
        if not deadlines:
            return
        self.blocked.clear()
        deadline = max(min(deadlines), self.now)
        if deadline not in self.wakeups:
            self.wakeups.add(deadline)
            heapq.heappush(self.events, (deadline, _EXPIRE, -1))

    def _expire(self) -> None:
        self.wakeups.discard(self.now)
        expired = self.scheduler.cache.expire()
        self.scheduler.cache.dra.expire()
        self.result.expired_holds += sum(1 for a in expired if a.held_for)
        self.blocked.clear()
        self.expired = True

    def _advance(self, now: float) -> None:
        """Integrate the GPUs held by partly placed jobs, and the bound GPUs within the arrival window."""
        dt = now - self.last
        if dt > 0:
            self.result.partial_gpu_seconds += self.partial * dt
            end = self.first_arrival + self.result.window
            inside = min(now, end) - max(self.last, self.first_arrival)
            if inside > 0:
                self.result.allocated_gpu_seconds += self.allocated * inside
        self.last = self.now = now

    def _record(self) -> None:
        point = (self.now, self.allocated, self.partial)
        curve = self.result.curve
        if curve and curve[-1][1:] == point[1:]:
            return
        if curve and curve[-1][0] == self.now:
            curve[-1] = point
        else:
            curve.append(point)

    # ------------------------------------------------------------------ jobs
    def _submit(self, index: int) -> None:
        entry = self.jobs[index]
        if entry.grouped:
            key = RACK_LABEL if entry.topology == "required" else ""
            self.scheduler.cache.groups.upsert(podgroup_from_obj(podgroup_obj(entry.job, key)))
        for pod in entry.pods:
            self.scheduler.submit(pod)
        self.pending[index] = None
        if self.give_up is not None:
            heapq.heappush(self.events, (self.now + self.give_up, _GIVE_UP, index))

    async def _try(self, index: int) -> None:
        """Schedule the job's pods that are not bound, in order."""
        entry = self.jobs[index]
        signature = entry.signature
        if self.hints and self._blocked(signature, entry.job):
            self.result.skipped += 1
            return
        for position, pod in enumerate(entry.pods):
            if position in entry.nodes:
                continue
            self.result.attempts += 1
            node, error = await self.scheduler.attempt(pod)
            if error:
                self.result.bind_errors += 1
                self.blocked.clear()  # the cache and the extender disagreed: judge nothing from it
                node = None
            elif node is None:
                self.blocked[signature] = set()
            if node is None:
                if self.hints:
                    break
                continue
            self.blocked.pop(signature, None)
            entry.nodes[position] = node
            self._take(entry.job, node, +1)
            self.allocated += entry.job.gpus_per_pod
            self.partial += entry.job.gpus_per_pod
            self.result.peak_allocated_gpus = max(self.result.peak_allocated_gpus, self.allocated)
        if len(entry.nodes) == entry.job.size:
            self._start(index)
        elif entry.nodes:
            entry.partly = True

    def _blocked(self, signature: tuple[Any, ...], job: Job) -> bool:
        """Whether a job like this one failed and no node freed since can host one of its pods."""
        freed = self.blocked.get(signature)
        if freed is None:
            return False
        cpu, memory, gpus = job.cpu_milli, job.memory_mib * 2**20, job.gpus_per_pod
        for name in freed:
            free = self.free[name]
            if free[0] >= cpu and free[1] >= memory and free[2] >= gpus:
                return False
        return True

    def _take(self, job: Job, node: str, sign: int) -> None:
        free = self.free[node]
        free[0] -= sign * job.cpu_milli
        free[1] -= sign * job.memory_mib * 2**20
        free[2] -= sign * job.gpus_per_pod

    def _start(self, index: int) -> None:
        entry = self.jobs[index]
        entry.started = self.now
        del self.pending[index]
        self.partial -= entry.job.gpus
        result = self.result
        result.placed += 1
        result.waits.append(self.now - entry.job.arrival)
        result.gpu_seconds_run += entry.job.gpus * entry.job.duration
        if len({self.rack[node] for node in entry.nodes.values()}) > 1:
            result.spanning += 1
        for position, node in entry.nodes.items():
            result.placements[entry.pods[position].name] = node
        heapq.heappush(self.events, (self.now + entry.job.duration, _END, index))

    def _remove(self, index: int) -> set[str]:
        """Delete the job's pods (and PodGroup); the nodes its bound pods leave."""
        entry = self.jobs[index]
        entry.done = True
        freed = set()
        for position, pod in enumerate(entry.pods):
            self.scheduler.delete(pod)
            node = entry.nodes.get(position)
            if node is not None:
                self._take(entry.job, node, -1)
                self.allocated -= entry.job.gpus_per_pod
                if entry.started is None:
                    self.partial -= entry.job.gpus_per_pod
                freed.add(node)
        if entry.grouped:
            self.scheduler.cache.groups.delete(f"podgroup:{NAMESPACE}/{entry.job.name}")
        return freed

    def _give_up(self, index: int) -> set[str]:
        entry = self.jobs[index]
        if entry.started is not None or entry.done:
            return set()
        del self.pending[index]
        self.result.gave_up += 1
        return self._remove(index)


MAX_PODS = 110  # kubelet's default maxPods


def _with_pod_slots(node: SimNode) -> SimNode:
    """The node with allocatable ``pods`` (kubelet's default when the node list has none): the gang
    planner counts pod slots, and a node without them fits no gang member."""
    if "pods" in node.allocatable:
        return node
    return replace(node, allocatable={**node.allocatable, "pods": MAX_PODS})


def simulate_jobs(
    policy: str,
    base: ExtenderConfiguration,
    nodes: Sequence[SimNode],
    jobs: Sequence[Job],
    *,
    scoring: str = "shipped",
    seed: int = 0,
    scheduler: SchedulerConfig | None = None,
    sharing: str = "dra",
    tie_break: str = "random",
    rack_size: int = DEFAULT_RACK_SIZE,
    give_up: float | None = None,
    retry_hints: bool = True,
) -> JobResult:
    """Run the job trace under one job policy with the scoring policy ``scoring`` (``simulator.policies``)
    on a fresh cache. ``rack_size``: nodes per ``example.com/rack`` in list order; ``give_up``: seconds
    after its arrival when a job not running yet is withdrawn (its pods deleted), None for never."""
    if sharing not in SHARING:
        raise ValueError(f"unknown sharing {sharing!r} (known: {', '.join(SHARING)})")
    if tie_break not in TIE_BREAKS:
        raise ValueError(f"unknown tie-break {tie_break!r} (known: {', '.join(TIE_BREAKS)})")
    if give_up is not None and give_up <= 0:
        raise ValueError(f"give-up must be > 0 seconds, got {give_up}")
    started = time.perf_counter()
    racked = [_with_pod_slots(node) for node in with_racks(nodes, rack_size)]
    trace_pods = [pod for job in jobs for pod in job.pods()]
    config = job_config(policy_config(base, scoring, trace_pods), policy)
    run = JobRun(
        policy,
        config,
        racked,
        jobs,
        scoring=scoring,
        seed=seed,
        scheduler=scheduler,
        sharing=sharing,
        tie_break=tie_break,
        give_up=give_up,
        retry_hints=retry_hints,
    )
    with gctuning.tuned():
        result = asyncio.run(run.run())
    result.wall_seconds = time.perf_counter() - started
    return result


# ---------------------------------------------------------------------------------------- many runs
@dataclass(frozen=True, slots=True)
class JobExperiment:
    """What every run of one comparison shares."""

    base: ExtenderConfiguration
    nodes: Sequence[SimNode]
    jobs: Sequence[Job]
    scoring: str
    scheduler: SchedulerConfig | None
    sharing: str = "dra"
    tie_break: str = "random"
    rack_size: int = DEFAULT_RACK_SIZE
    give_up: float | None = None

    def run(self, policy: str, seed: int) -> JobResult:
        result = simulate_jobs(
            policy,
            self.base,
            self.nodes,
            self.jobs,
            scoring=self.scoring,
            seed=seed,
            scheduler=self.scheduler,
            sharing=self.sharing,
            tie_break=self.tie_break,
            rack_size=self.rack_size,
            give_up=self.give_up,
        )
        result.placements.clear()  # not reported; keeps what goes back to the parent small
        return result
