"""PodInfo's copies with one field changed equal ``dataclasses.replace``'s, field for field."""

from __future__ import annotations

from dataclasses import fields, replace

from hypothesis import given
from hypothesis import strategies as st

from k8s_semantics.placement import PodPlacement
from scoring.framework import PodClaimRef, PodInfo
from scoring.resources import PodResources

_texts = st.text("abc-", max_size=4)
_demands = st.dictionaries(_texts, st.tuples(st.integers(0, 4), st.integers(0, 1000)), max_size=2)


@st.composite
def pod_infos(draw: st.DrawFn) -> PodInfo:
    return PodInfo(
        uid=draw(_texts),
        namespace=draw(_texts),
        name=draw(_texts),
        resources=PodResources({"cpu": draw(st.integers(0, 4000))}, 0, 0),
        node_name=draw(_texts),
        priority=draw(st.integers(-10, 10)),
        terminal=draw(st.booleans()),
        claims=tuple(PodClaimRef(name, name) for name in draw(st.lists(_texts, max_size=2))),
        claims_pending=draw(_texts),
        queue_labels=tuple(draw(st.lists(st.tuples(_texts, _texts), max_size=2))),
        admitted_at=draw(st.floats(0, 10)),
        owner_uid=draw(_texts),
        pod_group=draw(_texts),
        terminating=draw(st.booleans()),
        group_size=draw(st.integers(0, 4)),
        topology_required=draw(_texts),
        topology_preferred=draw(_texts),
        placement=draw(st.none() | st.just(PodPlacement())),
        claim_devices=draw(_demands),
        resource_version=draw(_texts),
        soft_preferences=draw(st.booleans()),
    )


@given(pod_infos(), _texts, _demands)
def test_copies_equal_replace(pod: PodInfo, node: str, demand: dict[str, tuple[int, int]]) -> None:
    """``on_node`` and ``with_claim_devices`` make what ``replace`` makes."""
    for copy, expected in (
        (pod.on_node(node), replace(pod, node_name=node)),
        (pod.with_claim_devices(demand), replace(pod, claim_devices=demand)),
    ):
        assert copy == expected and copy is not pod
        for each in fields(PodInfo):  # also the fields equality leaves out
            assert getattr(copy, each.name) is getattr(expected, each.name), each.name


def test_pod_info_stays_a_plain_record() -> None:
    """The copies set the fields directly: a __post_init__ or a field outside __init__ would be skipped."""
    assert not hasattr(PodInfo, "__post_init__")
    assert all(each.init for each in fields(PodInfo))
