"""bench.bind's over-commit audit from the API server, and its per-phase summary and table."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from bench.plane import GPU
from tests.e2e.controlplane import ControlPlane

if TYPE_CHECKING:
    from bench.bind import Drive

__all__ = ["Audit", "audit", "print_table", "summary"]


@dataclass
class Audit:
    """The API server's view after the run."""

    nodes: int
    bound_pods: int
    over_committed: dict[str, dict[str, float]]  # node -> resource -> requested beyond allocatable
    confirmed_not_bound: list[str]  # answered Error "" but not on that node in the API server
    bound_unconfirmed: list[str]  # on a node without a bind the driver saw confirmed
    gpu_use: float

    @property
    def ok(self) -> bool:
        return not (self.over_committed or self.confirmed_not_bound or self.bound_unconfirmed)


# --------------------------------------------------------------------------- audit
def _quantity(value: str) -> float:
    """A Kubernetes quantity as a number (the suffixes these pods and nodes use)."""
    units = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6, "G": 1e9}
    for suffix in sorted(units, key=len, reverse=True):
        if value.endswith(suffix):
            return float(value[: -len(suffix)]) * units[suffix]
    return float(value)


def audit(plane: ControlPlane, nodes: Sequence[str], confirmed: dict[str, str], namespace: str) -> Audit:
    """From the API server alone: requests per node against allocatable, and binds against answers."""
    wanted = set(nodes)
    allocatable = {
        n["metadata"]["name"]: {k: _quantity(v) for k, v in n["status"]["allocatable"].items()}
        for n in plane.admin.items("/api/v1/nodes")
        if n["metadata"]["name"] in wanted
    }
    requested: dict[str, defaultdict[str, float]] = {n: defaultdict(float) for n in wanted}
    bound_here: dict[str, str] = {}
    for pod in plane.admin.items("/api/v1/pods"):
        node = pod["spec"].get("nodeName")
        if node not in wanted or pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            continue
        requested[node]["pods"] += 1
        for container in pod["spec"]["containers"]:
            for resource, value in (container["resources"].get("requests") or {}).items():
                requested[node][resource] += _quantity(value)
        if pod["metadata"]["namespace"] == namespace:
            bound_here[pod["metadata"]["name"]] = node
    over = {}
    for node, used in requested.items():
        beyond = {r: used[r] - allocatable[node].get(r, 0.0) for r in used if used[r] > allocatable[node].get(r, 0.0)}
        if beyond:
            over[node] = beyond
    total_gpus = sum(a.get(GPU, 0.0) for a in allocatable.values())
    return Audit(
        nodes=len(wanted),
        bound_pods=sum(int(r["pods"]) for r in requested.values()),
        over_committed=over,
        confirmed_not_bound=sorted(p for p, n in confirmed.items() if bound_here.get(p) != n),
        bound_unconfirmed=sorted(p for p in bound_here if p not in confirmed),
        gpu_use=round(sum(r[GPU] for r in requested.values()) / max(total_gpus, 1.0), 3),
    )


# --------------------------------------------------------------------------- report
def _percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def summary(run: Drive, check: Audit, cpu: dict[str, float]) -> dict[str, Any]:
    per_pod = 1000 / max(len(run.confirmed), 1)
    return {
        "pods": run.pods,
        "concurrency": run.concurrency,
        "filtersInFlight": run.filters_in_flight or run.concurrency,
        "confirmed": len(run.confirmed),
        "seconds": run.seconds,
        "podsPerSecond": run.pods_per_second,
        "bindP50Ms": round(_percentile(run.bind_ms, 0.5), 2),
        "bindP99Ms": round(_percentile(run.bind_ms, 0.99), 2),
        "filterP50Ms": round(_percentile(run.filter_ms, 0.5), 2),
        "filterP99Ms": round(_percentile(run.filter_ms, 0.99), 2),
        "binds": len(run.bind_ms),
        "filters": len(run.filter_ms),
        "errors": dict(run.errors),
        "unschedulable": run.unschedulable,
        "givenUp": run.given_up,
        "staleSent": run.stale_sent,
        "staleAccepted": run.stale_accepted,
        "timedOut": run.timed_out,
        "extenderCpuSeconds": round(cpu["extender"], 2),
        "extenderCpuMsPerPod": round(cpu["extender"] * per_pod, 2),
        # Every process of the phase, ms per confirmed pod: where the machine's cores went.
        "cpuMsPerPod": {name: round(seconds * per_pod, 2) for name, seconds in cpu.items()},
        "audit": {**asdict(check), "ok": check.ok},
    }


def print_table(rows: list[dict[str, Any]]) -> None:
    print(
        "\n| phase | pods | conc. (filters) | stale | pods/s | bind p50 / p99 ms | filter p50 / p99 ms | errors "
        "| over-commits | extender CPU s | CPU ms/pod |\n|---|---|---|---|---|---|---|---|---|---|---|"
    )
    for r in rows:
        errors = ", ".join(f"{k} {v}" for k, v in sorted(r["errors"].items())) or "0"
        print(
            f"| {r['phase']} | {r['confirmed']}/{r['pods']} | {r['concurrency']} ({r['filtersInFlight']}) "
            f"| {r['staleSent']} | {r['podsPerSecond']} "
            f"| {r['bindP50Ms']} / {r['bindP99Ms']} | {r['filterP50Ms']} / {r['filterP99Ms']} | {errors} "
            f"| {len(r['audit']['over_committed'])} | {r['extenderCpuSeconds']} | {r['extenderCpuMsPerPod']} |"
        )
    for r in rows:
        a = r["audit"]
        print(
            f"audit ({r['phase']}): {a['bound_pods']} pods bound on {a['nodes']} nodes, GPU use "
            f"{a['gpu_use']}; over-committed nodes {a['over_committed'] or 0}; confirmed but not bound there "
            f"{a['confirmed_not_bound'] or 0}; bound without a confirmed bind {a['bound_unconfirmed'] or 0}; "
            f"stale binds accepted {r['staleAccepted']}; unschedulable {r['unschedulable']}, given up {r['givenUp']}"
        )
        print(f"CPU ms per pod ({r['phase']}): {r['cpuMsPerPod']}")
