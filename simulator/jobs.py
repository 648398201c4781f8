"""Job traces: groups of pods that run together, each with a size, GPUs per pod, an arrival and a
duration; the job CSV, the racks of a node list, and a generator deriving jobs from an openb pod list.

The CSV (``load_jobs_csv``), one row per job::

    name,size,gpus_per_pod,cpu_milli,memory_mib,arrival,duration[,topology]

``size`` pods of ``gpus_per_pod`` whole GPUs, ``cpu_milli`` and ``memory_mib`` each; the job arrives
at ``arrival`` and runs ``duration`` seconds once every pod is bound. ``topology`` (optional, may be
empty): ``required``, ``preferred`` or ``none``, how this job asks for one rack under a topology
policy (empty: the policy's own). Pod ``i`` of job ``J`` is named ``J-i``.

``make_jobs`` derives jobs from an openb pod list with a fixed rule (``JOB_RULE``): GPUs per pod and
pods per job from stated distributions, cpu and memory from an openb pod with that many whole GPUs,
the duration from an openb pod's lifetime, and Poisson arrivals at the rate that offers ``load`` x
the cluster's GPUs. Deterministic for a seed.
"""

from __future__ import annotations

import bisect
import csv
import io
import itertools
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import msgspec

from simulator.trace import GPU, MIB, NAMESPACE, SimNode, SimPod, TraceError, _int, _rows, _unique_name

__all__ = [
    "JOB_COLUMNS",
    "JOB_RULE",
    "RACK_LABEL",
    "TOPOLOGIES",
    "Job",
    "jobs_csv",
    "load_jobs_csv",
    "make_jobs",
    "podgroup_obj",
    "rack_of",
    "with_racks",
]

RACK_LABEL = "example.com/rack"
TOPOLOGIES = ("required", "preferred", "none")
JOB_COLUMNS = ("name", "size", "gpus_per_pod", "cpu_milli", "memory_mib", "arrival", "duration")
KUEUE_PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"

_encode = msgspec.json.encode


@dataclass(frozen=True, slots=True)
class Job:
    name: str
    size: int  # pods, all placed together
    gpus_per_pod: int
    cpu_milli: int
    memory_mib: int
    arrival: int  # seconds
    duration: int  # seconds, from the moment every pod is bound
    topology: str = ""  # "", "required", "preferred" or "none" ("": the policy's)

    @property
    def gpus(self) -> int:
        return self.size * self.gpus_per_pod

    @property
    def shape(self) -> tuple[int, int, int]:
        """What one pod asks: milli-CPU, memory (MiB), whole GPUs."""
        return self.cpu_milli, self.memory_mib, self.gpus_per_pod

    def pod_name(self, index: int) -> str:
        return f"{self.name}-{index}"

    def pods(self, group: bool = False, preferred_topology: str = "") -> list[SimPod]:
        """The job's pods as kube-scheduler would send them; ``group``: each joins the PodGroup named
        after the job (``spec.schedulingGroup.podGroupName``); ``preferred_topology``: Kueue's
        preferred-topology annotation with that label key."""
        return [self._pod(index, group, preferred_topology) for index in range(self.size)]

    def _pod(self, index: int, group: bool, preferred: str) -> SimPod:
        name = self.pod_name(index)
        memory = self.memory_mib * MIB
        requests = {"cpu": f"{self.cpu_milli}m", "memory": str(memory), GPU: str(self.gpus_per_pod)}
        metadata: dict[str, Any] = {"name": name, "namespace": NAMESPACE, "uid": f"{NAMESPACE}-{name}"}
        if preferred:
            metadata["annotations"] = {KUEUE_PREFERRED: preferred}
        spec: dict[str, Any] = {
            "containers": [{"name": "main", "resources": {"requests": requests, "limits": {GPU: requests[GPU]}}}]
        }
        if group:
            spec["schedulingGroup"] = {"podGroupName": self.name}
        body = _encode({"metadata": metadata, "spec": spec})
        return SimPod(name, body, self.cpu_milli, memory, self.gpus_per_pod, 1000, created=float(self.arrival))


def podgroup_obj(job: Job, topology_key: str = "") -> dict[str, Any]:
    """The job's 1.36 PodGroup (scheduling.k8s.io/v1alpha2): a gang of all its pods, and one domain of
    ``topology_key`` when given."""
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": job.size}}}
    if topology_key:
        spec["schedulingConstraints"] = {"topology": [{"key": topology_key}]}
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": job.name, "namespace": NAMESPACE},
        "spec": spec,
    }


# ------------------------------------------------------------------------------------ the CSV
def _positive(path: str | Path, line: int, row: Mapping[str, str | None], column: str) -> int:
    value = _int(path, line, row, column)
    if value < 1:
        raise TraceError(f"{path}:{line}: column {column}: must be >= 1, got {value}")
    return value


def load_jobs_csv(path: str | Path) -> list[Job]:
    """A job CSV (``JOB_COLUMNS`` and optionally ``topology``), errors naming file, line and column.
    Jobs come in file order; the simulator orders them by arrival."""
    jobs: list[Job] = []
    seen: set[str] = set()
    for line, row in _rows(path, JOB_COLUMNS):
        name = _unique_name(path, line, row, "name", "job", seen)
        size, gpus = _positive(path, line, row, "size"), _positive(path, line, row, "gpus_per_pod")
        cpu, memory, arrival = (_int(path, line, row, c) for c in ("cpu_milli", "memory_mib", "arrival"))
        duration = _positive(path, line, row, "duration")
        topology = (row.get("topology") or "").strip()
        if topology and topology not in TOPOLOGIES:
            raise TraceError(
                f"{path}:{line}: column topology: {topology!r} is not one of {', '.join(TOPOLOGIES)} (or empty)"
            )
        jobs.append(Job(name, size, gpus, cpu, memory, arrival, duration, topology))
    if not jobs:
        raise TraceError(f"{path}: no jobs")
    return jobs


