"""The FGD paper's workload inflation (``--mode inflate``).

As the artifact does (``tuneUpPods`` / ``tuneDownPods`` then ``SortClusterPods`` with
``shufflePod``): while the trace's GPU demand is below the target share of the cluster's GPUs,
copies of trace pods drawn uniformly *with replacement* are added until the next one would take
the demand past the target; a trace already above the target loses pods drawn at random until it
is not. The list is then shuffled, all with one seeded generator, so a seed is one experiment.
Copies are named ``<pod>-c<n>``. Demand is ``num_gpu · gpu_milli`` milli-GPUs (the artifact
compares the per-GPU milli for the stop test, which lets multi-GPU copies overshoot; we compare
what the pod adds).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

import msgspec

from simulator.metrics import WHOLE, demand_milli
from simulator.trace import SimNode, SimPod

__all__ = ["DEFAULT_TARGET", "inflate", "renamed", "shuffled"]

DEFAULT_TARGET = 1.3


def renamed(pod: SimPod, name: str) -> SimPod:
    """A copy of ``pod`` under another name (body, uid and all)."""
    body = msgspec.json.decode(pod.body)
    uid = f"{pod.namespace}-{name}"
    body["metadata"] = {**body["metadata"], "name": name, "uid": uid}
    return replace(pod, name=name, body=msgspec.json.encode(body), uid=uid)


def inflate(pods: Sequence[SimPod], nodes: Sequence[SimNode], target: float, seed: int) -> list[SimPod]:
    """The trace grown (or cut) to ``target`` x the cluster's GPUs of demand, in a seeded shuffled order."""
    if target <= 0:
        raise ValueError(f"target share must be > 0, got {target}")
    if not pods:
        return []
    rng = random.Random(seed)
    limit = target * WHOLE * sum(node.gpus for node in nodes)
    out = list(pods)
    demand = sum(demand_milli(pod) for pod in out)
    if demand > limit:
        while demand > limit and out:
            demand -= demand_milli(out.pop(rng.randrange(len(out))))
    else:
        copies = 0
        while True:
            pod = pods[rng.randrange(len(pods))]
            if demand + demand_milli(pod) > limit:
                break
            out.append(renamed(pod, f"{pod.name}-c{copies}"))
            demand += demand_milli(pod)
            copies += 1
    rng.shuffle(out)
    return out


def shuffled(pods: Sequence[SimPod], seed: int) -> list[SimPod]:
    """The trace in a seeded random order (fill mode's ``--shuffle``)."""
    out = list(pods)
    random.Random(seed).shuffle(out)
    return out
