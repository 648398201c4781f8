"""NodeResourcesFitPlus: a scoring strategy (and weight) per resource.

Semantics of Koordinator v1.6's shipped plugin (scheduler-plugins PR #843 never merged), with
Kubernetes request aggregation where Koordinator diverges (sidecars, overhead):

* only resources the pod requests (> 0, no defaults) *and* that are configured are scored;
* per resource: MostAllocated = ``min(req, alloc) * 100 // alloc``; LeastAllocated =
  ``(alloc - req) * 100 // alloc`` (0 when over-committed); allocatable 0 scores 0 with its weight;
* ``req`` = node's NonZeroRequested (cpu/memory) or requested, plus the pod's amount;
* an extended resource served by DRA devices on a node without it in ``status.allocatable``
  (``NodeInfo.fit_amounts``) is scored in milli-devices: devices published and held on the node,
  plus the pod's amount times 1000 (the same score as counting whole devices, exact for shares);
* combined as ``sum(score * weight) // sum(weight)``, and 100 when nothing is scored.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from scoring.framework import (
    MAX_NODE_SCORE,
    ArgsError,
    NodeInfo,
    PodInfo,
    args_field,
    parse_choice,
    reject_unknown_fields,
)
from scoring.table import Batch, Int64Array

__all__ = ["NAME", "NodeResourcesFitPlus", "NodeResourcesFitPlusArgs", "ResourceStrategy", "StrategyType"]

NAME = "NodeResourcesFitPlus"


class StrategyType(enum.Enum):
    MOST_ALLOCATED = "MostAllocated"
    LEAST_ALLOCATED = "LeastAllocated"


@dataclass(frozen=True, slots=True)
class ResourceStrategy:
    type: StrategyType
    weight: int


@dataclass(frozen=True, slots=True)
class NodeResourcesFitPlusArgs:
    resources: Mapping[str, ResourceStrategy]

    @classmethod
    def parse(cls, raw: Any, path: str = "args") -> NodeResourcesFitPlusArgs:
        """Validate at config load (upstream validates nothing: we refuse what would score silently wrong)."""
        resources = args_field(raw, path, "resources", "resource name to {type, weight}")
        if not isinstance(resources, Mapping) or not resources:
            raise ArgsError(f"{path}.resources: must be a non-empty map of resource name to {{type, weight}}")
        parsed: dict[str, ResourceStrategy] = {}
        for name, strategy in resources.items():
            field = f"{path}.resources[{name}]"
            if not isinstance(name, str) or not name:
                raise ArgsError(f"{path}.resources: resource names must be non-empty strings")
            if not isinstance(strategy, Mapping):
                raise ArgsError(f"{field}: must be a mapping with 'type' and 'weight'")
            reject_unknown_fields(strategy, field, ("type", "weight"))
            strategy_type = parse_choice(StrategyType, strategy.get("type"), f"{field}.type")
            weight = strategy.get("weight", 1)
            if isinstance(weight, bool) or not isinstance(weight, int) or weight <= 0:
                raise ArgsError(f"{field}.weight: must be an integer > 0, got {weight!r}")
            parsed[name] = ResourceStrategy(strategy_type, weight)
        return cls(parsed)


def _resource_score(strategy: StrategyType, requested: int, allocatable: int) -> int:
    if allocatable <= 0:
        return 0
    if strategy is StrategyType.MOST_ALLOCATED:
        return min(requested, allocatable) * MAX_NODE_SCORE // allocatable
    if requested > allocatable:
        return 0
    return (allocatable - requested) * MAX_NODE_SCORE // allocatable


class NodeResourcesFitPlus:
    name = NAME

    def __init__(self, args: NodeResourcesFitPlusArgs) -> None:
        self.args = args

    def score(self, pod: PodInfo, node: NodeInfo) -> int:
        total = weight_sum = 0
        requested_names = pod.resources.requested_names
        for name, strategy in self.args.resources.items():
            if name not in requested_names:
                continue  # a configured resource the pod does not request is skipped entirely
            requested, allocatable = node.fit_amounts(name, pod.resources.amount(name))
            total += _resource_score(strategy.type, requested, allocatable) * strategy.weight
            weight_sum += strategy.weight
        if weight_sum == 0:
            return MAX_NODE_SCORE
        return total // weight_sum

    def score_batch(self, pod: PodInfo, batch: Batch) -> Int64Array | None:
        """``score`` for every node of ``batch`` at once (same integer arithmetic, vectorised); None
        when a pod amount in milli-devices could overflow int64 (the caller scores one by one)."""
        total = np.zeros(len(batch), dtype=np.int64)
        weight_sum = 0
        requested_names = pod.resources.requested_names
        for name, strategy in self.args.resources.items():
            if name not in requested_names:
                continue
            amounts = batch.fit_amounts(name, pod.resources.amount(name))
            if amounts is None:
                return None
            requested, allocatable = amounts
            has = allocatable > 0
            divisor = np.where(has, allocatable, 1)
            if strategy.type is StrategyType.MOST_ALLOCATED:
                score = np.where(has, np.minimum(requested, allocatable) * MAX_NODE_SCORE // divisor, 0)
            else:
                fits = has & (requested <= allocatable)
                score = np.where(fits, (allocatable - requested) * MAX_NODE_SCORE // divisor, 0)
            total += score * strategy.weight
            weight_sum += strategy.weight
        if weight_sum == 0:
            return np.full(len(batch), MAX_NODE_SCORE, dtype=np.int64)
        return total // weight_sum
