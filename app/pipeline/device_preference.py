"""The profile's device choice (``deviceChoice``) handed to the DRA allocator.

The GPU-sharing score plugins score a node after placing the pod on its devices with the profile's
``Placer`` (``scoring.devices``). For the allocation at /bind to be the one scored, the allocator
takes those devices first among devices of equal rank (``allocator.pools``: never across pool or
slice priorities, and only where the claim's constraints, capacities and counters allow). This
works out the devices: the node's per-device view as the scoring saw it (the pod itself left out
where it is assumed there already), the pod's demand from its claims, and the placer's choice,
mapped to the devices the view was counted from. A choice that is first fit needs no preference.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from allocator import DeviceID
from app.cluster.dra import DraState
from app.pipeline.claim_devices import ClaimDevices
from scoring.devices import FIRST_FIT, Placer, cpu_free, pod_devices
from scoring.framework import NodeInfo, PodInfo
from scoring.resources import CPU

__all__ = ["DevicePreference"]


class Nodes(Protocol):
    def node_info(self, name: str) -> NodeInfo | None: ...

    def counted(self, uid: str) -> tuple[str, PodInfo] | None: ...


class DevicePreference:
    """``(pod, node) -> devices`` for ``DynamicResources(prefer=...)``."""

    def __init__(self, placer: Placer, nodes: Nodes, state: DraState) -> None:
        self.placer = placer
        self.nodes = nodes
        self.state = state
        self.claim_devices = ClaimDevices(state)

    @classmethod
    def of(cls, placer: Placer, nodes: Nodes, state: DraState) -> DevicePreference | None:
        """None for first fit: the allocator's own order is the choice."""
        return None if placer is FIRST_FIT or placer.resource is None else cls(placer, nodes, state)

    def __call__(self, pod: PodInfo, node: str) -> tuple[DeviceID, ...]:
        resource = self.placer.resource
        info = self.nodes.node_info(node)
        if resource is None or info is None or info.dra_allocatable.get(resource, 0) <= 0:
            return ()
        demand = pod_devices(self.claim_devices.with_claim_devices(pod), resource)
        if demand.count == 0:
            return ()
        left = cpu_free(info)
        counted = self.nodes.counted(pod.uid)
        if counted is not None and counted[0] == node:  # assumed here already: the node as scored
            left += _cpu(counted[1].resources.requests)
        free = info.devices_free(resource)
        chosen = self.placer.chosen(free, left, demand)
        if not chosen or chosen == FIRST_FIT.chosen(free, left, demand):
            return ()
        ids = self.state.extended.device_ids(node, resource)
        return tuple(ids[index] for index in chosen if index < len(ids))


def _cpu(requests: Mapping[str, int]) -> int:
    return max(requests.get(CPU, 0), 0)
