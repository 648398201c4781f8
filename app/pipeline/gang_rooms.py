"""What a gang's planner sees of the cluster: each member's demand and kind, the nodes each kind may
use, and each node's room (free resources, and DRA devices through the allocator).

Built from the cache when a group is planned (the first member's /filter), never per request.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from allocator import AllocationResult
from app.cluster.cache import ClusterCache
from app.cluster.dra_inuse import Planned
from app.pipeline.dynamicresources import DynamicResources, PodClaims
from gang.planner import ResourceRoom, Room, count_by_taking
from gang.spec import Member
from k8s_semantics.placement import PodPlacement, node_matches_placement, tolerates_taints
from scoring.framework import NodeInfo, PodInfo, Status

__all__ = ["DraRoom", "GroupRooms", "NodeLabels", "RoomCache", "demand_of", "kind_of", "node_room"]

PODS = "pods"
MAX_PODS = 1 << 30  # pod slots of a node whose allocatable names none
NOTHING_PLANNED = Planned()


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
        if name == PODS:  # a node that reports no pod slots is not limited by them (as the fit check)
            slots = node.allocatable.get(PODS)
            free[name] = MAX_PODS if slots is None else slots - node.pod_count
        else:
            free[name] = node.allocatable.get(name, 0) - node.requested.get(name, 0)
        if freed:
            free[name] += freed.get(name, 0)
    return ResourceRoom(free)


class NodeLabels(Mapping[str, Mapping[str, str]]):
    """The cache's nodes' labels, by node name, read where the planner asks (no copy per plan)."""

    def __init__(self, nodes: Mapping[str, Any]) -> None:
        self.nodes = nodes

    def __getitem__(self, name: str) -> Mapping[str, str]:
        labels: Mapping[str, str] = self.nodes[name].labels
        return labels

    def __iter__(self) -> Iterator[str]:
        return iter(self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)


class RoomCache:
    """Each node's room for the resources the last group asked, kept while the node's snapshot is the
    same object (the cache builds a new one whenever what counts on the node changes): a plan after
    the last one sizes only the nodes that changed."""

    def __init__(self) -> None:
        self._rooms: dict[str, tuple[NodeInfo, frozenset[str], ResourceRoom]] = {}
        # (node, member kind) -> (what its claims ask, the node's DRA state, free resources, members
        # counted, whether that count is the capacity)
        self._dra: dict[tuple[str, Hashable], tuple[object, object, Mapping[str, int], int, bool]] = {}

    def dra_capacity(self, room: DraRoom, member: Member, limit: int) -> int:
        """``room``'s capacity for ``member``'s kind, counted by allocating once per node state: a
        count below the limit it was asked with is the capacity, one at it a lower bound."""
        assert room.rooms.dra is not None
        claims = room.rooms.claims.get(member.uid)
        if claims is None or claims.allocated or claims.extended is not None:
            return count_by_taking(room, member, limit)  # claims only this member has: nothing to share
        asked = tuple(claim.devices for claim in claims.unallocated)  # compared, not hashed
        state = room.rooms.dra.node_state(room.node)
        key = (room.node, member.kind)
        kept = self._dra.get(key)
        if state is not None and kept is not None and kept[:3] == (asked, state, room.resources.amounts):
            count, exhaustive = kept[3], kept[4]
            if exhaustive or count >= limit:
                return min(count, limit)
        count = count_by_taking(room, member, limit)
        if state is not None:
            self._dra[key] = (asked, state, room.resources.amounts, count, count < limit)
        return count

    def room(self, info: NodeInfo, resources: frozenset[str]) -> ResourceRoom:
        kept = self._rooms.get(info.name)
        if kept is not None and kept[0] is info and kept[1] == resources:
            return kept[2]
        room = node_room(info, resources)
        self._rooms[info.name] = (info, resources, room)
        return room

    def prune(self, nodes: int) -> None:
        """Forget every kept room once far more are kept than the cluster has nodes (deleted nodes)."""
        if len(self._rooms) > 2 * nodes + 1024:
            self._rooms.clear()
        if len(self._dra) > 8 * nodes + 1024:
            self._dra.clear()


@dataclass(frozen=True, slots=True)
class DraRoom:
    """A node's room with its DRA devices: a member fits when its resources do and the allocator
    finds devices for its claims next to those of the members planned here before it."""

    resources: ResourceRoom
    node: str
    rooms: GroupRooms
    planned: Planned = NOTHING_PLANNED

    def capacity(self, member: Member, limit: int) -> int:
        """How many members like ``member`` fit here, at most ``limit``: by allocating, unless this
        node's state and room are those a plan before sized for this kind (``RoomCache``)."""
        if self.planned.whole or self.planned.shares or not self.rooms.kept_rooms:
            return count_by_taking(self, member, limit)
        return self.rooms.kept.dra_capacity(self, member, limit)

    def take(self, member: Member) -> DraRoom | None:
        left = self.resources.take(member)
        if left is None:
            return None
        results = self.rooms.allocate(member.uid, self.node, self.planned)
        if results is None:
            return None
        return DraRoom(left, self.node, self.rooms, self.planned.add(results))

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
        self.kept = RoomCache()  # replaced by the participant's own in ``rooms``
        self.kept_rooms = not self.freed  # a dry run with victims freed sizes its nodes afresh

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

    def allocate(self, uid: str, node: str, planned: Planned) -> tuple[AllocationResult, ...] | None:
        claims = self.claims.get(uid)
        if claims is None or self.dra is None:
            return ()
        return self.dra.plan_on(self.pods[uid], claims, node, planned)

    def rooms(self, nodes: Iterable[str], members: Sequence[Member], kept: RoomCache) -> dict[str, Room]:
        resources = frozenset(name for member in members for name in member.demand)
        kept.prune(len(self.cache.nodes))
        self.kept = kept
        with_claims = any(m.uid in self.claims for m in members)
        out: dict[str, Room] = {}
        for name in nodes:
            info = self.cache.node_info(name)
            if info is None:
                continue
            freed = self.freed.get(name)
            room = node_room(info, resources, freed) if freed else kept.room(info, resources)
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
        planned: dict[str, Planned] = {}
        out = {}
        for uid, node in placements.items():
            claims = self.claims.get(uid)
            if claims is None:
                continue
            results = self.allocate(uid, node, planned.get(node, Planned()))
            if results is None:
                raise LookupError(f"the devices of {self.pods[uid].key} on {node} were taken while planning")
            planned[node] = planned.get(node, Planned()).add(results)
            out[uid] = (claims, results)
        return out
