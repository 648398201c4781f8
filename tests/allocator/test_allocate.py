"""The allocation search: KEP-5773 order, priorities, invalid pools and the request kinds (ExactCount,
All, firstAvailable).

Expected devices are derived by hand from the candidate order the reference defines (pools by
driver, pool priority, name; slices by priority, name; devices as published) and the first-fit
rule: the first complete solution in that order wins, no scoring.
"""

from __future__ import annotations

import pytest

from allocator import (
    REASON_CANNOT_ALLOCATE,
    REASON_INVALID_POOLS,
    Allocated,
    AllocationError,
    DeviceID,
    Unschedulable,
)
from tests.allocator.builders import (
    DRIVER,
    KEP_SIZES,
    NODE,
    allocate,
    claim,
    device_class,
    exactly,
    first_available,
    gpu,
    memory_at_least,
    named,
    only,
    picked,
    sized,
    slice_obj,
    sub,
)

# ---------------------------------------------------------------------------------------- KEP-5773 example


def test_kep_example_increasing_memory_order_gives_the_smallest_fitting_gpu() -> None:
    # Published smallest first: a request for >= 1Gi is satisfied by the first device, 1Gi.
    outcome = allocate([slice_obj("s", sized(*KEP_SIZES))], claim("c", exactly("gpu", memory_at_least("1Gi"))))
    assert picked(outcome) == ["gpu-1gi"]


def test_kep_example_first_fit_skips_the_devices_that_are_too_small() -> None:
    # >= 10Gi: 1, 2, 4 and 8Gi do not fit; 16Gi is the first that does.
    outcome = allocate([slice_obj("s", sized(*KEP_SIZES))], claim("c", exactly("gpu", memory_at_least("10Gi"))))
    assert picked(outcome) == ["gpu-16gi"]


def test_kep_example_big_gpus_in_a_higher_priority_slice_win() -> None:
    # The big GPUs sit in slice "z-big" (by name it would come last) with slice priority 10, the
    # small ones in "a-small" (unset = 0): z-big is tried first, so its first device, 80Gi, wins.
    slices = [
        slice_obj("a-small", sized("1Gi", "2Gi", "4Gi", "8Gi"), pool="p", count=2),
        slice_obj("z-big", sized("80Gi", "64Gi", "32Gi", "16Gi"), pool="p", count=2, priority=10),
    ]
    assert picked(allocate(slices, claim("c", exactly("gpu", memory_at_least("1Gi"))))) == ["gpu-80gi"]


def test_kep_example_without_priorities_slice_name_decides() -> None:
    slices = [
        slice_obj("a-small", sized("1Gi", "2Gi", "4Gi", "8Gi"), pool="p", count=2),
        slice_obj("z-big", sized("80Gi", "64Gi", "32Gi", "16Gi"), pool="p", count=2),
    ]
    assert picked(allocate(slices, claim("c", exactly("gpu", memory_at_least("1Gi"))))) == ["gpu-1gi"]


# ---------------------------------------------------------------------------------------- priorities in the search


def test_higher_pool_priority_wins_over_pool_name() -> None:
    slices = [
        slice_obj("s-a", named("in-a"), pool="a"),
        slice_obj("s-b", named("in-b"), pool="b", pool_priority=1),
    ]
    assert picked(allocate(slices, claim())) == ["in-b"]


def test_pool_priority_outranks_slice_priority_in_the_search() -> None:
    slices = [
        slice_obj("s-a", named("in-a"), pool="a", priority=100),
        slice_obj("s-b", named("in-b"), pool="b", pool_priority=1, priority=-100),
    ]
    assert picked(allocate(slices, claim())) == ["in-b"]


def test_a_negative_pool_priority_is_used_last() -> None:
    # Pool "a" (-1) would win by name; with -1 it comes after "b" (unset = 0).
    slices = [slice_obj("s-a", named("in-a"), pool="a", pool_priority=-1), slice_obj("s-b", named("in-b"), pool="b")]
    assert picked(allocate(slices, claim())) == ["in-b"]
    # ... but is still used when the better pool is taken.
    taken = frozenset({DeviceID(DRIVER, "b", "in-b")})
    assert picked(allocate(slices, claim(), allocated=taken)) == ["in-a"]


def test_spec_priority_overrides_annotation_in_the_search() -> None:
    slices = [
        slice_obj("s-a", named("in-a"), pool="p", count=2, priority=50, spec_priority=-50),
        slice_obj("s-b", named("in-b"), pool="p", count=2),
    ]
    assert picked(allocate(slices, claim())) == ["in-b"]


# ---------------------------------------------------------------------------------------- invalid and incomplete pools


