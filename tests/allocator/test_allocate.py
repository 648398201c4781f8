"""The allocation search: KEP-5773 order, request kinds, devices in use, errors and the result.

Expected devices are derived by hand from the candidate order the reference defines (pools by
driver, pool priority, name; slices by priority, name; devices as published) and the first-fit
rule: the first complete solution in that order wins, no scoring.
"""

from __future__ import annotations

from typing import Any

import pytest

from allocator import (
    REASON_CANNOT_ALLOCATE,
    REASON_INVALID_POOLS,
    Allocated,
    AllocationError,
    Allocator,
    DeviceID,
    NodeRef,
    SelectorCache,
    Unschedulable,
    allocated_device_ids,
    allocation_to_obj,
    parse_allocation,
)
from allocator.types import CONFIG_SOURCE_CLAIM, CONFIG_SOURCE_CLASS
from tests.allocator.builders import (
    DRIVER,
    NODE,
    OTHER_DRIVER,
    allocate,
    claim,
    device_class,
    exactly,
    first_available,
    gpu,
    index,
    labels_selector,
    memory_at_least,
    picked,
    slice_obj,
    sub,
)

# The KEP's example: GPUs from 1Gi up to 80Gi of memory (powers of two, then 80Gi).
KEP_SIZES = ["1Gi", "2Gi", "4Gi", "8Gi", "16Gi", "32Gi", "64Gi", "80Gi"]


def sized(*sizes: str) -> list[dict[str, Any]]:
    return [gpu(f"gpu-{s.lower()}", memory=s) for s in sizes]


def only(name: str) -> str:
    """A request selector accepting one device by name (the device name is its ``uuid`` attribute)."""
    return f'device.attributes["{DRIVER}"].uuid == "{name}"'


def named(*names: str, **attrs: Any) -> list[dict[str, Any]]:
    """Devices that carry their own name as an attribute, for ``only()``."""
    return [gpu(n, uuid=n, **attrs) for n in names]


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


# ---------------------------------------------------------------------------------------- matchAttribute


def match_model(*requests: str) -> dict[str, Any]:
    out: dict[str, Any] = {"matchAttribute": f"{DRIVER}/model"}
    if requests:
        out["requests"] = list(requests)
    return out


def test_match_attribute_across_requests_forces_backtracking() -> None:
    # "a" takes any device, "b" only H100s. First try a=g0 (A100): no H100 matches A100, so the
    # search moves a to g1 (H100), then b = g2 (the next H100; g1 is in use).
    devices = [gpu("g0", model="A100"), gpu("g1", model="H100"), gpu("g2", model="H100")]
    h100 = f'device.attributes["{DRIVER}"].model == "H100"'
    c = claim("c", exactly("a"), exactly("b", h100), constraints=[match_model()])
    outcome = allocate([slice_obj("s", devices)], c)
    assert isinstance(outcome, Allocated)
    assert [(r.request, r.device) for r in outcome.results[0].devices] == [("a", "g1"), ("b", "g2")]


def test_match_attribute_with_count_picks_a_matching_combination() -> None:
    # count 2 of [A100, H100, A100]: g0 fixes A100, g1 does not match, g2 does.
    devices = [gpu("g0", model="A100"), gpu("g1", model="H100"), gpu("g2", model="A100")]
    c = claim("c", exactly("gpu", count=2), constraints=[match_model()])
    assert picked(allocate([slice_obj("s", devices)], c)) == ["g0", "g2"]


def test_match_attribute_that_cannot_be_met_is_unschedulable() -> None:
    devices = [gpu("g0", model="A100"), gpu("g1", model="H100")]
    c = claim("c", exactly("gpu", count=2), constraints=[match_model()])
    assert allocate([slice_obj("s", devices)], c) == Unschedulable(REASON_CANNOT_ALLOCATE)


def test_a_device_without_the_attribute_never_satisfies_match_attribute() -> None:
    devices = [gpu("g0"), gpu("g1", model="H100")]
    c = claim("c", exactly("gpu"), constraints=[match_model()])
    assert picked(allocate([slice_obj("s", devices)], c)) == ["g1"]


def test_match_attribute_only_applies_to_the_named_requests() -> None:
    # Constraint on "a" and "b" only; "c" may take a device with another model.
    devices = [gpu("g0", model="A100"), gpu("g1", model="H100"), gpu("g2", model="A100")]
    c = claim("c", exactly("a"), exactly("c"), exactly("b"), constraints=[match_model("a", "b")])
    outcome = allocate([slice_obj("s", devices)], c)
    assert isinstance(outcome, Allocated)
    assert [(r.request, r.device) for r in outcome.results[0].devices] == [("a", "g0"), ("c", "g1"), ("b", "g2")]


