"""The allocation search: which devices a request may take: matchAttribute constraints, devices in use
by other claims, admin access, taints and devices with binding conditions (first fit in the reference
order, as ``test_allocate``)."""

from __future__ import annotations

from typing import Any

import pytest

from allocator import (
    REASON_CANNOT_ALLOCATE,
    Allocated,
    DeviceID,
    Unschedulable,
    allocated_device_ids,
)
from tests.allocator.builders import (
    DRIVER,
    NODE,
    allocate,
    claim,
    exactly,
    first_available,
    gpu,
    named,
    only,
    picked,
    slice_obj,
    sub,
)

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
