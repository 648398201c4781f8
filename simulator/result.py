"""What one simulation run reports: placements, failures, the allocation curve and the FGD paper's
measures, and their JSON form (``simulator.simulate`` fills it; reports and experiments read it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from simulator.metrics import Leftover, ShareMetrics
from simulator.trace import KIND_CPU, KIND_MULTI_GPU, KIND_ONE_GPU

__all__ = ["LEFTOVER_SHOWN", "FirstFailure", "PolicyResult"]

LEFTOVER_SHOWN = 10  # groups of free GPUs a run's JSON lists


@dataclass(slots=True)
class FirstFailure:
    """The cluster when the first GPU pod found no node."""

    pod: str
    gpus: int
    submitted_gpus: int  # GPU demand submitted so far, this pod included
    allocated_gpus: int
    free_gpus: int
    fragmented_gpus: int  # free GPUs on nodes of an allowed model, none of which could host the pod


@dataclass(slots=True)
class PolicyResult:
    policy: str
    mode: str
    total_gpus: int
    placed: dict[str, int] = field(default_factory=lambda: dict.fromkeys((KIND_CPU, KIND_ONE_GPU, KIND_MULTI_GPU), 0))
    failed: dict[str, int] = field(default_factory=lambda: dict.fromkeys((KIND_CPU, KIND_ONE_GPU, KIND_MULTI_GPU), 0))
    shared_gpu_pods: int = 0  # gpu_milli < 1000, counted as one whole GPU
    gpu_demand: int = 0
    gpu_placed: int = 0
    cpu_pods_on_gpu_nodes: int = 0
    first_gpu_failure: FirstFailure | None = None
    final_allocated_gpus: int = 0
    peak_allocated_gpus: int = 0
    wall_seconds: float = 0.0
    curve: list[tuple[int, int]] = field(default_factory=list)  # (submitted GPU demand, allocated GPUs)
    placements: dict[str, str] = field(default_factory=dict)  # pod name -> node, of pods running at the end
    sharing: str = "dra"
    seed: int = 0
    pods: int = 0  # pods submitted (after inflation)
    metrics: ShareMetrics | None = None  # the FGD paper's measures (simulator.metrics)
    leftover: list[Leftover] = field(default_factory=list)  # the free milli-GPUs at the end, by what holds their GPUs

    @property
    def gpu_demand_share(self) -> float:
        return self.gpu_placed / self.gpu_demand if self.gpu_demand else 1.0

    def to_json(self) -> dict[str, Any]:
        failure = self.first_gpu_failure
        return {
            "policy": self.policy,
            "mode": self.mode,
            "totalGpus": self.total_gpus,
            "placed": dict(self.placed),
            "failed": dict(self.failed),
            "sharedGpuPods": self.shared_gpu_pods,
            "gpuDemand": self.gpu_demand,
            "gpuPlaced": self.gpu_placed,
            "gpuDemandShare": round(self.gpu_demand_share, 4),
            "cpuPodsOnGpuNodes": self.cpu_pods_on_gpu_nodes,
            "firstGpuFailure": None
            if failure is None
            else {
                "pod": failure.pod,
                "gpus": failure.gpus,
                "submittedGpus": failure.submitted_gpus,
                "allocatedGpus": failure.allocated_gpus,
                "allocation": round(failure.allocated_gpus / self.total_gpus, 4) if self.total_gpus else 0.0,
                "freeGpus": failure.free_gpus,
                "fragmentedGpus": failure.fragmented_gpus,
            },
            "finalAllocatedGpus": self.final_allocated_gpus,
            "peakAllocatedGpus": self.peak_allocated_gpus,
            "wallSeconds": round(self.wall_seconds, 3),
            "sharing": self.sharing,
            "seed": self.seed,
            "submittedPods": self.pods,
            "leftover": [
                {"beside": list(group.beside), "gpus": group.gpus, "freeGpus": group.free_milli / 1000}
                for group in self.leftover[:LEFTOVER_SHOWN]
            ],
            **(self.metrics_json() if self.metrics is not None else {}),
        }

    def metrics_json(self) -> dict[str, Any]:
        """The FGD paper's measures: figures at the checkpoints (% arrived), pods by kind, the curve."""
        metrics = self.metrics
        assert metrics is not None
        checkpoints = {
            str(point): None if figures is None else {k: round(v, 4) for k, v in figures.items()}
            for point, figures in metrics.checkpoints().items()
        }
        arrived = metrics.arrived[-1] if metrics.arrived else 0
        return {
            "arrivedPercent": round(100 * arrived / max(metrics.total_milli, 1), 3),
            "checkpoints": checkpoints,
            "placedByKind": dict(metrics.placed),
            "failedByKind": dict(metrics.failed),
            "allocationCurve": metrics.curve(),
        }