def test_match_attribute_on_a_parent_request_covers_its_subrequests() -> None:
    devices = [gpu("g0", model="A100"), gpu("g1", model="H100"), gpu("g2", model="H100")]
    h100 = f'device.attributes["{DRIVER}"].model == "H100"'
    req = first_available("a", sub("any"))
    c = claim("c", req, exactly("b", h100), constraints=[match_model("a", "b")])
    outcome = allocate([slice_obj("s", devices)], c)
    assert isinstance(outcome, Allocated)
    assert [(r.request, r.device) for r in outcome.results[0].devices] == [("a/any", "g1"), ("b", "g2")]


# ---------------------------------------------------------------------------------------- devices in use


def test_allocated_devices_are_skipped() -> None:
    taken = frozenset({DeviceID(DRIVER, NODE, "g0")})
    assert picked(allocate([slice_obj("s", named("g0", "g1"))], claim(), allocated=taken)) == ["g1"]


def test_a_device_of_the_same_name_in_another_pool_is_not_in_use() -> None:
    taken = frozenset({DeviceID(DRIVER, "other-pool", "g0")})
    assert picked(allocate([slice_obj("s", named("g0"))], claim(), allocated=taken)) == ["g0"]


def test_two_claims_get_distinct_devices() -> None:
    outcome = allocate([slice_obj("s", named("g0", "g1"))], claim("one"), claim("two"))
    assert picked(outcome, 0) == ["g0"]
    assert picked(outcome, 1) == ["g1"]


def test_two_claims_and_one_device_is_unschedulable() -> None:
    outcome = allocate([slice_obj("s", named("g0"))], claim("one"), claim("two"))
    assert outcome == Unschedulable(REASON_CANNOT_ALLOCATE)


def test_a_later_claim_moves_an_earlier_claims_pick() -> None:
    # Claim "one" takes any device, claim "two" only g0: one first gets g0, then backs off to g1.
    outcome = allocate([slice_obj("s", named("g0", "g1"))], claim("one"), claim("two", exactly("gpu", only("g0"))))
    assert picked(outcome, 0) == ["g1"]
    assert picked(outcome, 1) == ["g0"]


def test_results_are_in_claim_order() -> None:
    outcome = allocate([slice_obj("s", named("g0", "g1", "g2"))], claim("one", exactly("gpu", count=2)), claim("two"))
    assert isinstance(outcome, Allocated)
    assert len(outcome.results) == 2
    assert picked(outcome, 0) == ["g0", "g1"]
    assert picked(outcome, 1) == ["g2"]


# ---------------------------------------------------------------------------------------- admin access


def test_admin_access_may_use_an_allocated_device() -> None:
    taken = frozenset({DeviceID(DRIVER, NODE, "g0")})
    outcome = allocate([slice_obj("s", named("g0"))], claim("c", exactly("gpu", admin_access=True)), allocated=taken)
    assert isinstance(outcome, Allocated)
    [result] = outcome.results[0].devices
    assert (result.device, result.admin_access) == ("g0", True)
    assert allocated_device_ids(outcome.results[0]) == []


def test_admin_access_never_takes_one_device_twice_in_a_claim() -> None:
    c = claim("c", exactly("gpu", admin_access=True, count=2))
    assert allocate([slice_obj("s", named("g0"))], c) == Unschedulable(REASON_CANNOT_ALLOCATE)


def test_a_later_claim_may_share_a_device_an_earlier_claim_holds_with_admin_access() -> None:
    # Admin-access results never count as allocated (reference section 7), so claim "b" may take g0.
    outcome = allocate([slice_obj("s", named("g0"))], claim("a", exactly("gpu", admin_access=True)), claim("b"))
    assert picked(outcome, 0) == ["g0"]
    assert picked(outcome, 1) == ["g0"]


def test_backtracking_over_a_device_shared_with_an_admin_claim_is_unschedulable() -> None:
    # "a" holds g0 with admin access; "b" takes g0 too, needs a second device, finds none and
    # backs off; the search then backs out of "a" as well. One device cannot give "b" two:
    # the answer is Unschedulable (this used to lose "a"'s hold on g0 and crash with KeyError).
    outcome = allocate(
        [slice_obj("s", named("g0"))],
        claim("a", exactly("gpu", admin_access=True)),
        claim("b", exactly("gpu", count=2)),
    )
    assert outcome == Unschedulable(REASON_CANNOT_ALLOCATE)


