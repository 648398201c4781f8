"""Gangs: the pods of a PodGroup placed all together or not at all, through the extender alone.

When the first member of a group reaches /filter, the whole group is planned as one decision
(``gang.planner``: every member a node, inside one topology domain when asked, GPUs, cpu, memory,
pod slots, DRA devices, node constraints and the queues' quota). If a plan exists, the room of
every member is *held* — counted in the cache as if the member were bound (``ClusterCache.hold``,
DRA devices in flight), so no other pod's filter, and no other group's plan, can take it — and
each member's /filter passes only its planned node. If none exists, every member is rejected with
the reason in numbers and nothing is held. Members that do not exist yet (fewer pods than the
minimum) wait without holding anything.

A member's /bind turns its hold into an ordinary assumption. A plan's holds last ``holdSeconds``
from the plan and from each member bound since (a coscheduling PodGroup's scheduleTimeoutSeconds
instead); they are released when the group's PodGroup changes or is deleted, a member is deleted,
a planned node is no longer offered, or the time runs out. Members already bound fix the domain the
rest are planned into again.

The same answers keep kube-scheduler's own gang cycle (1.36, GangScheduling on) consistent: it
filters every member in turn before binding any, and each is offered exactly its planned node, so
no two members are promised the same GPUs or devices.
"""

from __future__ import annotations

import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from allocator import AllocationResult
from app.cluster.cache import ClusterCache
from app.cluster.podgroups import COSCHEDULING, KUEUE, PODGROUP, group_source
from app.config import GangsConfig
from app.pipeline.dynamicresources import DynamicResources, PodClaims
from app.pipeline.fairness import Fairness
from app.pipeline.framework import BindCycle, FilterCycle, Participant
from app.pipeline.gang_rooms import GroupRooms, NodeLabels, RoomCache, demand_of, kind_of
from app.pipeline.gang_views import gangs_view
from gang.planner import Plan, Rejection, plan_group
from gang.spec import GroupRequest, Member, TopologyRequest
from scoring.framework import SUCCESS, Code, NodeInfo, PodInfo, Status

__all__ = ["GangGroup", "GangPlan", "Gangs"]

_DECISIONS = 100
_LAST_OUTCOMES = 10_000  # groups whose last outcome is kept (their state while they have no plan)
_SOURCES = {PODGROUP: "scheduling.k8s.io/v1alpha2", COSCHEDULING: "scheduling.x-k8s.io/v1alpha1"}


@dataclass(frozen=True, slots=True)
class GangGroup:
    """What the participant knows of a pod's group: its key, how many must run together, how long
    a plan holds, the topology asked for, and why it cannot be planned at all ("" when it can)."""

    key: str
    min_count: int
    hold_seconds: float
    topology: TopologyRequest | None = None
    missing: str = ""

    @property
    def name(self) -> str:
        return self.key.split(":", 1)[1]


@dataclass(slots=True)
class GangPlan:
    """A group's plan in force: each member's node, the domain, and the holds' deadline."""

    group: GangGroup
    placements: dict[str, str]  # member uid -> node
    members: dict[str, str]  # member uid -> namespace/name
    domain: str
    deadline: float  # cache clock
    planned_at: float  # wall clock, for /debug
    pods: dict[str, PodInfo] = field(default_factory=dict)  # members as planned (what a hold counts)
    devices: dict[str, tuple[PodClaims, tuple[AllocationResult, ...]]] = field(default_factory=dict)
    bound: set[str] = field(default_factory=set)


