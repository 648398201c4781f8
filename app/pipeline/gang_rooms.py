"""What a gang's planner sees of the cluster: each member's demand and kind, the nodes each kind may
use, and each node's room (free resources, and DRA devices through the allocator).

Built from the cache when a group is planned (the first member's /filter), never per request.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from allocator import AllocationResult, DeviceID, allocated_device_ids
from app.cluster.cache import ClusterCache
from app.pipeline.dynamicresources import DynamicResources, PodClaims
from gang.planner import ResourceRoom, Room
from gang.spec import Member
from k8s_semantics.placement import PodPlacement, node_matches_placement, tolerates_taints
from scoring.framework import NodeInfo, PodInfo, Status

__all__ = ["DraRoom", "GroupRooms", "demand_of", "kind_of", "node_room"]

PODS = "pods"


def demand_of(pod: PodInfo) -> dict[str, int]:
    """What a member takes of a node's resources, in the node table's units (one pod slot too)."""
    demand = {name: amount for name, amount in pod.resources.requests.items() if amount > 0}
    demand[PODS] = 1
    return demand


def kind_of(pod: PodInfo) -> Hashable:
    """Members of one kind are interchangeable for the planner: same requests, same node
    constraints, claims from the same templates (by the pod's claim names)."""
    placement = pod.placement or PodPlacement()
    return (
        tuple(sorted(demand_of(pod).items())),
        tuple(sorted(placement.node_selector.items())),
        placement.affinity_terms,
        placement.tolerations,
        tuple(ref.name for ref in pod.claims),
        tuple((r.container, r.resource, r.amount) for r in pod.extended_requests),
    )


def node_room(node: NodeInfo, resources: Iterable[str], freed: Mapping[str, int] | None = None) -> ResourceRoom:
    """A node's free amount of ``resources``: allocatable minus what bound, assumed and held pods
    request (pod slots: allocatable pods minus the pods counted there), plus what ``freed`` gives back."""
    free = {}
    for name in resources:
        if name == PODS:
            free[name] = node.allocatable.get(PODS, 0) - node.pod_count
        else:
            free[name] = node.allocatable.get(name, 0) - node.requested.get(name, 0)
        if freed:
            free[name] += freed.get(name, 0)
    return ResourceRoom(free)


@dataclass(frozen=True, slots=True)
class DraRoom:
    """A node's room with its DRA devices: a member fits when its resources do and the allocator
    finds devices for its claims next to those of the members planned here before it."""

    resources: ResourceRoom
    node: str
    rooms: GroupRooms
    taken: frozenset[DeviceID] = frozenset()

    def take(self, member: Member) -> DraRoom | None:
        left = self.resources.take(member)
        if left is None:
            return None
        results = self.rooms.allocate(member.uid, self.node, self.taken)
        if results is None:
            return None
        devices = frozenset(d for result in results for d in allocated_device_ids(result))
        return DraRoom(left, self.node, self.rooms, self.taken | devices)

    def free(self, resource: str) -> int:
        return self.resources.free(resource)


class GroupRooms:
    """The planner's view of the cluster for one group: members' pods and claims by UID."""

    def __init__(
        self,
        cache: ClusterCache,
        dra: DynamicResources | None,
        pods: Sequence[PodInfo],
        freed: Mapping[str, Mapping[str, int]] | None = None,
    ) -> None:
        self.cache = cache
        self.dra = dra
        self.pods = {pod.uid: pod for pod in pods}
        self.freed = freed or {}  # per node, what preemption's victims would give back
        self.claims: dict[str, PodClaims] = {}

    def claims_of(self, pod: PodInfo) -> PodClaims | Status | None:
        """The member's claims (None: it has none, or DRA is off), or why it cannot run anywhere yet."""
        if self.dra is None or (not pod.claims and not pod.extended_requests):
            return None
        claims = self.dra.prefilter(pod)
        if isinstance(claims, PodClaims):
            if not claims.unallocated and not claims.allocated and claims.extended is None:
                return None
            self.claims[pod.uid] = claims
        return claims

    def allocate(self, uid: str, node: str, taken: frozenset[DeviceID]) -> tuple[AllocationResult, ...] | None:
        claims = self.claims.get(uid)
        if claims is None or self.dra is None:
            return ()
        return self.dra.plan_on(self.pods[uid], claims, node, taken)

    def rooms(self, nodes: Iterable[str], members: Sequence[Member]) -> dict[str, Room]:
        resources = {name for member in members for name in member.demand}
        with_claims = any(m.uid in self.claims for m in members)
        out: dict[str, Room] = {}
        for name in nodes:
            info = self.cache.node_info(name)
            if info is None:
                continue
            room = node_room(info, resources, self.freed.get(name))
            out[name] = DraRoom(room, name, self) if with_claims else room
        return out

    def eligible(self, pod: PodInfo) -> frozenset[str]:
        """The nodes a member's spec allows: schedulable, its nodeSelector and required affinity
        match, its tolerations cover the NoSchedule and NoExecute taints."""
        placement = pod.placement or PodPlacement()
        allowed = []
        for name, node in self.cache.nodes.items():
            if node.unschedulable or not node_matches_placement(node.labels, placement):
                continue
            if node.taints and not tolerates_taints(placement.tolerations, node.taints):
                continue
            allowed.append(name)
        return frozenset(allowed)

    def holdings(self, placements: Mapping[str, str]) -> dict[str, tuple[PodClaims, tuple[AllocationResult, ...]]]:
        """Each planned member's devices, allocated node by node in plan order: what its hold keeps.
        Raises LookupError when a member's claims no longer fit (the cache moved while planning)."""
        taken: dict[str, frozenset[DeviceID]] = {}
        out = {}
        for uid, node in placements.items():
            claims = self.claims.get(uid)
            if claims is None:
                continue
            results = self.allocate(uid, node, taken.get(node, frozenset()))
            if results is None:
                raise LookupError(f"the devices of {self.pods[uid].key} on {node} were taken while planning")
            taken[node] = taken.get(node, frozenset()) | {d for r in results for d in allocated_device_ids(r)}
            out[uid] = (claims, results)
        return out