def test_a_normal_result_has_no_admin_access_field() -> None:
    outcome = allocate([slice_obj("s", named("g0"))], claim())
    assert isinstance(outcome, Allocated)
    assert outcome.results[0].devices[0].admin_access is None
    assert allocated_device_ids(outcome.results[0]) == [DeviceID(DRIVER, NODE, "g0")]


# ---------------------------------------------------------------------------------------- taints


def tainted(name: str, effect: str, key: str = "maintenance", value: str = "") -> dict[str, Any]:
    taint = {"key": key, "effect": effect}
    if value:
        taint["value"] = value
    return {**gpu(name), "taints": [taint]}


@pytest.mark.parametrize("effect", ["NoSchedule", "NoExecute"])
def test_a_blocking_taint_skips_the_device(effect: str) -> None:
    assert picked(allocate([slice_obj("s", [tainted("g0", effect), gpu("g1")])], claim())) == ["g1"]


def test_a_none_effect_taint_is_ignored() -> None:
    assert picked(allocate([slice_obj("s", [tainted("g0", "None"), gpu("g1")])], claim())) == ["g0"]


def test_an_exists_toleration_allows_a_tainted_device() -> None:
    toleration = {"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"}
    outcome = allocate(
        [slice_obj("s", [tainted("g0", "NoSchedule"), gpu("g1")])],
        claim("c", exactly("gpu", tolerations=[toleration])),
    )
    assert picked(outcome) == ["g0"]
    assert isinstance(outcome, Allocated)
    assert outcome.results[0].devices[0].tolerations[0].operator == "Exists"


def test_an_equal_toleration_needs_the_same_value() -> None:
    devices = [tainted("g0", "NoSchedule", value="a"), tainted("g1", "NoSchedule", value="b")]
    toleration = {"key": "maintenance", "value": "b"}  # operator defaults to Equal, empty effect matches any
    outcome = allocate([slice_obj("s", devices)], claim("c", exactly("gpu", tolerations=[toleration])))
    assert picked(outcome) == ["g1"]


def test_a_toleration_for_another_effect_does_not_help() -> None:
    toleration = {"key": "maintenance", "operator": "Exists", "effect": "NoExecute"}
    c = claim("c", exactly("gpu", tolerations=[toleration]))
    outcome = allocate([slice_obj("s", [tainted("g0", "NoSchedule")])], c)
    assert outcome == Unschedulable(REASON_CANNOT_ALLOCATE)


def test_all_mode_with_an_untolerated_tainted_device_is_unschedulable() -> None:
    # Upstream checks taints when a device is allocated, after it was listed for "All": every
    # selectable device must be untainted or tolerated, else there is no solution (not a subset).
    slices = [slice_obj("s", [gpu("g0"), tainted("g1", "NoSchedule")])]
    outcome = allocate(slices, claim("c", exactly("gpu", mode="All")))
    assert outcome == Unschedulable(REASON_CANNOT_ALLOCATE)


def test_all_mode_with_a_tolerated_tainted_device_takes_every_device() -> None:
    toleration = {"key": "maintenance", "operator": "Exists"}
    slices = [slice_obj("s", [gpu("g0"), tainted("g1", "NoSchedule")])]
    outcome = allocate(slices, claim("c", exactly("gpu", mode="All", tolerations=[toleration])))
    assert picked(outcome) == ["g0", "g1"]


def test_all_mode_ignores_none_effect_taints() -> None:
    slices = [slice_obj("s", [gpu("g0"), tainted("g1", "None")])]
    assert picked(allocate(slices, claim("c", exactly("gpu", mode="All")))) == ["g0", "g1"]


# ---------------------------------------------------------------------------------------- unsupported features


def test_binding_condition_devices_are_allocated_with_their_conditions() -> None:
    # DRADeviceBindingConditions (beta, on in 1.36): the device is allocatable, and the result
    # carries copies of its bindingConditions / bindingFailureConditions (upstream allocator).
    odd = {**gpu("odd"), "bindingConditions": ["attached"], "bindingFailureConditions": ["failed"]}
    outcome = allocate([slice_obj("s", [odd])], claim())
    assert isinstance(outcome, Allocated)
    (result,) = outcome.results[0].devices
    assert (result.device, result.binding_conditions, result.binding_failure_conditions) == (
        "odd",
        ("attached",),
        ("failed",),
    )


