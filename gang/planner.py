"""The all-or-nothing placement of a group: every member a node, within one topology domain, or a
reason in numbers why not.

The rule, level by level (``topology.search_levels``): at each level, the domains where every
member fits; of those, the one with the least free capacity of the group's main resource (best fit:
large domains stay whole for large groups); inside it, members packed onto as few nodes as possible.
Members are placed kind by kind, the largest first; for one kind, if a node can take every member
left, the one that can take the fewest such (best fit), otherwise the node that takes the most,
then again. For a group whose members are all of one kind this finds a placement whenever one
exists (a domain fits exactly when its nodes' capacities add up to the members); mixed kinds are
placed greedily in that order.

Nodes are ``Room`` values: what a node has left, and what is left once a member takes its share.
``ResourceRoom`` counts resources; the adapter wraps it with DRA devices, whose fit the allocator
decides.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from gang.spec import GroupRequest, Member
from gang.topology import ANYWHERE, Domain, domains, search_levels

__all__ = [
    "Admit",
    "Plan",
    "Rejection",
    "ResourceRoom",
    "Room",
    "amount_text",
    "capacity",
    "count_by_taking",
    "plan_group",
]

# Why no placement is allowed by the queues ("" when it is): a hook for quota, given member -> node.
Admit = Callable[[Mapping[str, str]], str]


class Room(Protocol):
    def take(self, member: Member) -> Room | None:
        """The room left after ``member`` takes its share here; None when it does not fit."""
        ...

    def free(self, resource: str) -> int:
        """What is left of ``resource`` (for best fit and for reasons)."""
        ...


@dataclass(frozen=True, slots=True)
class ResourceRoom:
    """A node's free amount of each resource (allocatable minus requested, in the table's units)."""

    amounts: Mapping[str, int]

    def take(self, member: Member) -> ResourceRoom | None:
        left = dict(self.amounts)
        for name, amount in member.demand.items():
            if amount <= 0:
                continue
            if left.get(name, 0) < amount:
                return None
            left[name] -= amount
        return ResourceRoom(left)

    def free(self, resource: str) -> int:
        return self.amounts.get(resource, 0)

    def capacity(self, member: Member, limit: int) -> int:
        """How many members like ``member`` fit, at most ``limit`` (arithmetic, no copies)."""
        count = limit
        for name, amount in member.demand.items():
            if amount > 0:
                count = min(count, max(self.amounts.get(name, 0), 0) // amount)
        return count


def capacity(room: Room, member: Member, limit: int) -> int:
    """How many members like ``member`` fit in ``room``, at most ``limit``."""
    arithmetic = getattr(room, "capacity", None)
    if arithmetic is not None:
        return int(arithmetic(member, limit))
    return count_by_taking(room, member, limit)


def count_by_taking(room: Room, member: Member, limit: int) -> int:
    """How many members like ``member`` fit in ``room``, at most ``limit``, by taking one after another."""
    count, current = 0, room
    while count < limit:
        taken = current.take(member)
        if taken is None:
            break
        count, current = count + 1, taken
    return count


@dataclass(frozen=True, slots=True)
class Plan:
    """Every member's node (uid -> node) and the domain the group was placed in."""

    placements: Mapping[str, str]
    domain: Domain


@dataclass(frozen=True, slots=True)
class Rejection:
    reason: str


def amount_text(resource: str, amount: int) -> str:
    """An amount in the table's units as an operator reads it: cpu in cores, memory in GiB."""
    if resource == "cpu":
        return f"{amount / 1000:g} cpu"
    if resource == "memory":
        return f"{amount / 2**30:.4g}Gi memory"
    return f"{amount} {resource}"


def _kinds(members: Sequence[Member], main: str) -> list[list[Member]]:
    """Members by kind, the kind asking most of the main resource first (then most in all)."""
    grouped: dict[Hashable, list[Member]] = {}
    for member in members:
        grouped.setdefault(member.kind if member.kind is not None else tuple(sorted(member.demand.items())), []).append(
            member
        )
    return sorted(
        grouped.values(),
        key=lambda ms: (-ms[0].demand.get(main, 0), -sum(ms[0].demand.values()), ms[0].name),
    )


