"""kube-scheduler's in-tree NodeResourcesFit score (1.36): LeastAllocated, MostAllocated, RequestedToCapacityRatio.

The extender never runs these; the simulator adds them to the extender's priority exactly as
kube-scheduler does, so a profile that leaves them on can be replayed. Semantics of
``pkg/scheduler/framework/plugins/noderesources`` (``resource_allocation.go``, ``least_allocated.go``,
``most_allocated.go``, ``requested_to_capacity_ratio.go``), restated here with the same integer
arithmetic:

* **Inputs per configured resource** (``resourceAllocationScorer``): cpu and memory use the node's
  NonZeroRequested plus the pod's request with the 100m / 200Mi per-container defaults;
  ephemeral-storage and scalar resources (extended, hugepages, ...) use plain requests. A scalar
  resource the pod does not request is skipped, and so is every resource whose node allocatable
  is 0 (or absent); any other name (``pods``) is always skipped.
* **LeastAllocated** ``(alloc - req) * 100 // alloc`` (0 when over-committed), **MostAllocated**
  ``min(req, alloc) * 100 // alloc``; combined ``Σ score·w // Σ w`` over the resources not skipped,
  0 when all are skipped (FitPlus gives 100 there; in-tree gives 0).
* **RequestedToCapacityRatio**: utilization ``min(req, alloc) * 100 // alloc`` (100 when over-committed)
  through the broken-linear ``shape`` (scores 0..10 scaled to 0..100, Go's truncating division
  between points); only resources with a score > 0 count, and the mean is rounded half away from
  zero (``math.Round``) instead of truncated.
* ``ignoredResources`` / ``ignoredResourceGroups`` only affect NodeResourcesFit's *filter*; they
  are parsed and kept, never used for scores.

NodeResourcesBalancedAllocation is in ``scoring/balanced.py``; both share the input gathering and
the Go arithmetic helpers below. Each score has a scalar definition and a vectorised twin over
``scoring.table.Batch``; tests check that they agree node by node.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from scoring.framework import MAX_NODE_SCORE, ArgsError, NodeInfo, PodInfo, parse_choice, reject_unknown_fields
from scoring.resources import CPU, EPHEMERAL_STORAGE, MEMORY, is_scalar_resource_name
from scoring.table import Batch, Int64Array

__all__ = [
    "ARGS_API_VERSION",
    "DEFAULT_RESOURCES",
    "MAX_CUSTOM_PRIORITY_SCORE",
    "MAX_RESOURCE_WEIGHT",
    "NAME",
    "NodeResourcesFit",
    "NodeResourcesFitArgs",
    "ResourceSpec",
    "ScoringStrategyType",
    "ShapePoint",
    "broken_linear",
    "broken_linear_batch",
    "check_args_object",
    "go_quotient",
    "go_quotient_batch",
    "go_round",
    "go_round_batch",
    "least_requested_score",
    "most_requested_score",
    "most_requested_score_batch",
    "parse_resource_specs",
    "resource_inputs",
    "resource_inputs_batch",
]

NAME = "NodeResourcesFit"
ARGS_API_VERSION = "kubescheduler.config.k8s.io/v1"
MAX_CUSTOM_PRIORITY_SCORE = 10  # config.MaxCustomPriorityScore: shape scores are 0..10
MAX_UTILIZATION = 100
MAX_RESOURCE_WEIGHT = 100  # validation: resource weights are in (0, 100]


class ScoringStrategyType(enum.Enum):
    LEAST_ALLOCATED = "LeastAllocated"
    MOST_ALLOCATED = "MostAllocated"
    REQUESTED_TO_CAPACITY_RATIO = "RequestedToCapacityRatio"


@dataclass(frozen=True, slots=True)
class ResourceSpec:
    name: str
    weight: int = 1


@dataclass(frozen=True, slots=True)
class ShapePoint:
    utilization: int  # 0..100
    score: int  # 0..10 as configured


# kube-scheduler's defaultResourceSpec: cpu and memory, weight 1 each.
DEFAULT_RESOURCES = (ResourceSpec(CPU, 1), ResourceSpec(MEMORY, 1))


# ---------------------------------------------------------------------------------------- args
def _integer(value: Any, path: str) -> int:
    """An int32-style integer field; null reads as 0 (Go's zero value)."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgsError(f"{path}: must be an integer, got {value!r}")
    return value


def check_args_object(raw: Any, path: str, kind: str, fields: Sequence[str]) -> Mapping[str, Any]:
    """``raw`` as a mapping of ``fields`` (plus the optional ``apiVersion`` / ``kind`` of a typed
    args object); None is an empty mapping. kube-scheduler decodes its configuration strictly, so
    an unknown field is an error here too."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ArgsError(f"{path}: must be a mapping ({kind})")
    unknown = sorted(set(raw) - {"apiVersion", "kind", *fields}, key=str)
    if unknown:
        raise ArgsError(f"{path}: unknown field(s) {unknown} (known: {', '.join(fields)})")
    if raw.get("kind", kind) != kind:
        raise ArgsError(f"{path}.kind: {raw['kind']!r} is not {kind}")
    if raw.get("apiVersion", ARGS_API_VERSION) != ARGS_API_VERSION:
        raise ArgsError(f"{path}.apiVersion: {raw['apiVersion']!r} is not {ARGS_API_VERSION}")
    return raw


def _entries(raw: list[Any], path: str, keys: tuple[str, str]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(field path, entry) of a list of mappings holding only ``keys``."""
    for index, entry in enumerate(raw):
        field = f"{path}[{index}]"
        if not isinstance(entry, Mapping):
            raise ArgsError(f"{field}: must be a mapping with '{keys[0]}' and '{keys[1]}'")
        reject_unknown_fields(entry, field, keys)
        yield field, entry


def parse_resource_specs(raw: Any, path: str, *, max_weight: int = MAX_RESOURCE_WEIGHT) -> tuple[ResourceSpec, ...]:
    """``[{name, weight}]``; missing or empty = cpu and memory, weight 1; a missing or 0 weight is 1
    (kube-scheduler's defaulting); weights must then be in 1..``max_weight``."""
    if raw is None or raw == []:
        return DEFAULT_RESOURCES
    if not isinstance(raw, list):
        raise ArgsError(f"{path}: must be a list of {{name, weight}}")
    specs: list[ResourceSpec] = []
    for field, entry in _entries(raw, path, ("name", "weight")):
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise ArgsError(f"{field}.name: must be a non-empty string, got {name!r}")
        weight = _integer(entry.get("weight", 0), f"{field}.weight") or 1
        if not 1 <= weight <= max_weight:
            allowed = "1" if max_weight == 1 else f"in 1..{max_weight}"
            raise ArgsError(f"{field}.weight: must be {allowed} (0 or unset means 1), got {weight}")
        specs.append(ResourceSpec(name, weight))
    return tuple(specs)


def _parse_shape(raw: Any, path: str) -> tuple[ShapePoint, ...]:
    if not isinstance(raw, list) or not raw:
        raise ArgsError(f"{path}: at least one point must be specified")
    points: list[ShapePoint] = []
    for field, entry in _entries(raw, path, ("utilization", "score")):
        utilization = _integer(entry.get("utilization", 0), f"{field}.utilization")
        score = _integer(entry.get("score", 0), f"{field}.score")
        if not 0 <= utilization <= MAX_UTILIZATION:
            raise ArgsError(f"{field}.utilization: {utilization} not in valid range [0, {MAX_UTILIZATION}]")
        if not 0 <= score <= MAX_CUSTOM_PRIORITY_SCORE:
            raise ArgsError(f"{field}.score: {score} not in valid range [0, {MAX_CUSTOM_PRIORITY_SCORE}]")
        if points and points[-1].utilization >= utilization:
            raise ArgsError(f"{field}.utilization: values must be sorted in increasing order")
        points.append(ShapePoint(utilization, score))
    return tuple(points)


def _names(raw: Any, path: str, *, slash: bool) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ArgsError(f"{path}: must be a list of names")
    for index, name in enumerate(raw):
        if not isinstance(name, str) or not name:
            raise ArgsError(f"{path}[{index}]: must be a non-empty string, got {name!r}")
        if not slash and "/" in name:
            raise ArgsError(f"{path}[{index}]: resource group name can't contain '/'")
    return tuple(raw)


@dataclass(frozen=True, slots=True)
class NodeResourcesFitArgs:
    """NodeResourcesFitArgs after kube-scheduler's defaulting (LeastAllocated on cpu and memory)."""

    type: ScoringStrategyType = ScoringStrategyType.LEAST_ALLOCATED
    resources: tuple[ResourceSpec, ...] = DEFAULT_RESOURCES
    shape: tuple[ShapePoint, ...] = ()  # requestedToCapacityRatio.shape
    ignored_resources: tuple[str, ...] = ()  # filter only
    ignored_resource_groups: tuple[str, ...] = ()  # filter only

    @classmethod
    def parse(cls, raw: Any, path: str = "args") -> NodeResourcesFitArgs:
        """Default and validate as kube-scheduler does, with errors naming the field. Duplicate
        resources are accepted (kube-scheduler accepts them and counts them twice)."""
        args = check_args_object(
            raw, path, "NodeResourcesFitArgs", ("ignoredResources", "ignoredResourceGroups", "scoringStrategy")
        )
        ignored = _names(args.get("ignoredResources"), f"{path}.ignoredResources", slash=True)
        groups = _names(args.get("ignoredResourceGroups"), f"{path}.ignoredResourceGroups", slash=False)
        strategy = args.get("scoringStrategy")
        if strategy is None:
            return cls(ignored_resources=ignored, ignored_resource_groups=groups)
        field = f"{path}.scoringStrategy"
        if not isinstance(strategy, Mapping):
            raise ArgsError(f"{field}: must be a mapping with 'type', 'resources' and 'requestedToCapacityRatio'")
        reject_unknown_fields(strategy, field, ("type", "resources", "requestedToCapacityRatio"))
        strategy_type = parse_choice(ScoringStrategyType, strategy.get("type"), f"{field}.type")
        resources = parse_resource_specs(strategy.get("resources"), f"{field}.resources")
        ratio = strategy.get("requestedToCapacityRatio")
        shape: tuple[ShapePoint, ...] = ()
        if ratio is not None:
            ratio_field = f"{field}.requestedToCapacityRatio"
            if not isinstance(ratio, Mapping) or set(ratio) - {"shape"}:
                raise ArgsError(f"{ratio_field}: must be a mapping with only 'shape'")
            shape = _parse_shape(ratio.get("shape"), f"{ratio_field}.shape")
        elif strategy_type is ScoringStrategyType.REQUESTED_TO_CAPACITY_RATIO:
            # kube-scheduler itself would dereference the missing shape and crash at start.
            raise ArgsError(f"{field}.requestedToCapacityRatio: required when type is RequestedToCapacityRatio")
        return cls(strategy_type, resources, shape, ignored, groups)


# ---------------------------------------------------------------------------------------- Go arithmetic
def go_quotient(numerator: int, denominator: int) -> int:
    """Go's integer division: truncates toward zero (Python's ``//`` floors)."""
    quotient = abs(numerator) // abs(denominator)
    return quotient if (numerator < 0) == (denominator < 0) else -quotient


def go_quotient_batch(numerator: Int64Array, denominator: int) -> Int64Array:
    """``go_quotient`` over an array, for a positive ``denominator``."""
    floor = numerator // denominator
    return np.where((numerator < 0) & (numerator % denominator != 0), floor + 1, floor)


def go_round(value: float) -> int:
    """Go's ``math.Round``: the nearest integer, halves away from zero (Python's ``round`` goes to even).
    ``value - floor(value)`` is exact for every double, so there is no ``floor(x + 0.5)`` error."""
    if value < 0:
        return -go_round(-value)
    floor = math.floor(value)
    return floor + 1 if value - floor >= 0.5 else floor


def go_round_batch(values: Any) -> Int64Array:
    """``go_round`` over a float64 array."""
    magnitude = np.abs(values)
    floor = np.floor(magnitude)
    rounded = np.where(magnitude - floor >= 0.5, floor + 1, floor)
    result: Int64Array = (np.sign(values) * rounded).astype(np.int64)
    return result


# ---------------------------------------------------------------------------------------- inputs
def _kind(name: str) -> str | None:
    if name in (CPU, MEMORY, EPHEMERAL_STORAGE):
        return name
    return "scalar" if is_scalar_resource_name(name) else None


def resource_inputs(pod: PodInfo, node: NodeInfo, name: str, *, non_zero: bool) -> tuple[int, int, int]:
    """(node allocatable, node requested without the pod, pod request) for one configured resource,
    as ``resourceAllocationScorer`` gathers them; allocatable 0 means the resource is skipped.

    ``non_zero`` (NodeResourcesFit): NonZeroRequested and the pod's defaulted amounts for cpu and
    memory. Without it (BalancedAllocation's ``useRequested``): plain requests everywhere.
    """
    kind = _kind(name)
    if kind is None:
        return 0, 0, 0
    amount = pod.resources.amount(name) if non_zero else pod.resources.requests.get(name, 0)
    if kind == "scalar" and amount == 0:
        return 0, 0, 0  # an extended resource the pod does not request is bypassed
    used = node.requested_for_scoring(name) if non_zero else node.requested.get(name, 0)
    return node.allocatable.get(name, 0), used, amount


def resource_inputs_batch(
    pod: PodInfo, batch: Batch, name: str, *, non_zero: bool
) -> tuple[Int64Array, Int64Array, int]:
    """``resource_inputs`` for every node of ``batch``: (allocatable, requested without the pod, pod request)."""
    kind = _kind(name)
    amount = 0
    if kind is not None:
        amount = pod.resources.amount(name) if non_zero else pod.resources.requests.get(name, 0)
    if kind is None or (kind == "scalar" and amount == 0):
        zeros = np.zeros(len(batch), dtype=np.int64)
        return zeros, zeros, 0
    used = batch.requested_for_scoring(name) if non_zero else batch.requested(name)
    return batch.allocatable(name), used, amount


# ---------------------------------------------------------------------------------------- strategies
def least_requested_score(requested: int, capacity: int) -> int:
    if capacity == 0 or requested > capacity:
        return 0
    return (capacity - requested) * MAX_NODE_SCORE // capacity


def most_requested_score(requested: int, capacity: int) -> int:
    if capacity == 0:
        return 0
    return min(requested, capacity) * MAX_NODE_SCORE // capacity  # pods without requests can over-commit


def most_requested_score_batch(requested: Int64Array, capacity: Int64Array) -> Int64Array:
    """``most_requested_score`` per element (products stay below 2**63 for inputs below 2**57)."""
    has = capacity > 0
    scores: Int64Array = np.where(
        has, np.minimum(requested, capacity) * MAX_NODE_SCORE // np.where(has, capacity, 1), 0
    )
    return scores


def _utilization(requested: int, capacity: int) -> int:
    """RequestedToCapacityRatio's utilization, 0..100."""
    if capacity <= 0 or requested >= capacity:
        return MAX_UTILIZATION
    return max(requested, 0) * MAX_UTILIZATION // capacity


def broken_linear(shape: Sequence[ShapePoint], utilization: int) -> int:
    """``helper.BuildBrokenLinearFunction``: the first point's score below it, the last one's above
    it, linear (Go's truncating division) in between. ``shape`` holds scores already on 0..100."""
    for index, point in enumerate(shape):
        if utilization <= point.utilization:
            if index == 0:
                return point.score
            before = shape[index - 1]
            rise = (point.score - before.score) * (utilization - before.utilization)
            return before.score + go_quotient(rise, point.utilization - before.utilization)
    return shape[-1].score


def broken_linear_batch(shape: Sequence[ShapePoint], utilization: Int64Array) -> Int64Array:
    """``broken_linear`` over an array: the first point at or above each value decides."""
    result = np.full(len(utilization), shape[-1].score, dtype=np.int64)
    for index in range(len(shape) - 1, -1, -1):  # last to first, so the first matching point wins
        point = shape[index]
        if index == 0:
            value = np.full(len(utilization), point.score, dtype=np.int64)
        else:
            before = shape[index - 1]
            rise = (point.score - before.score) * (utilization - before.utilization)
            value = before.score + go_quotient_batch(rise, point.utilization - before.utilization)
        result = np.where(utilization <= point.utilization, value, result)
    return result


class NodeResourcesFit:
    """The score of kube-scheduler's NodeResourcesFit (its filter is the extender's job here)."""

    name = NAME

    def __init__(self, args: NodeResourcesFitArgs) -> None:
        self.args = args
        scale = MAX_NODE_SCORE // MAX_CUSTOM_PRIORITY_SCORE
        self.shape = tuple(ShapePoint(p.utilization, p.score * scale) for p in args.shape)

    def _resource_score(self, requested: int, capacity: int) -> int:
        strategy = self.args.type
        if strategy is ScoringStrategyType.LEAST_ALLOCATED:
            return least_requested_score(requested, capacity)
        if strategy is ScoringStrategyType.MOST_ALLOCATED:
            return most_requested_score(requested, capacity)
        return broken_linear(self.shape, _utilization(requested, capacity))

    def applies(self, pod: PodInfo) -> bool:
        """False when every node scores 0 for ``pod``: each configured resource is one scoring skips
        for it (an extended resource it does not request, or a name scoring ignores). kube-scheduler
        still runs the plugin; its 0 everywhere adds nothing to any total, so it can be left out."""
        for spec in self.args.resources:
            kind = _kind(spec.name)
            if kind is not None and (kind != "scalar" or pod.resources.amount(spec.name) != 0):
                return True
        return False

    def score(self, pod: PodInfo, node: NodeInfo) -> int:
        ratio = self.args.type is ScoringStrategyType.REQUESTED_TO_CAPACITY_RATIO
        total = weight_sum = 0
        for spec in self.args.resources:
            allocatable, used, amount = resource_inputs(pod, node, spec.name, non_zero=True)
            if allocatable == 0:
                continue
            score = self._resource_score(used + amount, allocatable)
            if ratio and score <= 0:
                continue  # RequestedToCapacityRatio counts only resources that score
            total += score * spec.weight
            weight_sum += spec.weight
        if weight_sum == 0:
            return 0
        if ratio:
            return go_round(float(total) / float(weight_sum))
        return total // weight_sum

    def _resource_score_batch(self, requested: Int64Array, capacity: Int64Array) -> Int64Array:
        has = capacity > 0
        divisor = np.where(has, capacity, 1)
        bounded = np.minimum(requested, capacity)  # keeps every product below 2**63 (inputs < 2**57)
        strategy = self.args.type
        if strategy is ScoringStrategyType.LEAST_ALLOCATED:
            fits = has & (requested <= capacity)
            return np.where(fits, (capacity - bounded) * MAX_NODE_SCORE // divisor, 0)
        if strategy is ScoringStrategyType.MOST_ALLOCATED:
            return most_requested_score_batch(requested, capacity)
        over = ~has | (requested >= capacity)
        utilization = np.where(over, MAX_UTILIZATION, np.maximum(bounded, 0) * MAX_UTILIZATION // divisor)
        return broken_linear_batch(self.shape, utilization)

    def score_batch(self, pod: PodInfo, batch: Batch) -> Int64Array:
        """``score`` for every node of ``batch`` (same arithmetic; the float mean of
        RequestedToCapacityRatio is IEEE double in both, as in Go)."""
        ratio = self.args.type is ScoringStrategyType.REQUESTED_TO_CAPACITY_RATIO
        total = np.zeros(len(batch), dtype=np.int64)
        weight_sum = np.zeros(len(batch), dtype=np.int64)
        for spec in self.args.resources:
            allocatable, used, amount = resource_inputs_batch(pod, batch, spec.name, non_zero=True)
            if not allocatable.any():
                continue  # no candidate has it: counted nowhere (DRA-only GPUs, for one)
            score = self._resource_score_batch(used + amount, allocatable)
            counted = (allocatable != 0) & (score > 0) if ratio else allocatable != 0
            total += np.where(counted, score * spec.weight, 0)
            weight_sum += np.where(counted, spec.weight, 0)
        divisor = np.maximum(weight_sum, 1)
        mean = go_round_batch(total.astype(np.float64) / divisor.astype(np.float64)) if ratio else total // divisor
        result: Int64Array = np.where(weight_sum > 0, mean, 0)
        return result