def test_all_mode_takes_binding_condition_devices_too() -> None:
    s = slice_obj("s", [{**gpu("odd"), "bindingConditions": ["attached"]}, gpu("plain")], pool="p")
    assert picked(allocate([s], claim("c", exactly("gpu", mode="All")))) == ["odd", "plain"]


# ---------------------------------------------------------------------------------------- errors for the pod


def test_a_claim_asking_for_33_devices_is_an_allocation_error() -> None:
    with pytest.raises(AllocationError, match="exceeds the claim limit of 32"):
        allocate([slice_obj("s", named("g0"))], claim("c", exactly("gpu", count=33)))


def test_the_limit_counts_all_requests_of_a_claim() -> None:
    c = claim("c", exactly("a", count=16), exactly("b", count=17))
    with pytest.raises(AllocationError, match="33"):
        allocate([slice_obj("s", named("g0"))], c)


def test_a_claim_asking_for_32_devices_can_be_allocated() -> None:
    devices = named(*(f"g{i:02d}" for i in range(32)))
    outcome = allocate([slice_obj("s", devices)], claim("c", exactly("gpu", count=32)))
    assert len(picked(outcome)) == 32


def test_first_available_limit_uses_the_smallest_subrequest() -> None:
    # min(33, 1) = 1 device at least: not an error; 33 does not fit, so "one" is used.
    req = first_available("gpu", sub("many", count=33), sub("one"))
    outcome = allocate([slice_obj("s", named("g0"))], claim("c", req))
    assert isinstance(outcome, Allocated)
    assert [r.request for r in outcome.results[0].devices] == ["gpu/one"]


def test_an_unknown_device_class_is_an_allocation_error() -> None:
    c = claim("c", exactly("gpu", device_class_name="missing"))
    with pytest.raises(AllocationError, match="could not retrieve device class missing"):
        allocate([slice_obj("s", named("g0"))], c)


def test_a_selector_that_does_not_compile_is_an_allocation_error() -> None:
    c = claim("c", exactly("gpu", "device.driver =="))
    with pytest.raises(AllocationError, match=r"claim default/c, request gpu: selector #0: compilation failed"):
        allocate([slice_obj("s", named("g0"))], c)


def test_a_class_selector_that_does_not_compile_names_the_class() -> None:
    cls = device_class("broken", "device.driver ==")
    c = claim("c", exactly("gpu", device_class_name="broken"))
    with pytest.raises(AllocationError, match="device class broken"):
        allocate([slice_obj("s", named("g0"))], c, classes=[cls])


def test_a_selector_failing_at_runtime_is_an_allocation_error_naming_device_and_key() -> None:
    c = claim("c", exactly("gpu", f'device.attributes["{DRIVER}"].missing == "x"'))
    with pytest.raises(AllocationError) as err:
        allocate([slice_obj("s", named("g0"))], c)
    message = str(err.value)
    assert f"{DRIVER}/{NODE}/g0" in message
    assert "missing" in message


def test_a_selector_without_cel_is_an_allocation_error() -> None:
    req = exactly("gpu")
    req["exactly"]["selectors"] = [{"future": {}}]
    with pytest.raises(AllocationError, match="CEL expression empty"):
        allocate([slice_obj("s", named("g0"))], claim("c", req))


def test_an_unknown_allocation_mode_is_an_allocation_error() -> None:
    with pytest.raises(AllocationError, match="unsupported allocation mode Some"):
        allocate([slice_obj("s", named("g0"))], claim("c", exactly("gpu", mode="Some")))


def test_a_request_without_exactly_or_first_available_is_an_allocation_error() -> None:
    with pytest.raises(AllocationError, match="unsupported request type"):
        allocate([slice_obj("s", named("g0"))], claim("c", {"name": "future"}))


# ---------------------------------------------------------------------------------------- results