def _fill(
    domain: Domain,
    kinds: Sequence[Sequence[Member]],
    rooms: Mapping[str, Room],
    eligible: Callable[[Member], frozenset[str] | None],
    main: str,
) -> dict[str, str] | None:
    """Every member a node of ``domain`` (uid -> node), packed; None when they do not all fit."""
    trial: dict[str, Room] = {}
    placement: dict[str, str] = {}
    for members in kinds:
        allowed = eligible(members[0])
        left = len(members)
        # (capacity for this kind, free main resource, name) of every node that takes one: a node's
        # capacity does not change until it is used, and each node is used once per kind, so one
        # sort serves the whole kind (capacities are capped at the members to place).
        nodes = []
        for name in domain.nodes:
            if allowed is not None and name not in allowed:
                continue
            room = trial.get(name, rooms[name])
            count = capacity(room, members[0], left)
            if count > 0:
                nodes.append((count, room.free(main), name))
        if sum(count for count, _, _ in nodes) < left:
            return None
        nodes.sort(key=lambda entry: (-entry[0], entry[1], entry[2]))
        index = start = 0
        while left > 0:
            count, _, node = nodes[start]
            if count >= left:  # the tightest node that takes the rest: among those that can, least free
                end = start
                while end < len(nodes) and nodes[end][0] >= left:
                    end += 1
                _, _, node = min(nodes[start:end], key=lambda entry: (entry[1], entry[2]))
                taking = left
            else:  # the node that takes the most
                start += 1
                taking = count
            room = trial.get(node, rooms[node])
            for _ in range(taking):
                taken = room.take(members[index])
                if taken is None:  # a room whose capacity over-promised: never for ResourceRoom
                    return None
                room = taken
                placement[members[index].uid] = node
                index += 1
            trial[node] = room
            left -= taking
    return placement


def plan_group(
    group: GroupRequest,
    rooms: Mapping[str, Room],
    labels: Mapping[str, Mapping[str, str]],
    eligible: Callable[[Member], frozenset[str] | None] = lambda member: None,
    levels: Sequence[str] = (),
    admit: Admit | None = None,
) -> Plan | Rejection:
    """Place the group's first ``needed`` members (all of them or none).

    ``rooms``: the nodes the group was offered and what each has left (a reason counts their free
    room). ``eligible``: the nodes of those a member may use (None: every one). ``levels``: the
    cluster's topology levels, widest first. ``admit``: the queues' verdict on a whole placement,
    tried on each fitting domain in turn.
    """
    members = group.members[: group.needed]
    if group.needed <= 0:
        return Plan({}, Domain(ANYWHERE, "", ()))
    if len(members) < group.needed:
        return Rejection(
            f"gang {group.key}: {len(members) + len(group.placed)} of {group.min_count} members exist; "
            "waiting for the rest"
        )
    main = group.main_resource
    kinds = _kinds(members, main)
    shape = _shape(group, members, main)
    refused = ""
    reasons: list[str] = []
    for level in search_levels(group.topology, levels):
        candidates = domains(level, rooms, labels)
        if level != ANYWHERE and group.placed:
            values = {labels.get(node, {}).get(level) for node in group.placed.values()}
            if len(values) != 1 or None in values:
                reasons.append(f"members already placed span more than one {level}")
                continue
            candidates = [d for d in candidates if d.value in values]
        if level != ANYWHERE and not candidates:
            reasons.append(f"no node that the group may use has the label {level}")
            continue
        fitting = []
        for domain in candidates:
            placement = _fill(domain, kinds, rooms, eligible, main)
            if placement is not None:
                free = sum(rooms[n].free(main) for n in domain.nodes)
                fitting.append((free, domain.value, domain, placement))
        fitting.sort(key=lambda entry: (entry[0], entry[1]))
        for _, _, domain, placement in fitting:
            verdict = admit(placement) if admit is not None else ""
            if not verdict:
                return Plan(placement, domain)
            refused = refused or verdict
        if not fitting:
            reasons.append(_freest(candidates, rooms, main, level))
    if refused:
        return Rejection(f"gang {group.key}: {shape}: {refused}")
    return Rejection(f"gang {group.key}: {shape}; {'; '.join(reasons)}")


def _shape(group: GroupRequest, members: Sequence[Member], main: str) -> str:
    """What the group asks, e.g. "6 x 8 nvidia.com/gpu in one example.com/rack"."""
    per = group.per_member(main)
    counts = {m.demand.get(main, 0) for m in members}
    asked = (
        f"{len(members)} x {amount_text(main, per)}"
        if len(counts) == 1
        else f"{len(members)} members, {amount_text(main, sum(m.demand.get(main, 0) for m in members))} in all"
    )
    if group.topology is not None:
        asked += f" in one {group.topology.key}" + ("" if group.topology.required else " (preferred)")
    return asked


def _freest(candidates: Sequence[Domain], rooms: Mapping[str, Room], main: str, level: str) -> str:
    """The freest domain of a level, in the main resource, over the nodes of ``rooms`` (those the
    group was offered)."""
    best = max((sum(rooms[n].free(main) for n in domain.nodes) for domain in candidates), default=0)
    if level == ANYWHERE:
        return f"{amount_text(main, best)} free on the nodes the members may use"
    return f"the freest {level} has {amount_text(main, best)} free"