def test_mismatched_pool_priority_with_nothing_else_is_unschedulable_for_invalid_pools() -> None:
    # Slice s2 is for node-2 but belongs to the same pool and generation, with another pool priority.
    slices = [
        slice_obj("s1", named("a"), pool="p", count=2, pool_priority=1),
        slice_obj("s2", named("b"), node="node-2", pool="p", count=2, pool_priority=2),
    ]
    outcome = allocate(slices, claim())
    assert isinstance(outcome, Unschedulable)
    assert outcome.reason.startswith(REASON_INVALID_POOLS)
    assert f"{DRIVER}/p" in outcome.reason


def test_an_invalid_pool_does_not_block_another_pool_that_fits() -> None:
    slices = [
        slice_obj("s1", named("a"), pool="p", count=2, pool_priority=1),
        slice_obj("s2", named("b"), node="node-2", pool="p", count=2, pool_priority=2),
        slice_obj("s3", named("c"), pool="q"),
    ]
    assert picked(allocate(slices, claim())) == ["c"]


def test_an_incomplete_pool_gives_the_plain_reason() -> None:
    outcome = allocate([slice_obj("s1", named("a"), pool="p", count=2)], claim())
    assert outcome == Unschedulable(REASON_CANNOT_ALLOCATE)


def test_no_devices_at_all_is_unschedulable() -> None:
    assert allocate([], claim()) == Unschedulable(REASON_CANNOT_ALLOCATE)


def test_no_claims_is_an_empty_allocation() -> None:
    assert allocate([slice_obj("s", named("a"))]) == Allocated(())


# ---------------------------------------------------------------------------------------- ExactCount


def test_count_takes_the_first_devices_in_order() -> None:
    outcome = allocate([slice_obj("s", named("g0", "g1", "g2", "g3"))], claim("c", exactly("gpu", count=3)))
    assert picked(outcome) == ["g0", "g1", "g2"]


def test_count_skips_devices_the_selector_refuses() -> None:
    devices = [gpu("g0", model="A100"), gpu("g1", model="H100"), gpu("g2", model="A100"), gpu("g3", model="H100")]
    h100 = f'device.attributes["{DRIVER}"].model == "H100"'
    outcome = allocate([slice_obj("s", devices)], claim("c", exactly("gpu", h100, count=2)))
    assert picked(outcome) == ["g1", "g3"]


def test_count_more_than_available_is_unschedulable() -> None:
    outcome = allocate([slice_obj("s", named("g0", "g1"))], claim("c", exactly("gpu", count=3)))
    assert outcome == Unschedulable(REASON_CANNOT_ALLOCATE)


def test_class_selectors_apply_together_with_request_selectors() -> None:
    devices = [gpu("g0", model="A100", tier=1), gpu("g1", model="H100", tier=2), gpu("g2", model="H100", tier=1)]
    cls = device_class("h100", f'device.attributes["{DRIVER}"].model == "H100"')
    req = exactly("gpu", f'device.attributes["{DRIVER}"].tier == 1', device_class_name="h100")
    outcome = allocate([slice_obj("s", devices)], claim("c", req), classes=[cls])
    assert picked(outcome) == ["g2"]


def test_class_selectors_run_first_and_stop_at_the_first_false() -> None:
    # g0 has no "tier" attribute: the request's selector would fail at runtime on it, but the
    # class selector (H100 only) already refused g0, so it is never evaluated there.
    devices = [gpu("g0", model="A100"), gpu("g1", model="H100", tier=1)]
    cls = device_class("h100", f'device.attributes["{DRIVER}"].model == "H100"')
    req = exactly("gpu", f'device.attributes["{DRIVER}"].tier == 1', device_class_name="h100")
    assert picked(allocate([slice_obj("s", devices)], claim("c", req), classes=[cls])) == ["g1"]


def test_an_obsolete_pool_alone_is_unschedulable_without_the_invalid_reason() -> None:
    slices = [
        slice_obj("old", named("x"), pool="q", count=2, generation=1),
        slice_obj("new", named("y"), node="node-2", pool="q", count=2, generation=2),
    ]
    assert allocate(slices, claim()) == Unschedulable(REASON_CANNOT_ALLOCATE)


# ---------------------------------------------------------------------------------------- All


def test_all_mode_takes_every_selectable_device() -> None:
    devices = [gpu("g0", model="H100"), gpu("g1", model="A100"), gpu("g2", model="H100")]
    h100 = f'device.attributes["{DRIVER}"].model == "H100"'
    outcome = allocate([slice_obj("s", devices)], claim("c", exactly("gpu", h100, mode="All")))
    assert picked(outcome) == ["g0", "g2"]


def test_all_mode_with_a_device_in_use_is_unschedulable() -> None:
    taken = frozenset({DeviceID(DRIVER, NODE, "g1")})
    outcome = allocate([slice_obj("s", named("g0", "g1"))], claim("c", exactly("gpu", mode="All")), allocated=taken)
    assert outcome == Unschedulable(REASON_CANNOT_ALLOCATE)