def test_class_config_comes_first_then_claim_config_with_requests_lists() -> None:
    gpu_cls = device_class("gpu-cls", config=[{"driver": DRIVER, "parameters": {"from": "class"}}])
    nic_cls = device_class("nic-cls")
    c = claim(
        "c",
        exactly("gpu", device_class_name="gpu-cls"),
        exactly("nic", device_class_name="nic-cls"),
        config=[
            {"requests": ["nic"], "opaque": {"driver": DRIVER, "parameters": {"from": "claim-nic"}}},
            {"opaque": {"driver": DRIVER, "parameters": {"from": "claim-all"}}},
            {"requests": ["gpu", "nic"], "opaque": {"driver": DRIVER, "parameters": {"from": "claim-both"}}},
            {"requests": ["other"], "opaque": {"driver": DRIVER, "parameters": {"from": "claim-other"}}},
        ],
    )
    outcome = allocate([slice_obj("s", named("g0", "g1"))], c, classes=[gpu_cls, nic_cls])
    assert isinstance(outcome, Allocated)
    config = [(x.source, x.requests, x.opaque.parameters if x.opaque else None) for x in outcome.results[0].config]
    # By hand (reference section 8): the class config of gpu-cls for request gpu only; then the
    # claim configs in order: nic only, all (no list), gpu+nic covers every request so its list is
    # cleared; "other" names no request of this claim and is left out.
    assert config == [
        (CONFIG_SOURCE_CLASS, ("gpu",), {"from": "class"}),
        (CONFIG_SOURCE_CLAIM, ("nic",), {"from": "claim-nic"}),
        (CONFIG_SOURCE_CLAIM, (), {"from": "claim-all"}),
        (CONFIG_SOURCE_CLAIM, (), {"from": "claim-both"}),
    ]


def test_class_config_used_by_every_request_has_no_requests_list() -> None:
    cls = device_class("gpu-cls", config=[{"driver": DRIVER, "parameters": {"k": "v"}}])
    c = claim("c", exactly("a", device_class_name="gpu-cls"), exactly("b", device_class_name="gpu-cls"))
    outcome = allocate([slice_obj("s", named("g0", "g1"))], c, classes=[cls])
    assert isinstance(outcome, Allocated)
    assert [(x.source, x.requests) for x in outcome.results[0].config] == [(CONFIG_SOURCE_CLASS, ())]


def test_claim_config_for_the_chosen_subrequest_only() -> None:
    req = first_available("gpu", sub("big", memory_at_least("40Gi")), sub("small"))
    c = claim(
        "c",
        req,
        config=[
            {"requests": ["gpu/big"], "opaque": {"driver": DRIVER, "parameters": "big"}},
            {"requests": ["gpu/small"], "opaque": {"driver": DRIVER, "parameters": "small"}},
        ],
    )
    outcome = allocate([slice_obj("s", sized("8Gi"))], c)
    assert isinstance(outcome, Allocated)
    assert [x.opaque.parameters if x.opaque else None for x in outcome.results[0].config] == ["small"]


def test_node_local_devices_pin_the_claim_to_the_node() -> None:
    outcome = allocate([slice_obj("s", named("g0"))], claim())
    assert isinstance(outcome, Allocated)
    assert allocation_to_obj(outcome.results[0])["nodeSelector"] == {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}]
    }


def test_all_nodes_devices_have_no_node_selector() -> None:
    outcome = allocate([slice_obj("s", named("g0"), pool="net", all_nodes=True)], claim())
    assert isinstance(outcome, Allocated)
    assert outcome.results[0].node_selector is None
    assert "nodeSelector" not in allocation_to_obj(outcome.results[0])


def test_node_selector_slices_merge_into_one_term_without_duplicates() -> None:
    rack = {"key": "rack", "operator": "In", "values": ["r1"]}
    zone = {"key": "zone", "operator": "In", "values": ["z1"]}
    slices = [
        slice_obj("s-a", named("a"), pool="a", node_selector={"nodeSelectorTerms": [{"matchExpressions": [rack]}]}),
        slice_obj(
            "s-b",
            named("b"),
            pool="b",
            node_selector={"nodeSelectorTerms": [{"matchExpressions": [{**rack, "values": ["r1"]}, zone]}]},
        ),
    ]
    node = NodeRef(NODE, {"rack": "r1", "zone": "z1"})
    outcome = allocate(slices, claim("c", exactly("gpu", count=2)), node=node)
    assert picked(outcome) == ["a", "b"]
    assert isinstance(outcome, Allocated)
    # rack In [r1] is in both slices' terms and appears once; zone In [z1] once.
    assert allocation_to_obj(outcome.results[0])["nodeSelector"] == {
        "nodeSelectorTerms": [{"matchExpressions": [rack, zone]}]
    }


