"""The group planner: all or nothing, never over a node's room, never across a required domain, and for
groups of one kind of member exactly as good as trying every assignment."""

from __future__ import annotations

import itertools
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gang.planner import Plan, Rejection, ResourceRoom, Room, capacity, plan_group
from gang.spec import GroupRequest, Member, TopologyRequest
from gang.topology import search_levels

GPU = "nvidia.com/gpu"
RACK = "example.com/rack"
BLOCK = "example.com/block"


def members(count: int, gpus: int, cpu: int = 1000, kind: str = "w") -> tuple[Member, ...]:
    return tuple(Member(f"{kind}{i}", f"{kind}-{i}", {GPU: gpus, "cpu": cpu}, kind) for i in range(count))


def group(
    ms: tuple[Member, ...], *, needed: int | None = None, topology: TopologyRequest | None = None, **kw: object
) -> GroupRequest:
    return GroupRequest("team/job", len(ms), ms, len(ms) if needed is None else needed, topology=topology, **kw)  # type: ignore[arg-type]


def rooms(free: Mapping[str, int], cpu: int = 64_000) -> dict[str, Room]:
    return {name: ResourceRoom({GPU: gpus, "cpu": cpu}) for name, gpus in free.items()}


def racks(assign: Mapping[str, str]) -> dict[str, dict[str, str]]:
    return {name: {RACK: rack, "kubernetes.io/hostname": name} for name, rack in assign.items()}


def test_a_group_that_fits_gets_a_node_per_member_packed() -> None:
    plan = plan_group(group(members(5, 1)), rooms({"a": 3, "b": 8, "c": 5}), {})
    assert isinstance(plan, Plan)
    assert set(plan.placements.values()) == {"c"}  # the tightest node that takes all five


def test_a_group_larger_than_any_node_fills_the_largest_first() -> None:
    plan = plan_group(group(members(10, 1)), rooms({"a": 3, "b": 8, "c": 5}), {})
    assert isinstance(plan, Plan)
    counts = {n: list(plan.placements.values()).count(n) for n in "abc"}
    assert counts == {"a": 2, "b": 8, "c": 0}  # 8 on b, then the tightest node that takes the last two


def test_a_group_that_does_not_fit_places_nothing_and_says_why_in_numbers() -> None:
    result = plan_group(group(members(6, 8)), rooms({f"n{i}": 8 for i in range(5)}), {})
    assert isinstance(result, Rejection)
    assert (
        result.reason == "gang team/job: 6 x 8 nvidia.com/gpu; 40 nvidia.com/gpu free on the nodes the members may use"
    )


def test_required_topology_keeps_every_member_in_one_rack_and_picks_the_fuller_rack() -> None:
    labels = racks({"a1": "a", "a2": "a", "a3": "a", "a4": "a", "b1": "b", "b2": "b", "b3": "b", "b4": "b"})
    free = {"a1": 8, "a2": 8, "a3": 8, "a4": 8, "b1": 8, "b2": 8, "b3": 8, "b4": 8}
    free.update({"a1": 0})  # rack a is fuller: 24 free against 32
    plan = plan_group(group(members(3, 8), topology=TopologyRequest(RACK, True)), rooms(free), labels)
    assert isinstance(plan, Plan) and plan.domain.value == "a"
    assert set(plan.placements.values()) == {"a2", "a3", "a4"}
    # Four members fit only in rack b.
    plan = plan_group(group(members(4, 8), topology=TopologyRequest(RACK, True)), rooms(free), labels)
    assert isinstance(plan, Plan) and plan.domain.value == "b"
    # Five fit in no rack, though the cluster has room for seven: the group waits.
    result = plan_group(group(members(5, 8), topology=TopologyRequest(RACK, True)), rooms(free), labels)
    assert isinstance(result, Rejection)
    assert result.reason == (
        "gang team/job: 5 x 8 nvidia.com/gpu in one example.com/rack; "
        "the freest example.com/rack has 32 nvidia.com/gpu free"
    )


def test_preferred_topology_falls_back_to_wider_levels_then_anywhere() -> None:
    labels = {
        "a1": {RACK: "a", BLOCK: "x"}, "a2": {RACK: "a", BLOCK: "x"},
        "b1": {RACK: "b", BLOCK: "x"}, "c1": {RACK: "c", BLOCK: "y"},
    }  # fmt: skip
    free = rooms({"a1": 8, "a2": 8, "b1": 8, "c1": 8})
    levels = (BLOCK, RACK)
    preferred = TopologyRequest(RACK, False)
    assert search_levels(preferred, levels) == [RACK, BLOCK, ""]
    two = plan_group(group(members(2, 8), topology=preferred), free, labels, levels=levels)
    assert isinstance(two, Plan) and two.domain.describe() == f"{RACK}=a"
    three = plan_group(group(members(3, 8), topology=preferred), free, labels, levels=levels)
    assert isinstance(three, Plan) and three.domain.describe() == f"{BLOCK}=x"
    four = plan_group(group(members(4, 8), topology=preferred), free, labels, levels=levels)
    assert isinstance(four, Plan) and four.domain.describe() == "the cluster"


def test_members_already_placed_fix_the_domain() -> None:
    labels = racks({"a1": "a", "a2": "a", "b1": "b", "b2": "b", "b3": "b"})
    free = rooms({"a1": 0, "a2": 8, "b1": 8, "b2": 8, "b3": 8})
    rest = group(members(1, 8), topology=TopologyRequest(RACK, True), placed={"w-done": "a1"})
    plan = plan_group(rest, free, labels)
    assert isinstance(plan, Plan) and set(plan.placements.values()) == {"a2"}
    more = group(members(2, 8), topology=TopologyRequest(RACK, True), placed={"w-done": "a1"})
    assert isinstance(plan_group(more, free, labels), Rejection)  # rack b would fit two, but the group is in a