class Gangs(Participant):
    name = "gang"

    def __init__(
        self,
        config: GangsConfig,
        cache: ClusterCache,
        dra: DynamicResources | None = None,
        fairness: Fairness | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.cache = cache
        self.dra = dra
        self.fairness = fairness
        self.wall_clock = wall_clock
        self.plans: dict[str, GangPlan] = {}
        self.rooms = RoomCache()  # nodes' free room, kept while their snapshots are unchanged
        self.decisions: deque[dict[str, Any]] = deque(maxlen=_DECISIONS)
        self.last: OrderedDict[str, tuple[str, str]] = OrderedDict()  # group -> (last outcome, its reason)
        self.outcomes: Counter[str] = Counter()
        cache.groups.listeners.append(self._group_changed)

    # ------------------------------------------------------------------ which group
    # Every pod: a preemptor of any kind must not evict half of a gang (check_victims).

    def group_of(self, pod: PodInfo) -> GangGroup | None:
        """The pod's gang, or None when it has none or its group asks for no all-or-nothing placement."""
        key = pod.pod_group
        source = group_source(key)
        if source not in (PODGROUP, COSCHEDULING, KUEUE):
            return None
        topology = None
        if pod.topology_required:
            topology = TopologyRequest(pod.topology_required, True)
        elif pod.topology_preferred:
            topology = TopologyRequest(pod.topology_preferred, False)
        hold = self.config.holdSeconds
        if source == KUEUE:
            size = max([pod.group_size, *(self._pod(uid).group_size for uid in self._member_uids(key))])
            return GangGroup(key, size, hold, topology) if size > 1 else None
        policy = self.cache.groups.policies.get(key)
        if policy is None:
            what = f"PodGroup {key.split(':', 1)[1]} ({_SOURCES[source]})"
            return GangGroup(key, 0, hold, topology, f"{what} does not exist (yet)")
        if policy.min_count <= 0:
            return None  # a basic group: each pod on its own
        if policy.topology_key:
            topology = TopologyRequest(policy.topology_key, True)
        return GangGroup(key, policy.min_count, policy.timeout_seconds or hold, topology)

    def _member_uids(self, key: str) -> frozenset[str]:
        return self.cache.groups.members_of(key)

    def _pod(self, uid: str) -> PodInfo:
        return self.cache.pods[uid]

    # ------------------------------------------------------------------ filter
    def filter(self, cycle: FilterCycle) -> None:
        pod = cycle.pod
        group = self.group_of(pod)
        if group is None:
            return
        if group.missing:
            self._reject(cycle, group, f"gang {group.name}: {group.missing}", Code.UNSCHEDULABLE_AND_UNRESOLVABLE)
            return
        plan = self.current(group.key)
        if plan is not None:
            node = plan.placements.get(pod.uid)
            if node is None:
                self._extra_member(cycle, plan)
                return
            if node in cycle.names:
                self._only(cycle, plan, node)
                return
            self.release(plan, f"node {node} planned for {pod.key} is no longer offered by kube-scheduler")
        decided = self._plan(group, pod, cycle, released=set(plan.placements.values()) if plan else set())
        if isinstance(decided, GangPlan):
            self._only(cycle, decided, decided.placements[pod.uid])
        elif isinstance(decided, Rejection):
            self._reject(cycle, group, decided.reason, decided_code(decided))

    def _only(self, cycle: FilterCycle, plan: GangPlan, node: str) -> None:
        """Only the planned node passes (its own hold there is no reason to fail it)."""
        position = cycle.names.index(node)
        others = (np.arange(len(cycle.names)) != position).nonzero()[0]
        reason = f"gang {plan.group.name}: member planned on node {node}"
        cycle.verdicts.set_many(others, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, reason))
        cycle.verdicts.set(position, SUCCESS)

    def _extra_member(self, cycle: FilterCycle, plan: GangPlan) -> None:
        """A member beyond the plan (the group was planned before it existed): placed like any pod,
        inside the plan's domain when the group requires one."""
        topology = plan.group.topology
        if topology is None or not topology.required or not plan.placements:
            return
        key, value = topology.key, self._label(next(iter(plan.placements.values())), topology.key)
        outside = [p for p, name in enumerate(cycle.names) if self._label(name, key) != value]  # few: one group
        reason = f"gang {plan.group.name}: outside the group's {key}={value}"
        cycle.verdicts.set_many(outside, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, reason))

    def _label(self, node: str, key: str) -> str | None:
        obj = self.cache.nodes.get(node)
        return obj.labels.get(key) if obj is not None else None

    def _reject(self, cycle: FilterCycle, group: GangGroup, reason: str, code: Code) -> None:
        cycle.verdicts.set_many(cycle.passing(), Status(code, reason))
        outcome = "waiting" if code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE else "unschedulable"
        if outcome == "unschedulable" and self.last.get(group.key, ("",))[0] == "waiting":
            # Every member exists now, but the group does not fit. The members rejected while it waited
            # still say so, in kube-scheduler's unschedulable pool: the requeuer asks it to retry them.
            self.cache.freed.notify()
        self._decide(group, outcome, reason)

    # ------------------------------------------------------------------ planning
    def _members(self, group: GangGroup, pod: PodInfo) -> tuple[list[PodInfo], dict[str, str]]:
        """The group's members still to place (the filtered pod first, then by name) and those bound
        or being bound (uid -> node)."""
        pending: list[PodInfo] = [pod]
        placed: dict[str, str] = {}
        for uid in sorted(self._member_uids(group.key), key=lambda u: self._pod(u).name):
            member = self._pod(uid)
            if uid == pod.uid or member.terminal or member.terminating:
                continue
            if member.node_name:
                placed[uid] = member.node_name
                continue
            assumption = self.cache.ledger.get(uid)
            if assumption is not None and not assumption.held_for:
                placed[uid] = assumption.node  # its /bind is under way
            else:
                pending.append(member)
        return pending, placed

    def _plan(
        self,
        group: GangGroup,
        pod: PodInfo,
        cycle: FilterCycle | None,
        freed: Mapping[str, Mapping[str, int]] | None = None,
        released: set[str] | None = None,
    ) -> GangPlan | Plan | Rejection | None:
        """Plan the group and hold its room (``cycle`` None: a dry run for explain or preempt, nothing
        held; ``freed``: what victims would give back, per node; ``released``: the nodes of this
        group's plan released in this same filter, which the resource fit judged still held)."""
        pending, placed = self._members(group, pod)
        needed = group.min_count - len(placed)
        if needed <= 0:
            return None  # the group already runs: this pod is placed like any other
        if len(pending) < needed:
            return Rejection(
                f"gang {group.name}: {len(pending) + len(placed)} of {group.min_count} members exist; "
                "waiting for the rest"
            )
        rooms = GroupRooms(self.cache, self.dra, pending, freed or {})
        for member in pending:
            claims = rooms.claims_of(member)
            if isinstance(claims, Status):
                return Rejection(f"gang {group.name}: member {member.key}: {claims.reason}")
        members = tuple(Member(m.uid, m.key, demand_of(m), kind_of(m)) for m in pending)
        eligible = self._eligible(rooms, pending, members, pod, cycle, released or set())
        nodes = frozenset().union(*eligible.values()) if eligible else frozenset()
        if cycle is not None:  # a reason counts the room of every node kube-scheduler offered
            nodes |= frozenset(cycle.names)
        labels = NodeLabels(self.cache.nodes)  # read only at the levels tried; bound members' nodes too
        room_of = rooms.rooms(nodes, members, self.rooms)
        levels = self.config.topologyLevels
        admit = self._admit(pending) if self.fairness is not None else None
        result: Plan | Rejection = Rejection("")
        for count in dict.fromkeys((len(pending), needed)):  # every pending member, else the minimum (fewer)
            request = GroupRequest(group.name, group.min_count, members, count, placed, group.topology)
            result = plan_group(request, room_of, labels, lambda m: eligible[m.kind], levels, admit)
            if isinstance(result, Plan):
                break
        if isinstance(result, Rejection) or cycle is None:
            return result
        return self._hold(group, result, rooms, {m.uid: m.key for m in pending})

    def _eligible(
        self,
        rooms: GroupRooms,
        pending: Sequence[PodInfo],
        members: Sequence[Member],
        pod: PodInfo,
        cycle: FilterCycle | None,
        released: set[str],
    ) -> dict[Any, frozenset[str]]:
        """Per member kind, the nodes it may use: for the filtered pod's kind, the candidates that
        passed kube-scheduler and the other participants (and those only this group's own released
        holds failed); for other kinds, their spec's constraints."""
        out: dict[Any, frozenset[str]] = {}
        own = kind_of(pod)
        for member, info in zip(members, pending, strict=True):
            if member.kind in out:
                continue
            if member.kind == own and cycle is not None:
                offered = released.intersection(cycle.names)
                out[member.kind] = frozenset(cycle.names[p] for p in cycle.passing()) | offered
            else:
                out[member.kind] = rooms.eligible(info)
        return out

    def _admit(self, pending: Sequence[PodInfo]) -> Callable[[Mapping[str, str]], str]:
        pods = {pod.uid: pod for pod in pending}

        def admit(placements: Mapping[str, str]) -> str:
            assert self.fairness is not None
            return self.fairness.group_admits([(pods[uid], node) for uid, node in placements.items()])

        return admit

    def _hold(self, group: GangGroup, plan: Plan, rooms: GroupRooms, keys: Mapping[str, str]) -> GangPlan | Rejection:
        try:
            devices = rooms.holdings(plan.placements)
        except LookupError as exc:
            return Rejection(f"gang {group.name}: {exc}")
        deadline = self.cache.clock() + group.hold_seconds
        current = GangPlan(
            group, dict(plan.placements), {u: keys[u] for u in plan.placements}, plan.domain.describe(),
            deadline, self.wall_clock(), {u: rooms.pods[u] for u in plan.placements}, devices,
        )  # fmt: skip
        self.plans[group.key] = current
        self._hold_members(current)
        # Members rejected while the group waited sit in kube-scheduler's unschedulable pool, which no
        # cluster event of theirs empties: the requeuer asks kube-scheduler to retry them now.
        self.cache.freed.notify()
        self._decide(group, "planned", f"gang {group.name}: {len(plan.placements)} member(s) in {current.domain}")
        return current

    def _hold_members(self, plan: GangPlan) -> None:
        for uid, node in plan.placements.items():
            if uid in plan.bound:
                continue
            pod = plan.pods[uid]
            self.cache.hold(pod, node, plan.deadline, plan.group.key)
            held = plan.devices.get(uid)
            if held is not None and self.dra is not None:
                self.dra.hold(pod, held[0], node, held[1], plan.deadline)

    # ------------------------------------------------------------------ plans in force
    def current(self, key: str) -> GangPlan | None:
        """The group's plan while every member not yet bound still holds its room; a plan that lost a
        hold (it expired, or a bind failed and gave it back) is released."""
        plan = self.plans.get(key)
        if plan is None:
            return None
        for uid, node in plan.placements.items():
            if uid in plan.bound:
                continue
            pod = self.cache.pods.get(uid)
            if pod is not None and pod.node_name == node:
                continue
            assumption = self.cache.ledger.get(uid)
            if assumption is None or assumption.node != node:
                self.release(plan, "its hold ran out" if self.cache.clock() >= plan.deadline else "a hold was lost")
                return None
        return plan

    def release(self, plan: GangPlan, why: str) -> None:
        """Give back every hold of the plan (members already bound stay where they are)."""
        self.plans.pop(plan.group.key, None)
        for uid in plan.placements:
            assumption = self.cache.ledger.get(uid)
            if assumption is not None and assumption.held_for == plan.group.key:
                self.cache.forget(uid)
                if self.dra is not None and uid in plan.devices:
                    self.dra.state.end(uid)
        self._decide(plan.group, "released", f"gang {plan.group.name}: holds released: {why}")

    def _group_changed(self, key: str) -> None:
        plan = self.plans.get(key)
        if plan is not None:
            self.release(plan, "the group changed (its PodGroup, or a member deleted)")

    # ------------------------------------------------------------------ preempt
    def check_victims(self, pod: PodInfo, node: NodeInfo, victims: Sequence[str]) -> str:
        """Never half a gang as victims; and a gang member preempts only if, with these victims gone,
        its whole group fits."""
        broken = self._splits_a_gang(victims)
        if broken:
            return broken
        group = self.group_of(pod)
        if group is None or self.current(group.key) is not None:
            return ""
        if group.missing:
            return f"gang {group.name}: {group.missing}"
        freed: dict[str, int] = {}
        for uid in victims:
            counted = self.cache.counted(uid)
            if counted is not None and counted[0] == node.name:
                for resource, amount in counted[1].resources.requests.items():
                    freed[resource] = freed.get(resource, 0) + amount
        freed["pods"] = freed.get("pods", 0) + len(victims)
        dry = self._plan(group, pod, None, {node.name: freed})
        if isinstance(dry, Rejection):
            return f"evicting them would not let the whole gang run: {dry.reason}"
        return ""

    def _splits_a_gang(self, victims: Sequence[str]) -> str:
        """Why evicting ``victims`` would leave a running gang below its minimum ("" when it would not)."""
        chosen = set(victims)
        for uid in victims:
            pod = self.cache.pods.get(uid)
            group = self.group_of(pod) if pod is not None else None
            if pod is None or group is None:
                continue
            running = {u for u in self._member_uids(group.key) if self.cache.counted(u) is not None}
            left = running - chosen
            if left and len(left) < group.min_count:
                return (
                    f"victim {pod.key} belongs to gang {group.name}: evicting {len(running & chosen)} of its "
                    f"{len(running)} running members would leave fewer than {group.min_count}"
                )
        return ""

    # ------------------------------------------------------------------ bind
    def post_bind(self, cycle: BindCycle) -> None:
        """A member bound: the plan made progress, so the rest keep their holds longer."""
        plan = self.plans.get(cycle.pod.pod_group)
        if plan is None or cycle.pod.uid not in plan.placements:
            return
        plan.bound.add(cycle.pod.uid)
        if plan.bound >= set(plan.placements):
            del self.plans[plan.group.key]
            self._decide(plan.group, "complete", f"gang {plan.group.name}: every planned member bound")
            return
        plan.deadline = self.cache.clock() + plan.group.hold_seconds
        self._hold_members(plan)

    # ------------------------------------------------------------------ operator surface
    def explain(self, pod: PodInfo, names: Sequence[str]) -> Mapping[str, Any]:
        group = self.group_of(pod)
        if group is None:
            return {}
        detail: dict[str, Any] = {"group": group.key, "minCount": group.min_count}
        if group.topology is not None:
            detail["topology"] = group.topology.describe()
        plan = self.current(group.key)
        if group.missing:
            detail["reason"] = group.missing
        elif plan is not None:
            detail.update(self._plan_view(plan))
        else:
            dry = self._plan(group, pod, None)
            if isinstance(dry, Rejection):
                detail["reason"] = dry.reason
            elif isinstance(dry, Plan):
                detail.update(planned=False, domain=dry.domain.describe(), placements=dict(dry.placements))
        planned = detail.get("placements", {}).get(pod.uid)
        return {name: {**detail, "node": name == planned} for name in names}

    def _plan_view(self, plan: GangPlan) -> dict[str, Any]:
        return {
            "planned": True,
            "domain": plan.domain,
            "placements": dict(plan.placements),
            "holdExpiresInSeconds": round(plan.deadline - self.cache.clock(), 3),
        }

    def view(self) -> dict[str, Any]:
        """/debug's ``gangs`` (``app.pipeline.gang_views``)."""
        return gangs_view(self)

    def policy_group(self, key: str) -> GangGroup | None:
        """A PodGroup that has no pods in the cache yet."""
        policy = self.cache.groups.policies.get(key)
        if policy is None or policy.min_count <= 0:
            return None
        topology = TopologyRequest(policy.topology_key, True) if policy.topology_key else None
        return GangGroup(key, policy.min_count, policy.timeout_seconds or self.config.holdSeconds, topology)

    def metrics(self) -> dict[str, dict[str, float]]:
        held = sum(
            1
            for plan in self.plans.values()
            for uid in plan.placements
            if (a := self.cache.ledger.get(uid)) is not None and a.held_for == plan.group.key
        )
        return {
            "gang_plans": {"": float(len(self.plans))},
            "gang_held_pods": {"": float(held)},
            "gang_decisions": {outcome: float(count) for outcome, count in self.outcomes.items()},
        }

    def _decide(self, group: GangGroup, outcome: str, reason: str) -> None:
        """Keep a decision for /debug (a group rejected again for the same reason is kept once) and
        the group's last outcome (its state while it has no plan)."""
        self.outcomes[outcome] += 1
        self.last[group.key] = (outcome, reason)
        self.last.move_to_end(group.key)
        while len(self.last) > _LAST_OUTCOMES:
            self.last.popitem(last=False)
        last = self.decisions[-1] if self.decisions else None
        if last is not None and (last["group"], last["outcome"], last["reason"]) == (group.key, outcome, reason):
            last["time"], last["count"] = self.wall_clock(), last["count"] + 1
            return
        self.decisions.append(
            {"time": self.wall_clock(), "group": group.key, "outcome": outcome, "reason": reason, "count": 1}
        )


def decided_code(rejection: Rejection) -> Code:
    """Waiting for members or a PodGroup cannot be helped by preemption; too little room may be."""
    waiting = "members exist" in rejection.reason or "does not exist" in rejection.reason
    return Code.UNSCHEDULABLE_AND_UNRESOLVABLE if waiting else Code.UNSCHEDULABLE