def test_requirements_with_the_same_values_in_another_order_are_duplicates() -> None:
    # Requirements are compared by (key, operator, set of values): In [r1, r2] == In [r2, r1].
    a = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1", "r2"]}]}]}
    b = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r2", "r1"]}]}]}
    slices = [
        slice_obj("s-a", named("a"), pool="a", node_selector=a),
        slice_obj("s-b", named("b"), pool="b", node_selector=b),
    ]
    outcome = allocate(slices, claim("c", exactly("gpu", count=2)), node=NodeRef(NODE, {"rack": "r1"}))
    assert isinstance(outcome, Allocated)
    assert allocation_to_obj(outcome.results[0])["nodeSelector"] == a


def test_a_node_local_device_wins_over_node_selector_slices() -> None:
    slices = [
        slice_obj("s-a", named("a"), pool="a", node_selector=labels_selector("rack", "r1")),
        slice_obj("s-b", named("b"), pool="b"),
    ]
    outcome = allocate(slices, claim("c", exactly("gpu", count=2)), node=NodeRef(NODE, {"rack": "r1"}))
    assert isinstance(outcome, Allocated)
    selector = outcome.results[0].node_selector
    assert selector is not None
    [term] = selector.terms
    assert term.match_expressions == ()
    assert [(r.key, r.operator, r.values) for r in term.match_fields] == [("metadata.name", "In", (NODE,))]


def test_a_node_selector_naming_one_node_is_not_node_local() -> None:
    by_name = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}]}
    slices = [slice_obj("s", named("g0"), pool="p", node_selector=by_name)]
    outcome = allocate(slices, claim())
    assert isinstance(outcome, Allocated)
    # The same requirement, but copied from the slice's own term.
    assert allocation_to_obj(outcome.results[0])["nodeSelector"] == by_name


def test_allocation_round_trips_through_json() -> None:
    cls = device_class("gpu-cls", config=[{"driver": DRIVER, "parameters": {"a": [1, 2]}}])
    toleration = {"key": "maintenance", "operator": "Exists"}
    c = claim(
        "c",
        exactly("gpu", device_class_name="gpu-cls", count=2, tolerations=[toleration]),
        exactly("admin", device_class_name="gpu-cls", admin_access=True),
        config=[{"requests": ["gpu"], "opaque": {"driver": DRIVER, "parameters": {"b": True}}}],
    )
    taken = frozenset({DeviceID(DRIVER, NODE, "g2")})  # admin access may still use it
    outcome = allocate([slice_obj("s", named("g0", "g1", "g2"))], c, classes=[cls], allocated=taken)
    assert isinstance(outcome, Allocated)
    result = outcome.results[0]
    assert [(r.request, r.device, r.admin_access) for r in result.devices] == [
        ("gpu", "g0", None),
        ("gpu", "g1", None),
        ("admin", "g2", True),
    ]
    assert parse_allocation(allocation_to_obj(result)) == result


def test_allocation_to_obj_writes_go_field_names() -> None:
    outcome = allocate([slice_obj("s", named("g0"))], claim("c", exactly("gpu", admin_access=True)))
    assert isinstance(outcome, Allocated)
    assert allocation_to_obj(outcome.results[0]) == {
        "devices": {
            "results": [{"request": "gpu", "driver": DRIVER, "pool": NODE, "device": "g0", "adminAccess": True}]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}]
        },
    }


def test_devices_of_another_driver_follow_their_class() -> None:
    nic_cls = device_class("nic", f'device.driver == "{OTHER_DRIVER}"')
    slices = [slice_obj("g", named("g0")), slice_obj("n", named("n0"), driver=OTHER_DRIVER, pool="nics")]
    c = claim("c", exactly("gpu"), exactly("nic", device_class_name="nic"))
    outcome = allocate(slices, c, classes=[device_class(), nic_cls])
    assert isinstance(outcome, Allocated)
    assert [(r.request, r.driver, r.device) for r in outcome.results[0].devices] == [
        ("gpu", DRIVER, "g0"),
        ("nic", OTHER_DRIVER, "n0"),
    ]


def test_an_allocator_serves_many_nodes_with_the_same_claims() -> None:
    # One Allocator per filter request, reused across nodes: each node gets its own devices.
    idx = index(slice_obj("s1", named("a0")), slice_obj("s2", named("b0"), node="node-2"))
    allocator = Allocator({DRIVER: device_class()}, frozenset(), SelectorCache())
    c = claim()
    for node, device in (("node-1", "a0"), ("node-2", "b0"), ("node-1", "a0")):
        ref = NodeRef(node)
        assert picked(allocator.allocate(ref, idx.pools_for(ref), [c])) == [device]
