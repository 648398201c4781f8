"""ManagedResourcesFit: the Filter check for resources the extender manages.

With ``managedResources: [{name: nvidia.com/gpu, ignoredByScheduler: true}]`` kube-scheduler's own
NodeResourcesFit no longer checks the GPU count, so this check does: allocatable minus what bound
and assumed pods request. Like the in-tree plugin, a pod that could not fit even on the empty node
is UnschedulableAndUnresolvable (no preemption can help); otherwise it is Unschedulable.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from scoring.framework import SUCCESS, Code, NodeInfo, PodInfo, Status

__all__ = ["NAME", "ManagedResourcesFit", "insufficient_reason"]

NAME = "ManagedResourcesFit"


def insufficient_reason(resource: str) -> str:
    """The in-tree wording; identical strings let kube-scheduler aggregate them per event."""
    return f"Insufficient {resource}"


class ManagedResourcesFit:
    name = NAME

    def __init__(self, resources: Iterable[str]) -> None:
        self.resources = tuple(dict.fromkeys(resources))

    def filter(self, pod: PodInfo, node: NodeInfo) -> Status:
        return self.fits(pod, node.allocatable, node.requested)

    def fits(self, pod: PodInfo, allocatable: Mapping[str, int], requested: Mapping[str, int]) -> Status:
        """Check against explicit totals (preemption passes the node's usage minus its victims)."""
        unschedulable: Status | None = None
        for resource in self.resources:
            want = pod.resources.requests.get(resource, 0)
            if want <= 0:
                continue
            capacity = allocatable.get(resource, 0)
            if want > capacity:
                return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, insufficient_reason(resource))
            if unschedulable is None and requested.get(resource, 0) + want > capacity:
                unschedulable = Status(Code.UNSCHEDULABLE, insufficient_reason(resource))
        return unschedulable or SUCCESS
