"""The FGD paper's measures of a simulated cluster (Weng et al., USENIX ATC'23, and its artifact).

* **arrived workload**: the GPU demand of every pod submitted so far, placed or not, in milli-GPUs
  (``num_gpu · gpu_milli``), as a share of the cluster's GPUs;
* **GPU allocation ratio**: the milli-GPUs allocated (fractionally: a 460-milli share counts 0.46)
  as a share of the cluster's GPUs; **unallocated GPUs** are the rest. With ``--sharing none`` a
  sharing pod holds its GPU whole, so it counts 1;
* **fragmentation** of a node, for the *typical pods* (the trace's pod shapes - cpu, per-GPU milli,
  GPU count, allowed models - most frequent first, until they cover 95 % of the pods, weights
  renormalised): for a shape the node can host (model allowed, enough GPUs with that much left,
  enough cpu), the free milli-GPUs of GPUs with less left than the shape asks for; for any other
  shape (CPU-only shapes included) all of the node's free milli-GPUs. The node's figure is the
  weighted sum over shapes; the **fragmentation rate** is the cluster's sum over its free milli-GPUs;
* **a figure at x % arrived** is the mean over the events (pod submissions) whose arrived
  workload rounds to x %, or, if none does, to x ± 1 % (the artifact's merge scripts).

``GpuLedger`` follows every GPU's free milli-GPUs from the binds (the claims' allocations for
``dra``, whole GPUs for ``none``) and computes fragmentation vectorised over nodes and shapes. At
the end of a run it tells where the free milli-GPUs are (``leftover``): grouped by the shares that
hold the rest of each GPU, e.g. 190 milli-GPUs free beside one 810-milli share, which only a pod of
at most 190 milli-GPUs can use.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from simulator.trace import SimNode, SimPod

__all__ = [
    "CHECKPOINTS",
    "KINDS",
    "GpuLedger",
    "Leftover",
    "Shape",
    "ShareMetrics",
    "at_arrived",
    "pod_kind",
    "typical_shapes",
]

CHECKPOINTS = (90, 95, 98, 100, 130)  # arrived workload (% of cluster GPUs) the report shows
KINDS = ("cpu", "shared-gpu", "1-gpu", "multi-gpu")
WHOLE = 1000
POPULARITY = 0.95  # typical pods cover this share of the trace's pods
NON_ZERO_CPU = 100  # milli-CPU kube-scheduler counts for a container without a cpu request

IntArray = npt.NDArray[np.int64]


def pod_kind(pod: SimPod) -> str:
    if not pod.gpus:
        return "cpu"
    if pod.shares_gpu:
        return "shared-gpu"
    return "1-gpu" if pod.gpus == 1 else "multi-gpu"


def pod_milli(pod: SimPod) -> int:
    """Per-GPU milli-GPUs of a pod (1000 for whole GPUs, 0 for CPU-only pods)."""
    return (pod.gpu_milli or WHOLE) if pod.gpus else 0


def demand_milli(pod: SimPod) -> int:
    return pod.gpus * pod_milli(pod)


def _cpu(pod: SimPod) -> int:
    return pod.cpu_milli or NON_ZERO_CPU


@dataclass(frozen=True, slots=True)
class Leftover:
    """The GPUs with free milli-GPUs that hold the same shares, and what is free on them."""

    beside: tuple[int, ...]  # milli-GPUs of each pod on such a GPU, ascending; () for idle GPUs
    gpus: int
    free_milli: int


@dataclass(frozen=True, slots=True)
class Shape:
    """A typical pod: what it asks for and how often it comes (weights sum to 1)."""

    cpu_milli: int
    gpu_milli: int  # per GPU; 0 for a CPU-only pod
    gpus: int
    models: frozenset[str]  # allowed GPU models; empty = any
    weight: float


def typical_shapes(pods: Iterable[SimPod], popularity: float = POPULARITY) -> list[Shape]:
    """The most frequent pod shapes until they cover ``popularity`` of the pods, renormalised."""
    counts = Counter((_cpu(p), pod_milli(p), p.gpus, p.gpu_spec if p.gpus else frozenset()) for p in pods)
    total = sum(counts.values())
    if not total:
        return []
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0][0], item[0][1], item[0][2], sorted(item[0][3])))
    chosen: list[tuple[tuple[int, int, int, frozenset[str]], int]] = []
    covered = 0
    for key, count in ranked:
        if covered >= popularity * total:
            break
        chosen.append((key, count))
        covered += count
    return [Shape(cpu, milli, gpus, models, count / covered) for (cpu, milli, gpus, models), count in chosen]


@dataclass
class ShareMetrics:
    """Per event (pod submission) the arrived and allocated milli-GPUs, fragmentation where it is
    needed (near the checkpoints), and failures by kind."""

    total_milli: int
    arrived: list[int] = field(default_factory=list)
    allocated: list[int] = field(default_factory=list)
    fragmented: dict[int, tuple[float, int]] = field(default_factory=dict)  # event -> (fragmented, free)
    failed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    placed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))

    def percent(self, values: Sequence[float]) -> npt.NDArray[np.float64]:
        return 100.0 * np.asarray(values, dtype=np.float64) / max(self.total_milli, 1)

    def arrived_percent(self) -> npt.NDArray[np.int64]:
        """Each event's arrived workload rounded to a whole percent (numpy's half-to-even, as pandas)."""
        return np.round(self.percent(self.arrived)).astype(np.int64)

    def checkpoints(self, points: Iterable[int] = CHECKPOINTS) -> dict[int, dict[str, float] | None]:
        """Per checkpoint: allocation ratio, unallocated GPUs (% and GPUs), fragmentation rate and
        fragmented GPUs; None when the run never got there."""
        rounded = self.arrived_percent()
        allocated = self.percent(self.allocated)
        out: dict[int, dict[str, float] | None] = {}
        for point in points:
            events = at_arrived(rounded, point)
            if not len(events):
                out[point] = None
                continue
            allocation = float(allocated[events].mean())
            figures = {
                "allocation": allocation,
                "unallocated": 100.0 - allocation,
                "unallocatedGpus": (100.0 - allocation) * self.total_milli / 100_000,
            }
            fragments = [self.fragmented[int(e)] for e in events if int(e) in self.fragmented]
            if fragments:
                figures["fragmentation"] = float(np.mean([100.0 * f / free if free else 0.0 for f, free in fragments]))
                figures["fragmentedGpus"] = float(np.mean([f for f, _ in fragments])) / WHOLE
            out[point] = figures
        return out

    def curve(self) -> list[tuple[int, float]]:
        """(arrived %, allocation %) for every whole percent reached, by the checkpoint rule."""
        rounded = self.arrived_percent()
        if not len(rounded):
            return []
        allocated = self.percent(self.allocated)
        out = []
        for point in range(0, int(rounded.max()) + 1):
            events = at_arrived(rounded, point)
            if len(events):
                out.append((point, round(float(allocated[events].mean()), 3)))
        return out


def at_arrived(rounded: npt.NDArray[np.int64], point: int) -> npt.NDArray[np.intp]:
    """Events at ``point`` % arrived, else within one percent of it (the artifact's rule)."""
    events = np.flatnonzero(rounded == point)
    if not len(events):
        events = np.flatnonzero((rounded >= point - 1) & (rounded <= point + 1))
    return events


class GpuLedger:
    """Free milli-GPUs of every GPU and free milli-CPUs of every node, from the binds."""

    def __init__(self, nodes: Sequence[SimNode], shapes: Sequence[Shape]) -> None:
        self.index = {node.name: i for i, node in enumerate(nodes)}
        width = max((node.gpus for node in nodes), default=0) or 1
        self.free = np.full((len(nodes), width), -1, dtype=np.int64)  # -1: no such GPU
        for i, node in enumerate(nodes):
            self.free[i, : node.gpus] = WHOLE
        self.cpu_free = np.array([node.allocatable.get("cpu", 0) for node in nodes], dtype=np.int64)
        self.total_milli = WHOLE * sum(node.gpus for node in nodes)
        self.allocated = 0
        self.held: dict[str, tuple[int, list[tuple[int, int]], int]] = {}  # pod uid -> node, (gpu, milli), cpu
        self.shapes = list(shapes)
        self.weights = np.array([s.weight for s in shapes], dtype=np.float64)
        self.shape_milli = np.array([s.gpu_milli for s in shapes], dtype=np.int64)
        self.shape_gpus = np.array([s.gpus for s in shapes], dtype=np.int64)
        self.shape_cpu = np.array([s.cpu_milli for s in shapes], dtype=np.int64)
        # node x shape: the shape asks for GPUs and may use the node's model
        self.access = np.array(
            [[s.gpus > 0 and (not s.models or node.model in s.models) for s in shapes] for node in nodes],
            dtype=bool,
        ).reshape(len(nodes), len(shapes))
        self._node_fragments: npt.NDArray[np.float64] | None = None  # per node, while tracked

    # ------------------------------------------------------------------ binds
    def take(self, pod: SimPod, node: str, devices: Mapping[int, int] | None) -> None:
        """``pod`` bound to ``node``: ``devices`` (GPU index -> milli-GPUs) as the allocation says,
        or None for whole GPUs of the device plugin (the first free ones: they are alike)."""
        row = self.index[node]
        taken: list[tuple[int, int]] = []
        if pod.gpus:
            if devices is None:
                whole = np.flatnonzero(self.free[row] == WHOLE)[: pod.gpus]
                if len(whole) < pod.gpus:
                    raise RuntimeError(f"pod {pod.name} bound to {node} without {pod.gpus} free GPUs")
                taken = [(int(gpu), WHOLE) for gpu in whole]
            else:
                taken = list(devices.items())
            for gpu, milli in taken:
                if self.free[row, gpu] < milli:
                    raise RuntimeError(f"pod {pod.name}: GPU {gpu} of {node} has {self.free[row, gpu]} milli left")
                self.free[row, gpu] -= milli
                self.allocated += milli
        self.cpu_free[row] -= _cpu(pod)
        self.held[pod.uid] = (row, taken, _cpu(pod))
        self._changed(row)

    def give_back(self, pod: SimPod) -> None:
        found = self.held.pop(pod.uid, None)
        if found is None:
            return
        row, taken, cpu = found
        for gpu, milli in taken:
            self.free[row, gpu] += milli
            self.allocated -= milli
        self.cpu_free[row] += cpu
        self._changed(row)

    def leftover(self) -> list[Leftover]:
        """The free milli-GPUs now, grouped by the shares on their GPUs, most free first (equal
        amounts: by the shares)."""
        holding: defaultdict[tuple[int, int], list[int]] = defaultdict(list)
        for row, taken, _ in self.held.values():
            for gpu, milli in taken:
                holding[(row, gpu)].append(milli)
        groups: dict[tuple[int, ...], tuple[int, int]] = {}
        rows, gpus = np.nonzero(self.free > 0)
        for row, gpu, free in zip(rows.tolist(), gpus.tolist(), self.free[rows, gpus].tolist(), strict=True):
            beside = tuple(sorted(holding.get((row, gpu), ())))
            count, total = groups.get(beside, (0, 0))
            groups[beside] = (count + 1, total + free)
        ordered = sorted(groups.items(), key=lambda item: (-item[1][1], item[0]))
        return [Leftover(beside, count, free) for beside, (count, free) in ordered]

    # ------------------------------------------------------------------ fragmentation
    def track(self, on: bool) -> None:
        """Keep per-node fragmentation up to date (on), or stop (off: binds cost nothing extra)."""
        if not on:
            self._node_fragments = None
        elif self._node_fragments is None:
            self._node_fragments = self._fragments(self.free, self.cpu_free, self.access)

    def fragmentation(self) -> tuple[float, int]:
        """(fragmented milli-GPUs, free milli-GPUs) of the cluster now."""
        fragments = self._node_fragments
        if fragments is None:
            fragments = self._fragments(self.free, self.cpu_free, self.access)
        return float(fragments.sum()), int(np.clip(self.free, 0, None).sum())

    def _changed(self, row: int) -> None:
        if self._node_fragments is not None:
            self._node_fragments[row] = self._fragments(
                self.free[row : row + 1], self.cpu_free[row : row + 1], self.access[row : row + 1]
            )[0]

    def _fragments(self, free: IntArray, cpu_free: IntArray, access: npt.NDArray[np.bool_]) -> npt.NDArray[np.float64]:
        """Per node (row of ``free``) the weighted fragmented milli-GPUs over the typical shapes."""
        left = np.clip(free, 0, None)  # nodes x GPUs
        idle = left.sum(axis=1)  # nodes
        if not self.shapes:
            return np.zeros(len(free), dtype=np.float64)
        milli = self.shape_milli[None, :, None]  # 1 x shapes x 1
        enough = free[:, None, :] >= milli  # nodes x shapes x GPUs (no GPU: -1, never enough)
        cpu_fits = cpu_free[:, None] >= self.shape_cpu[None, :]
        hosts = (enough.sum(axis=2) >= self.shape_gpus[None, :]) & access & cpu_fits
        short = np.where(enough, 0, left[:, None, :]).sum(axis=2)  # free milli on GPUs too small for the shape
        per_shape = np.where(hosts, short, idle[:, None])
        fragments: npt.NDArray[np.float64] = (per_shape * self.weights[None, :]).sum(axis=1)
        return fragments

    def check(self) -> dict[str, Any]:
        """Totals for tests: allocated milli-GPUs must equal the cluster minus what is free."""
        free = int(np.clip(self.free, 0, None).sum())
        return {"allocated": self.allocated, "free": free, "total": self.total_milli}