def jobs_csv(jobs: Iterable[Job]) -> str:
    """The jobs as a job CSV (a ``topology`` column only when some job names one)."""
    jobs = list(jobs)
    with_topology = any(job.topology for job in jobs)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*JOB_COLUMNS, "topology"] if with_topology else JOB_COLUMNS)
    for job in jobs:
        row: list[Any] = [job.name, job.size, job.gpus_per_pod, job.cpu_milli, job.memory_mib, job.arrival]
        row.append(job.duration)
        writer.writerow([*row, job.topology] if with_topology else row)
    return out.getvalue()


# ------------------------------------------------------------------------------------ racks
def rack_of(index: int, rack_size: int) -> str:
    return f"rack-{index // rack_size:03d}"


def with_racks(nodes: Sequence[SimNode], rack_size: int) -> list[SimNode]:
    """The nodes with the label ``example.com/rack``: ``rack_size`` nodes per rack in list order
    (``rack-000`` the first ``rack_size``, and so on)."""
    if rack_size < 1:
        raise ValueError(f"rack size must be >= 1, got {rack_size}")
    return [
        replace(node, labels={**node.labels, RACK_LABEL: rack_of(index, rack_size)}) for index, node in enumerate(nodes)
    ]


# ------------------------------------------------------------------------------------ the generator
# The rule make_jobs follows, stated once (docs/simulate.md repeats it).
GPUS_PER_POD = {1: 0.25, 2: 0.10, 4: 0.25, 8: 0.40}  # share of jobs
PODS_PER_JOB = {2: 0.40, 4: 0.30, 8: 0.20, 16: 0.10}
MAX_JOB_GPUS = 64  # a larger draw halves its pod count until it fits
DURATION_RANGE = (300, 2 * 3600)  # seconds: openb lifetimes clipped into it
JOB_RULE = (
    f"GPUs per pod drawn from {GPUS_PER_POD}, pods per job from {PODS_PER_JOB} (halved while the job "
    f"asks for more than {MAX_JOB_GPUS} GPUs); cpu and memory those of an openb pod with that many whole "
    f"GPUs, drawn uniformly; duration the lifetime of an openb whole-GPU pod, drawn uniformly, clipped to "
    f"{DURATION_RANGE[0]}..{DURATION_RANGE[1]} s; exponential inter-arrival times whose mean offers the "
    f"given load"
)


def _choice(rng: random.Random, weights: Mapping[int, float]) -> int:
    values = list(weights)
    cumulative = list(itertools.accumulate(weights[v] for v in values))
    return values[bisect.bisect_right(cumulative, rng.random() * cumulative[-1])]


def make_jobs(pods: Sequence[SimPod], count: int, cluster_gpus: int, load: float = 1.0, seed: int = 0) -> list[Job]:
    """``count`` jobs derived from an openb pod list by ``JOB_RULE``: arrivals are a Poisson process
    whose rate makes the GPU-seconds asked per second ``load`` x ``cluster_gpus`` on average."""
    if count < 1:
        raise ValueError(f"job count must be >= 1, got {count}")
    if load <= 0 or cluster_gpus < 1:
        raise ValueError("load and the cluster's GPUs must be > 0")
    whole = [pod for pod in pods if pod.gpus and not pod.shares_gpu]
    shapes: dict[int, list[tuple[int, int]]] = {}
    for pod in whole:
        shapes.setdefault(pod.gpus, []).append((pod.cpu_milli, pod.memory // MIB))
    missing = [gpus for gpus in GPUS_PER_POD if gpus not in shapes]
    if missing:
        raise ValueError(f"the pod list has no whole-GPU pod with {missing[0]} GPU(s) to take a shape from")
    low, high = DURATION_RANGE
    lifetimes = [min(max(int(pod.deleted - pod.created), low), high) for pod in whole if pod.deleted is not None]
    if not lifetimes:
        raise ValueError("the pod list has no whole-GPU pod with a deletion_time to take a duration from")
    rng = random.Random(seed)
    drawn = []
    for _ in range(count):
        gpus = _choice(rng, GPUS_PER_POD)
        size = _choice(rng, PODS_PER_JOB)
        while size > 1 and size * gpus > MAX_JOB_GPUS:
            size //= 2
        cpu, memory = rng.choice(shapes[gpus])
        drawn.append((size, gpus, cpu, memory, rng.choice(lifetimes)))
    gpu_seconds = sum(size * gpus * duration for size, gpus, _, _, duration in drawn)
    mean_gap = gpu_seconds / (count * load * cluster_gpus)
    jobs, arrival = [], 0.0
    width = len(str(count - 1))
    for index, (size, gpus, cpu, memory, duration) in enumerate(drawn):
        jobs.append(Job(f"job-{index:0{width}d}", size, gpus, cpu, memory, round(arrival), duration))
        arrival += rng.expovariate(1 / mean_gap)
    return jobs