def test_too_few_members_wait_without_a_plan() -> None:
    result = plan_group(GroupRequest("team/job", 4, members(2, 1), 4), rooms({"a": 8}), {})
    assert (
        isinstance(result, Rejection) and result.reason == "gang team/job: 2 of 4 members exist; waiting for the rest"
    )


def test_the_queues_may_refuse_a_domain_and_the_next_one_is_tried() -> None:
    labels = racks({"a1": "a", "b1": "b"})
    refused_racks = {"a"}

    def admit(placement: Mapping[str, str]) -> str:
        return "quota" if any(labels[n][RACK] in refused_racks for n in placement.values()) else ""

    free = rooms({"a1": 2, "b1": 8})
    plan = plan_group(group(members(2, 1), topology=TopologyRequest(RACK, True)), free, labels, admit=admit)
    assert isinstance(plan, Plan) and plan.domain.value == "b"
    refused_racks.add("b")
    result = plan_group(group(members(2, 1), topology=TopologyRequest(RACK, True)), free, labels, admit=admit)
    assert isinstance(result, Rejection) and result.reason.endswith(": quota")


def test_eligible_nodes_limit_each_kind() -> None:
    launcher = Member("l", "launcher", {"cpu": 2000}, "launcher")
    workers = members(2, 4)
    allowed = {"launcher": frozenset({"cpu-1"}), "w": frozenset({"g1"})}
    free = {"g1": ResourceRoom({GPU: 8, "cpu": 64_000}), "cpu-1": ResourceRoom({"cpu": 8000})}
    plan = plan_group(group((launcher, *workers)), free, {}, eligible=lambda m: allowed[str(m.kind)])
    assert isinstance(plan, Plan)
    assert plan.placements == {"l": "cpu-1", "w0": "g1", "w1": "g1"}


# ----------------------------------------------------------------------------------------- properties
@st.composite
def clusters(draw: st.DrawFn) -> tuple[dict[str, int], dict[str, dict[str, str]], int, int, bool]:
    count = draw(st.integers(1, 5))
    free = {f"n{i}": draw(st.integers(0, 8)) for i in range(count)}
    labels = racks({name: draw(st.sampled_from("ab")) for name in free})
    return free, labels, draw(st.integers(1, 6)), draw(st.sampled_from([1, 2, 4, 8])), draw(st.booleans())


def _brute_force(
    free: Mapping[str, int], labels: Mapping[str, Mapping[str, str]], size: int, gpus: int, rack: bool
) -> bool:
    names = sorted(free)
    for assignment in itertools.product(names, repeat=size):
        if rack and len({labels[n][RACK] for n in assignment}) > 1:
            continue
        if all(assignment.count(n) * gpus <= free[n] for n in names):
            return True
    return False


@settings(max_examples=300, deadline=None)
@given(clusters())
def test_one_kind_groups_are_placed_exactly_when_some_assignment_exists(
    case: tuple[dict[str, int], dict[str, dict[str, str]], int, int, bool],
) -> None:
    free, labels, size, gpus, rack = case
    topology = TopologyRequest(RACK, True) if rack else None
    result = plan_group(group(members(size, gpus), topology=topology), rooms(free), labels)
    assert isinstance(result, Plan) == _brute_force(free, labels, size, gpus, rack)
    if isinstance(result, Plan):
        assert sorted(result.placements) == sorted(m.uid for m in members(size, gpus))
        for node in free:  # never over a node's room
            assert list(result.placements.values()).count(node) * gpus <= free[node]
        if rack:  # never across the required domain
            assert len({labels[n][RACK] for n in result.placements.values()}) == 1


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.sampled_from([f"n{i}" for i in range(6)]), st.integers(0, 16), min_size=1),
    st.lists(st.tuples(st.integers(0, 8), st.integers(0, 4000)), min_size=1, max_size=6),
)
def test_mixed_groups_never_overcommit_a_node(free: dict[str, int], shapes: list[tuple[int, int]]) -> None:
    ms = tuple(Member(f"m{i}", f"m-{i}", {GPU: g, "cpu": c}) for i, (g, c) in enumerate(shapes))
    cluster = rooms(free, cpu=8000)
    result = plan_group(group(ms), cluster, {})
    if isinstance(result, Plan):
        for node in free:
            on = [m for m in ms if result.placements[m.uid] == node]
            assert sum(m.demand[GPU] for m in on) <= free[node]
            assert sum(m.demand["cpu"] for m in on) <= 8000


def test_capacity_without_arithmetic_counts_by_taking() -> None:
    class Slots:
        def __init__(self, left: int) -> None:
            self.left = left

        def take(self, member: Member) -> Slots | None:
            return Slots(self.left - 1) if self.left > 0 else None

        def free(self, resource: str) -> int:
            return self.left

    assert capacity(Slots(3), members(1, 1)[0], 10) == 3
    assert capacity(Slots(3), members(1, 1)[0], 2) == 2


@pytest.mark.parametrize("rack", [True, False])
def test_plans_are_deterministic(rack: bool) -> None:
    labels = racks({f"n{i}": "ab"[i % 2] for i in range(8)})
    free = rooms({f"n{i}": 8 - i % 3 for i in range(8)})
    topology = TopologyRequest(RACK, True) if rack else None
    first = plan_group(group(members(5, 4), topology=topology), free, labels)
    assert all(plan_group(group(members(5, 4), topology=topology), free, labels) == first for _ in range(3))
