"""kube-scheduler's in-tree NodeResourcesBalancedAllocation score (1.36).

``pkg/scheduler/framework/plugins/noderesources/balanced_allocation.go`` as of kubernetes#135573
(in 1.36: the binary's ``balancedResourceScore`` helper is the marker), restated:

* **Inputs** (``useRequested``): plain requests for every resource, node and pod alike (no
  100m / 200Mi defaults); a scalar resource the pod does not request and every resource with node
  allocatable 0 are left out (``scoring.intree.resource_inputs``). Default resources: cpu, memory.
* **Balance** of a set of requested amounts: per resource left in, ``fraction = req / alloc`` in
  IEEE double, capped at 1 (over-commit counts as full). ``std`` is 0 with fewer than two fractions,
  ``|f0 - f1| / 2`` with exactly two, and the population standard deviation
  ``sqrt(Σ(f - mean)² / n)`` with more; balance = ``int((1 - std) * 100)``, so 50..100.
* **Score** = ``50 + (50 + balance(with the pod) - balance(without the pod)) / 2`` (Go integer
  division): 75 when the pod leaves the balance as it was, towards 100 when it evens the node out,
  towards 50 when it skews it. Before 1.36 the score was ``balance(with the pod)`` alone.
* **Skip**: a pod that requests none of the resources (all 0) is skipped at PreScore
  (kubernetes#129138): the plugin adds nothing for it on any node (``applies``).

Float arithmetic is the same IEEE double as Go's on amd64 (no fused multiply-add there), in the
same order, so the truncation lands on the same integer; the vectorised twin keeps that order.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from scoring.framework import MAX_NODE_SCORE, ArgsError, NodeInfo, PodInfo
from scoring.intree import (
    DEFAULT_RESOURCES,
    ResourceSpec,
    check_args_object,
    go_quotient,
    go_quotient_batch,
    parse_resource_specs,
    resource_inputs,
    resource_inputs_batch,
)
from scoring.table import Batch, Int64Array

__all__ = [
    "NAME",
    "NodeResourcesBalancedAllocation",
    "NodeResourcesBalancedAllocationArgs",
    "balance",
    "balance_batch",
    "balanced_score",
    "balanced_score_batch",
]

NAME = "NodeResourcesBalancedAllocation"
_HALF = MAX_NODE_SCORE // 2


@dataclass(frozen=True, slots=True)
class NodeResourcesBalancedAllocationArgs:
    resources: tuple[ResourceSpec, ...] = DEFAULT_RESOURCES

    @classmethod
    def parse(cls, raw: Any, path: str = "args") -> NodeResourcesBalancedAllocationArgs:
        """Default and validate as kube-scheduler does: weights must be 1, names unique."""
        args = check_args_object(raw, path, "NodeResourcesBalancedAllocationArgs", ("resources",))
        resources = parse_resource_specs(args.get("resources"), f"{path}.resources", max_weight=1)
        seen: set[str] = set()
        for index, spec in enumerate(resources):
            if spec.name in seen:
                raise ArgsError(f"{path}.resources[{index}].name: duplicate resource {spec.name!r}")
            seen.add(spec.name)
        return cls(resources)


def balance(requested: Sequence[int], allocatable: Sequence[int]) -> int:
    """``int((1 - std) * 100)`` of the requested fractions of the resources with allocatable != 0."""
    fractions: list[float] = []
    total = 0.0
    for amount, capacity in zip(requested, allocatable, strict=True):
        if capacity == 0:
            continue
        fraction = float(amount) / float(capacity)
        if fraction > 1:
            fraction = 1.0
        total += fraction
        fractions.append(fraction)
    std = 0.0
    if len(fractions) == 2:
        std = abs((fractions[0] - fractions[1]) / 2)
    elif len(fractions) > 2:
        mean = total / len(fractions)
        squares = 0.0
        for fraction in fractions:
            squares = squares + (fraction - mean) * (fraction - mean)
        std = math.sqrt(squares / len(fractions))
    return int((1 - std) * MAX_NODE_SCORE)


def balance_batch(requested: Sequence[Int64Array], allocatable: Sequence[Int64Array]) -> Int64Array:
    """``balance`` per node: resources left out contribute exact zeros, so sums keep their order."""
    size = len(allocatable[0]) if allocatable else 0
    count = np.zeros(size, dtype=np.int64)
    total = np.zeros(size, dtype=np.float64)
    first = np.zeros(size, dtype=np.float64)
    second = np.zeros(size, dtype=np.float64)
    fractions = []
    for amount, capacity in zip(requested, allocatable, strict=True):
        counted = capacity != 0
        fraction = np.minimum(amount.astype(np.float64) / np.where(counted, capacity, 1).astype(np.float64), 1.0)
        fraction = np.where(counted, fraction, 0.0)
        total = total + fraction
        first = np.where(counted & (count == 0), fraction, first)
        second = np.where(counted & (count == 1), fraction, second)
        count += counted
        fractions.append((counted, fraction))
    n = np.maximum(count, 1).astype(np.float64)
    mean = total / n
    squares = np.zeros(size, dtype=np.float64)
    for counted, fraction in fractions:
        squares = squares + np.where(counted, (fraction - mean) * (fraction - mean), 0.0)
    std = np.where(count == 2, np.abs((first - second) / 2), np.where(count > 2, np.sqrt(squares / n), 0.0))
    result: Int64Array = ((1 - std) * MAX_NODE_SCORE).astype(np.int64)  # truncates toward zero, as Go
    return result


V = TypeVar("V", int, Int64Array)  # one node's amount, or every node's of a batch


def _split(inputs: Iterable[tuple[V, V, int]]) -> tuple[list[V], list[V], list[V]]:
    """``resource_inputs`` per resource, as the three lists balance needs: allocatable, requested
    without the pod and requested with it."""
    allocatable: list[V] = []
    without: list[V] = []
    with_pod: list[V] = []
    for capacity, used, amount in inputs:
        allocatable.append(capacity)
        without.append(used)
        with_pod.append(used + amount)
    return allocatable, without, with_pod


def balanced_score(with_pod: int, without_pod: int) -> int:
    """The plugin score from the two balances (each 50..100): 50..100, 75 when nothing changes."""
    return _HALF + go_quotient(_HALF + with_pod - without_pod, 2)


def balanced_score_batch(with_pod: Int64Array, without_pod: Int64Array) -> Int64Array:
    return _HALF + go_quotient_batch(_HALF + with_pod - without_pod, 2)


class NodeResourcesBalancedAllocation:
    name = NAME

    def __init__(self, args: NodeResourcesBalancedAllocationArgs) -> None:
        self.args = args

    def applies(self, pod: PodInfo) -> bool:
        """False for a pod that requests none of the resources: PreScore skips it (no score at all)."""
        return any(pod.resources.requests.get(spec.name, 0) != 0 for spec in self.args.resources)

    def score(self, pod: PodInfo, node: NodeInfo) -> int:
        allocatable, without, with_pod = _split(
            resource_inputs(pod, node, spec.name, non_zero=False) for spec in self.args.resources
        )
        return balanced_score(balance(with_pod, allocatable), balance(without, allocatable))

    def score_batch(self, pod: PodInfo, batch: Batch) -> Int64Array:
        allocatable, without, with_pod = _split(
            resource_inputs_batch(pod, batch, spec.name, non_zero=False) for spec in self.args.resources
        )
        if not allocatable:
            return np.full(len(batch), balanced_score(MAX_NODE_SCORE, MAX_NODE_SCORE), dtype=np.int64)
        return balanced_score_batch(balance_batch(with_pod, allocatable), balance_batch(without, allocatable))
