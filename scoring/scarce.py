"""ScarceResourceAvoidance: keep pods that do not need a scarce resource off nodes that offer it.

Counts resource *types*, never quantities: ``D`` = scored types with allocatable > 0 on the node
that the pod does not request, ``S`` = ``D`` ∩ scarce list (exact names). Score is
``(|D| - |S|) * 100 // |D|``, and 100 when either set is empty. ``pods`` never counts. An extended
resource served by DRA devices on the node (``NodeInfo.dra_allocatable``) is one of its types.

A pod that asks for every scarce resource (in its containers or through its ResourceClaims) scores
100 on every node it can use, so the plugin sits out for it (``applies``), as a PreScore that
returns Skip: a constant would only shift the profile's weighted mean and, truncated, blur the
other plugins' differences.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from scoring.framework import MAX_NODE_SCORE, ArgsError, NodeInfo, PodInfo, args_field
from scoring.table import Batch, Int64Array

__all__ = ["NAME", "ScarceResourceAvoidance", "ScarceResourceAvoidanceArgs"]

NAME = "ScarceResourceAvoidance"


@dataclass(frozen=True, slots=True)
class ScarceResourceAvoidanceArgs:
    resources: frozenset[str]

    @classmethod
    def parse(cls, raw: Any, path: str = "args") -> ScarceResourceAvoidanceArgs:
        resources = args_field(raw, path, "resources", "a list of resource names")
        if not isinstance(resources, Sequence) or isinstance(resources, str) or not resources:
            raise ArgsError(f"{path}.resources: must be a non-empty list of resource names")
        seen: set[str] = set()
        for index, name in enumerate(resources):
            if not isinstance(name, str) or not name:
                raise ArgsError(f"{path}.resources[{index}]: must be a non-empty string")
            if name in seen:
                raise ArgsError(f"{path}.resources[{index}]: duplicate resource name {name!r}")
            seen.add(name)
        return cls(frozenset(seen))


class ScarceResourceAvoidance:
    name = NAME

    def __init__(self, args: ScarceResourceAvoidanceArgs) -> None:
        self.args = args

    def applies(self, pod: PodInfo) -> bool:
        """False for a pod that asks for every scarce resource (it would score 100 everywhere)."""
        return not all(pod.device_request(name)[0] > 0 for name in self.args.resources)

    def score(self, pod: PodInfo, node: NodeInfo) -> int:
        unrequested = node.allocatable_types - pod.resources.requested_names
        if not unrequested:
            return MAX_NODE_SCORE
        scarce = len(unrequested & self.args.resources)
        if scarce == 0:
            return MAX_NODE_SCORE
        return (len(unrequested) - scarce) * MAX_NODE_SCORE // len(unrequested)

    def score_batch(self, pod: PodInfo, batch: Batch) -> Int64Array | None:
        return self.score_rows(self.row_key(pod), batch)

    def row_key(self, pod: PodInfo) -> frozenset[str]:
        """A node's score depends on its row (its resource types) and the pod's requested resource
        names alone (``RowScorer``)."""
        return pod.resources.requested_names

    def score_rows(self, requested: frozenset[str], batch: Batch) -> Int64Array | None:
        """``score`` for every node of ``batch``: set sizes by popcount over per-node type bitmasks.

        None when the cluster has more resource types than bits (the caller scores one by one).
        """
        masks = batch.type_masks()
        if masks is None:
            return None
        all_bits = (1 << 64) - 1
        not_requested = np.uint64(~batch.table.mask_of(requested) & all_bits)
        unrequested = masks & not_requested
        scarce = np.bitwise_count(unrequested & np.uint64(batch.table.mask_of(self.args.resources))).astype(np.int64)
        count = np.bitwise_count(unrequested).astype(np.int64)
        avoid = (count > 0) & (scarce > 0)
        return np.where(avoid, (count - scarce) * MAX_NODE_SCORE // np.maximum(count, 1), MAX_NODE_SCORE)
