"""ManagedResourcesFit: the Filter check for resources the extender manages.

With ``managedResources: [{name: nvidia.com/gpu, ignoredByScheduler: true}]`` kube-scheduler's own
NodeResourcesFit no longer checks the GPU count, so this check does: allocatable minus what bound
and assumed pods request. Like the in-tree plugin, a pod that could not fit even on the empty node
is UnschedulableAndUnresolvable (no preemption can help); otherwise it is Unschedulable. On a node
that does not advertise a resource that DRA devices serve there, the DRA participant decides.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import numpy.typing as npt

from scoring.framework import SUCCESS, Code, NodeInfo, PodInfo, Status
from scoring.table import Batch
from scoring.verdicts import BatchVerdicts

__all__ = ["NAME", "ManagedResourcesFit", "insufficient_reason"]

NAME = "ManagedResourcesFit"


def insufficient_reason(resource: str) -> str:
    """The in-tree wording; identical strings let kube-scheduler aggregate them per event."""
    return f"Insufficient {resource}"


class ManagedResourcesFit:
    name = NAME

    def __init__(self, resources: Iterable[str]) -> None:
        self.resources = tuple(dict.fromkeys(resources))
        never = [Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, insufficient_reason(r)) for r in self.resources]
        not_now = [Status(Code.UNSCHEDULABLE, insufficient_reason(r)) for r in self.resources]
        self._reasons = (*never, *not_now)
        # Code by reason index + 1: fits (-1), never fits, does not fit now.
        self._codes = np.array([0] + [2] * len(never) + [1] * len(not_now), dtype=np.int8)

    def filter(self, pod: PodInfo, node: NodeInfo) -> Status:
        return self.fits(pod, node.allocatable, node.requested, node.dra_allocatable)

    def fits(
        self,
        pod: PodInfo,
        allocatable: Mapping[str, int],
        requested: Mapping[str, int],
        dra_allocatable: Mapping[str, int] | None = None,
    ) -> Status:
        """Check against explicit totals (preemption passes the node's usage minus its victims).

        A resource the node does not advertise but DRA devices serve there (DRAExtendedResource) is
        left to the DRA allocator, as NodeResourcesFit leaves it to DynamicResources."""
        unschedulable: Status | None = None
        for resource in self.resources:
            want = pod.resources.requests.get(resource, 0)
            if want <= 0:
                continue
            capacity = allocatable.get(resource, 0)
            if capacity <= 0 and dra_allocatable and dra_allocatable.get(resource, 0) > 0:
                continue
            if want > capacity:
                return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, insufficient_reason(resource))
            if unschedulable is None and requested.get(resource, 0) + want > capacity:
                unschedulable = Status(Code.UNSCHEDULABLE, insufficient_reason(resource))
        return unschedulable or SUCCESS

    def filter_batch(self, pod: PodInfo, batch: Batch) -> BatchVerdicts:
        """Verdicts for every node of ``batch``, with the precedence of ``fits``: the first resource
        that can never fit decides, else the first that does not fit now."""
        wants = tuple(pod.resources.requests.get(resource, 0) for resource in self.resources)
        if all(want <= 0 for want in wants):  # asks for none of them (a CPU pod, GPUs through claims)
            return BatchVerdicts.passing(len(batch))
        # Computed on every row, not kept per row (``scoring.row_memo``): a few comparisons of columns
        # cost less than looking up which rows changed.
        reason_index = self._reason_index(wants, batch)
        # Reasons 0..n-1 are "never fits" per resource, n..2n-1 "does not fit now".
        return BatchVerdicts(self._codes[reason_index + 1], reason_index, list(self._reasons))

    def _reason_index(self, wants: tuple[int, ...], batch: Batch) -> npt.NDArray[np.int64]:
        """Per node, the index in ``_reasons`` of why the pod does not fit, -1 where it fits. Written
        from the lowest precedence up: "does not fit now", then "never fits" over it, each in reverse
        resource order, so the first resource of the higher kind is what remains."""
        reason_index: npt.NDArray[np.int64] = np.full(len(batch), -1, dtype=np.int64)
        count = len(self.resources)
        never: list[tuple[int, npt.NDArray[np.bool_]]] = []
        for index in reversed(range(count)):
            want = wants[index]
            if want <= 0:
                continue
            resource = self.resources[index]
            capacity = batch.allocatable(resource)
            short = batch.requested(resource) > capacity - want
            too_small = capacity < want
            if resource in batch.table.dra_allocatable:  # nodes where DRA serves it are the allocator's
                dra = batch.column(batch.table.dra_allocatable, resource)
                checked = (capacity > 0) | (dra <= 0)
                short &= checked
                too_small &= checked
            reason_index[short] = index + count
            never.append((index, too_small))
        for index, too_small in never:  # still in reverse order
            reason_index[too_small] = index
        return reason_index