def test_all_mode_with_nothing_selectable_is_unschedulable() -> None:
    outcome = allocate([slice_obj("s", named("g0"))], claim("c", exactly("gpu", only("zz"), mode="All")))
    assert outcome == Unschedulable(REASON_CANNOT_ALLOCATE)


def test_all_mode_with_an_incomplete_pool_on_the_node_is_an_allocation_error() -> None:
    slices = [slice_obj("s1", named("g0"), pool="p"), slice_obj("s2", named("x"), pool="q", count=2)]
    with pytest.raises(AllocationError, match=f"{DRIVER}/q is currently being updated"):
        allocate(slices, claim("c", exactly("gpu", mode="All")))


def test_all_mode_with_an_invalid_pool_on_the_node_is_an_allocation_error() -> None:
    slices = [
        slice_obj("s1", named("g0"), pool="p"),
        slice_obj("s2", named("x"), pool="q", count=2),
        slice_obj("s3", named("x"), pool="q", count=2),
    ]
    with pytest.raises(AllocationError, match="currently invalid"):
        allocate(slices, claim("c", exactly("gpu", mode="All")))


def test_all_mode_ignores_an_obsolete_pool() -> None:
    # Pool q on this node is generation 1 of 2 slices while node-2 has generation 2: obsolete, dropped.
    slices = [
        slice_obj("s1", named("g0"), pool="p"),
        slice_obj("old", named("x"), pool="q", count=2, generation=1),
        slice_obj("new", named("y"), node="node-2", pool="q", count=2, generation=2),
    ]
    assert picked(allocate(slices, claim("c", exactly("gpu", mode="All")))) == ["g0"]


def test_all_mode_with_a_device_breaking_a_constraint_is_an_allocation_error() -> None:
    # Reference section 5: for "All", a device that violates a constraint is a hard error.
    devices = [gpu("g0", model="A100"), gpu("g1", model="H100")]
    c = claim("c", exactly("gpu", mode="All"), constraints=[{"matchAttribute": f"{DRIVER}/model"}])
    with pytest.raises(AllocationError, match="does not satisfy the claim's constraints"):
        allocate([slice_obj("s", devices)], c)


def test_all_mode_with_admin_access_takes_allocated_devices_too() -> None:
    taken = frozenset({DeviceID(DRIVER, NODE, "g0")})
    c = claim("c", exactly("gpu", mode="All", admin_access=True))
    assert picked(allocate([slice_obj("s", named("g0", "g1"))], c, allocated=taken)) == ["g0", "g1"]


# ---------------------------------------------------------------------------------------- firstAvailable


def test_first_available_can_fall_back_to_all_devices() -> None:
    req = first_available("gpu", sub("big", memory_at_least("40Gi")), sub("every", mode="All"))
    outcome = allocate([slice_obj("s", sized("8Gi", "16Gi"))], claim("c", req))
    assert isinstance(outcome, Allocated)
    assert [(r.request, r.device) for r in outcome.results[0].devices] == [
        ("gpu/every", "gpu-8gi"),
        ("gpu/every", "gpu-16gi"),
    ]


def test_first_available_uses_the_first_subrequest_that_fits() -> None:
    slices = [slice_obj("s", sized("16Gi", "80Gi"))]
    req = first_available("gpu", sub("big", memory_at_least("40Gi")), sub("small", memory_at_least("8Gi")))
    outcome = allocate(slices, claim("c", req))
    assert isinstance(outcome, Allocated)
    assert [(r.request, r.device) for r in outcome.results[0].devices] == [("gpu/big", "gpu-80gi")]


def test_first_available_falls_back_to_a_later_subrequest() -> None:
    slices = [slice_obj("s", sized("8Gi", "16Gi"))]
    req = first_available("gpu", sub("big", memory_at_least("40Gi")), sub("small", memory_at_least("8Gi")))
    outcome = allocate(slices, claim("c", req))
    assert isinstance(outcome, Allocated)
    assert [(r.request, r.device) for r in outcome.results[0].devices] == [("gpu/small", "gpu-8gi")]


def test_a_later_request_forces_a_fall_back_to_a_later_subrequest() -> None:
    # Two devices. "pair" (count 2) would take both and leave nothing for "extra", so the search
    # backtracks to "one" (count 1): pair/one gets g0, extra gets g1.
    req = first_available("gpu", sub("pair", count=2), sub("one"))
    outcome = allocate([slice_obj("s", named("g0", "g1"))], claim("c", req, exactly("extra")))
    assert isinstance(outcome, Allocated)
    assert [(r.request, r.device) for r in outcome.results[0].devices] == [("gpu/one", "g0"), ("extra", "g1")]


def test_first_available_with_no_subrequest_fitting_is_unschedulable() -> None:
    req = first_available("gpu", sub("a", only("x")), sub("b", only("y")))
    assert allocate([slice_obj("s", named("g0"))], claim("c", req)) == Unschedulable(REASON_CANNOT_ALLOCATE)
