"""A caller's device preference (``Allocator.allocate(..., prefer=...)``, the extender's device
choice): preferred devices are tried first among devices of equal rank, never across pool or slice
priorities, and never past a constraint, a device in use or one that cannot serve the request."""

from __future__ import annotations

from allocator import DeviceID, NodeRef
from tests.allocator.builders import (
    DRIVER,
    NODE,
    allocate,
    claim,
    exactly,
    gpu,
    index,
    picked,
    shared_gpu,
    shares_of,
    slice_obj,
)


def dev(name: str, pool: str = NODE) -> DeviceID:
    return DeviceID(DRIVER, pool, name)


def test_the_preferred_device_is_taken_first() -> None:
    devices = [gpu("g0"), gpu("g1"), gpu("g2")]
    assert picked(allocate([slice_obj("s", devices)], claim())) == ["g0"]
    assert picked(allocate([slice_obj("s", devices)], claim(), prefer=[dev("g2")])) == ["g2"]


def test_several_devices_in_the_preferred_order_then_search_order() -> None:
    devices = [gpu("g0"), gpu("g1"), gpu("g2"), gpu("g3")]
    two = claim("c", exactly(count=3))
    assert picked(allocate([slice_obj("s", devices)], two, prefer=[dev("g3"), dev("g1")])) == ["g3", "g1", "g0"]


def test_a_share_goes_to_the_preferred_device() -> None:
    devices = [shared_gpu(f"g{i}", memory="10Gi") for i in range(3)]
    share = claim("c", exactly(capacity={"memory": "4Gi"}))
    outcome = allocate([slice_obj("s", devices)], share, prefer=[dev("g1")])
    assert [device for device, *_ in shares_of(outcome)] == ["g1"]


def test_a_preference_never_crosses_slice_priority() -> None:
    slices = [
        slice_obj("s-hi", [gpu("a")], pool="p", count=2, spec_priority=5),
        slice_obj("s-lo", [gpu("b")], pool="p", count=2, spec_priority=1),
    ]
    assert picked(allocate(slices, claim(), prefer=[dev("b", "p")])) == ["a"]
    assert picked(allocate(slices, claim("c", exactly(count=2)), prefer=[dev("b", "p")])) == ["a", "b"]


def test_slices_of_equal_priority_are_one_rank() -> None:
    slices = [slice_obj("s-a", [gpu("a")], pool="p", count=2), slice_obj("s-b", [gpu("b")], pool="p", count=2)]
    assert picked(allocate(slices, claim(), prefer=[dev("b", "p")])) == ["b"]


def test_a_preference_never_crosses_pool_priority() -> None:
    slices = [
        slice_obj("s-p", [gpu("a")], pool="p", spec_pool_priority=2),
        slice_obj("s-q", [gpu("b")], pool="q", spec_pool_priority=0),
    ]
    assert picked(allocate(slices, claim(), prefer=[dev("b", "q")])) == ["a"]
    pools = index(*slices).pools_for(NodeRef(NODE))
    assert pools.ranks == (0, 1)


def test_a_preferred_device_that_cannot_serve_is_passed_over() -> None:
    devices = [gpu("g0", model="A"), gpu("g1", model="B"), gpu("g2", model="A")]
    want_a = claim("c", exactly("gpu", f'device.attributes["{DRIVER}"].model == "A"'))
    assert picked(allocate([slice_obj("s", devices)], want_a, prefer=[dev("g1")])) == ["g0"]
    taken = frozenset({dev("g2")})
    assert picked(allocate([slice_obj("s", devices)], claim(), allocated=taken, prefer=[dev("g2")])) == ["g0"]


def test_constraints_still_hold_against_a_preference() -> None:
    devices = [gpu("g0", tier=1), gpu("g1", tier=2), gpu("g2", tier=2)]
    pair = claim("c", exactly(count=2), constraints=[{"matchAttribute": f"{DRIVER}/tier"}])
    assert picked(allocate([slice_obj("s", devices)], pair, prefer=[dev("g0")])) == ["g1", "g2"]
