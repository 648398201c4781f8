"""What a group asks for: its members, how many of them must run together, and where.

Three sources describe groups (Kubernetes 1.36 PodGroups, the scheduler-plugins coscheduling
PodGroup, Kueue's topology annotations); the adapter reads them into these types.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field

__all__ = ["GroupRequest", "Member", "TopologyRequest"]


@dataclass(frozen=True, slots=True)
class TopologyRequest:
    """All members in one domain of ``key`` (a node label whose value names the domain: a rack, a
    block, ``kubernetes.io/hostname`` for one node). ``required``: the group waits rather than
    span domains; preferred: the tightest level that fits, then wider levels, then anywhere."""

    key: str
    required: bool

    def describe(self) -> str:
        return f"{'required' if self.required else 'preferred'} {self.key}"


@dataclass(frozen=True, slots=True)
class Member:
    """One pod of the group still to place. Members of the same ``kind`` are interchangeable: same
    requests, same nodes they may use (the planner sizes nodes once per kind)."""

    uid: str
    name: str
    demand: Mapping[str, int]  # resource -> amount in the node table's units (cpu milli, memory bytes, devices)
    kind: Hashable = None


@dataclass(frozen=True, slots=True)
class GroupRequest:
    """A group to place: ``needed`` of ``members`` must be placed for the group to run (its
    minimum count less the members already placed). ``placed``: members bound or holding a node
    (uid -> node); with a topology request they fix the domain."""

    key: str  # namespace/name, for messages
    min_count: int
    members: tuple[Member, ...]
    needed: int
    placed: Mapping[str, str] = field(default_factory=dict)
    topology: TopologyRequest | None = None

    @property
    def main_resource(self) -> str:
        """The resource reasons count in: the first device resource a member asks for, else cpu."""
        for member in self.members:
            for name, amount in member.demand.items():
                if amount > 0 and "/" in name:
                    return name
        return "cpu"

    def per_member(self, resource: str) -> int:
        """The largest amount of ``resource`` one member asks for."""
        return max((m.demand.get(resource, 0) for m in self.members), default=0)
