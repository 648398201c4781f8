"""The candidates' view of the cache: node-table rows for a request, or one node at a time.

A pod kube-scheduler retries may already be assumed on a candidate; it must not compete with its
own assumption, so its contribution is taken out of that node (in the rows and in ``NodeInfo``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from app.cluster.cache import ClusterCache
from app.http import wire
from k8s_semantics.quantity import QuantityError
from scoring.framework import Code, NodeInfo, PodInfo, Status
from scoring.resources import parse_resource_list
from scoring.table import EXACT_LIMIT, Batch
from scoring.verdicts import BatchVerdicts

_REASONS_KEPT = 4  # FailedNodes maps kept: Unschedulable and UnschedulableAndUnresolvable of two shapes

__all__ = ["REASON_INVALID_NODE", "REASON_NODE_NOT_IN_CACHE", "CandidateNodes"]

# Short, reusable reasons: kube-scheduler aggregates identical strings in the FailedScheduling event.
REASON_NODE_NOT_IN_CACHE = "node(s) unknown to the GPU extender"
REASON_INVALID_NODE = "node(s) with invalid allocatable"


@dataclass(frozen=True, slots=True)
class _Reasons:
    """One FailedNodes map as sent, and exactly what it was built from."""

    names: list[str]
    version: int
    code: Code
    reasons: tuple[str, ...]
    positions: npt.NDArray[np.intp]
    reason_index: npt.NDArray[np.int64]
    raw: wire.NodeReasons


class CandidateNodes:
    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache
        self._reasons: list[_Reasons] = []  # the last few FailedNodes maps, most recent first

    def gather(self, pod: PodInfo, args: wire.ExtenderArgs) -> tuple[wire.Candidates, Batch | None]:
        """Candidates in request order, each once, and their table rows (None: judge one by one)."""
        candidates = wire.Candidates.of(args, dedupe=False)
        if not self._exact(pod):
            return wire.Candidates.of(args), None
        batch = self._batch(pod, candidates.names)
        if batch is None or (not batch.all_known and _repeats(candidates.names, batch)):
            candidates = wire.Candidates.of(args)  # repeated names: dedupe (rare), then gather again
            batch = self._batch(pod, candidates.names)
        return candidates, batch

    def node_reasons(
        self, verdicts: BatchVerdicts, names: list[str], batch: Batch | None, code: Code
    ) -> wire.NodeReasons:
        """The candidates that failed with ``code`` and why. When the node table holds every candidate,
        the map is assembled from its prebuilt name keys; the same failures over the same name list
        (pods of one shape, one after the other) get the very bytes sent last time."""
        if batch is None or not batch.all_known:
            return verdicts.failed(names, code)
        positions, reason_index = verdicts.failed_at(code)
        reasons = tuple(status.reason for status in verdicts.reasons)
        table = self.cache.table
        for seen in self._reasons:
            if (
                seen.names is names
                and seen.version == table.version
                and seen.code == code
                and seen.reasons == reasons
                and np.array_equal(seen.positions, positions)
                and np.array_equal(seen.reason_index, reason_index)
            ):
                return seen.raw
        keys = map(table.name_key.__getitem__, batch.rows[positions].tolist())
        raw = wire.node_reasons_raw(keys, reasons, reason_index.tolist())
        entry = _Reasons(names, table.version, code, reasons, positions, reason_index, raw)
        self._reasons = [entry, *self._reasons[: _REASONS_KEPT - 1]]
        return raw

    def _exact(self, pod: PodInfo) -> bool:
        """Whether the node table answers exactly for this pod (else the scalar path judges)."""
        return self.cache.table.exact and all(abs(v) < EXACT_LIMIT for v in pod.resources.requests.values())

    def _batch(self, pod: PodInfo, names: list[str]) -> Batch | None:
        counted = self.cache.counted(pod.uid)
        return self.cache.table.batch(names, (counted[0], pod.resources) if counted else None)

    def node(self, pod: PodInfo, name: str, allocatable: Mapping[str, Any] | None) -> NodeInfo | Status:
        """One candidate as a ``NodeInfo`` (a NodeList request's allocatable stands in for a node the
        cache does not know), or why it cannot be judged."""
        try:
            node = self.cache.node_info(name)
            if node is None and allocatable is not None:
                node = self.cache.node_info_for(name, parse_resource_list(allocatable, "status.allocatable"))
        except (QuantityError, wire.WireError):
            return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, REASON_INVALID_NODE)
        if node is None:
            return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, REASON_NODE_NOT_IN_CACHE)
        counted = self.cache.counted(pod.uid)
        if counted is not None and counted[0] == name:
            node = _without(node, pod)
        return node


def _without(node: NodeInfo, pod: PodInfo) -> NodeInfo:
    requested = dict(node.requested)
    for name, amount in pod.resources.requests.items():
        requested[name] = requested.get(name, 0) - amount
    return replace(
        node,
        requested=requested,
        non_zero_cpu=node.non_zero_cpu - pod.resources.non_zero_cpu,
        non_zero_memory=node.non_zero_memory - pod.resources.non_zero_memory,
        pod_count=node.pod_count - 1,
    )


def _repeats(names: list[str], batch: Batch) -> bool:
    """Whether names unknown to the table repeat (the table itself reports repeated known names)."""
    unknown = [names[i] for i in (~batch.known).nonzero()[0].tolist()]
    return len(set(unknown)) < len(unknown)
