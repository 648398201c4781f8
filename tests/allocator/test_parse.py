"""Parsers of resource.k8s.io/v1 objects: KEP-5773 priorities, strict types, errors naming the field."""

from __future__ import annotations

import pytest

from allocator import (
    POOL_PRIORITY_ANNOTATION,
    PRIORITY_ANNOTATION,
    DeviceID,
    ParseError,
    allocated_device_ids,
    parse_allocation,
    parse_resource_claim,
    parse_resource_slice,
)
from allocator.types import ALLOCATION_MODE_ALL
from tests.allocator.builders import claim, exactly, first_available, gpu, slice_obj, sub

# ---------------------------------------------------------------------------------------- priorities


def test_priorities_default_to_zero_when_neither_spec_nor_annotation_is_set() -> None:
    s = parse_resource_slice(slice_obj("s", [gpu("g0")]))
    assert (s.priority, s.pool.priority) == (0, 0)


def test_priorities_are_read_from_the_annotations() -> None:
    s = parse_resource_slice(slice_obj("s", [gpu("g0")], priority=7, pool_priority=3))
    assert (s.priority, s.pool.priority) == (7, 3)


def test_negative_priorities_are_kept() -> None:
    s = parse_resource_slice(slice_obj("s", [gpu("g0")], priority=-5, pool_priority=-2))
    assert (s.priority, s.pool.priority) == (-5, -2)


def test_spec_priority_fields_override_the_annotations() -> None:
    obj = slice_obj("s", [gpu("g0")], priority=1, pool_priority=1, spec_priority=9, spec_pool_priority=-4)
    s = parse_resource_slice(obj)
    assert (s.priority, s.pool.priority) == (9, -4)


def test_spec_priority_zero_still_overrides_the_annotation() -> None:
    # An explicit 0 is "set": the annotation (5) must not win over it.
    s = parse_resource_slice(slice_obj("s", [gpu("g0")], priority=5, spec_priority=0))
    assert s.priority == 0


@pytest.mark.parametrize("annotation", [PRIORITY_ANNOTATION, POOL_PRIORITY_ANNOTATION])
@pytest.mark.parametrize("text", ["high", "1.5", "", "0x10", "1_000", "\u0663"])
def test_a_bad_priority_annotation_is_a_parse_error_naming_the_annotation(annotation: str, text: str) -> None:
    obj = slice_obj("s", [gpu("g0")])
    obj["metadata"]["annotations"][annotation] = text
    with pytest.raises(ParseError) as err:
        parse_resource_slice(obj)
    assert annotation in str(err.value)
    assert "ResourceSlice s" in str(err.value)


def test_a_priority_annotation_outside_int64_is_a_parse_error() -> None:
    obj = slice_obj("s", [gpu("g0")])
    obj["metadata"]["annotations"][PRIORITY_ANNOTATION] = str(2**63)
    with pytest.raises(ParseError, match="int64"):
        parse_resource_slice(obj)


def test_a_bad_annotation_is_ignored_when_the_spec_field_is_set() -> None:
    # The spec field decides; the annotation is only the fallback and is not read at all.
    obj = slice_obj("s", [gpu("g0")], spec_priority=2)
    obj["metadata"]["annotations"][PRIORITY_ANNOTATION] = "not-a-number"
    assert parse_resource_slice(obj).priority == 2


def test_a_non_integer_spec_priority_is_a_parse_error_naming_the_field() -> None:
    obj = slice_obj("s", [gpu("g0")])
    obj["spec"]["priority"] = "1"
    with pytest.raises(ParseError, match=r"spec\.priority: must be an integer"):
        parse_resource_slice(obj)


def test_a_non_integer_spec_pool_priority_is_a_parse_error_naming_the_field() -> None:
    obj = slice_obj("s", [gpu("g0")])
    obj["spec"]["pool"]["priority"] = True
    with pytest.raises(ParseError, match=r"spec\.pool\.priority: must be an integer"):
        parse_resource_slice(obj)


# ---------------------------------------------------------------------------------------- slices


def test_resource_slice_count_below_one_is_a_parse_error() -> None:
    with pytest.raises(ParseError, match=r"spec\.pool\.resourceSliceCount"):
        parse_resource_slice(slice_obj("s", [gpu("g0")], count=0))


def test_an_attribute_with_two_values_is_a_parse_error_naming_the_attribute() -> None:
    obj = slice_obj("s", [gpu("g0", model={"string": "H100", "int": 1})])
    with pytest.raises(ParseError, match=r"spec\.devices\[0\]\.attributes\['model'\]"):
        parse_resource_slice(obj)


def test_a_bad_capacity_quantity_is_a_parse_error_naming_the_capacity() -> None:
    with pytest.raises(ParseError, match=r"capacity\['memory'\]\.value"):
        parse_resource_slice(slice_obj("s", [gpu("g0", memory="lots")]))


def test_plain_devices_are_supported() -> None:
    s = parse_resource_slice(slice_obj("s", [gpu("g0", memory="1Gi", model="H100", index=0, ok=True)]))
    assert s.devices[0].unsupported == ""


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        ({"attributes": {"ids": {"ints": [1, 2]}}}, "list attributes"),
    ],
)
def test_devices_needing_unsupported_features_are_marked_unsupported(extra: dict[str, object], why: str) -> None:
    s = parse_resource_slice(slice_obj("s", [{**gpu("g0"), **extra}]))
    assert why in s.devices[0].unsupported


# ---------------------------------------------------------------------------------------- claims


def test_a_request_with_both_exactly_and_first_available_is_a_parse_error() -> None:
    req = {**exactly("gpu"), "firstAvailable": [sub("a")]}
    with pytest.raises(ParseError, match=r"spec\.devices\.requests\[0\].*exactly one of"):
        claim("c", req)


def test_count_below_one_is_a_parse_error_naming_the_field() -> None:
    with pytest.raises(ParseError, match=r"spec\.devices\.requests\[0\]\.exactly\.count: must be >= 1"):
        claim("c", exactly("gpu", count=0))


def test_a_constraint_with_both_kinds_is_a_parse_error() -> None:
    both = {"matchAttribute": f"{'gpu.example.com'}/model", "distinctAttribute": "gpu.example.com/model"}
    with pytest.raises(ParseError, match=r"spec\.devices\.constraints\[0\]"):
        claim("c", exactly(), constraints=[both])


def test_a_selector_without_cel_is_kept_for_the_allocator_to_refuse() -> None:
    req = exactly("gpu")
    req["exactly"]["selectors"] = [{"future": {}}]
    parsed = claim("c", req)
    assert parsed.requests[0].exactly is not None
    assert parsed.requests[0].exactly.selectors[0].expression is None


def test_request_defaults_are_exact_count_one() -> None:
    ex = claim("c", exactly("gpu")).requests[0].exactly
    assert ex is not None
    assert (ex.allocation_mode, ex.count) == ("ExactCount", 1)


def test_first_available_subrequests_keep_their_order_and_modes() -> None:
    parsed = claim("c", first_available("gpu", sub("big", count=2), sub("all", mode=ALLOCATION_MODE_ALL)))
    subs = parsed.requests[0].first_available
    assert [(s.name, s.count, s.allocation_mode) for s in subs] == [("big", 2, "ExactCount"), ("all", 1, "All")]


# ---------------------------------------------------------------------------------------- allocations


def test_parse_allocation_names_the_missing_field() -> None:
    obj = {"devices": {"results": [{"request": "gpu", "driver": "gpu.example.com", "pool": "p"}]}}
    with pytest.raises(ParseError, match=r"devices\.results\[0\]\.device: required"):
        parse_allocation(obj)


def test_allocated_device_ids_leave_out_admin_access_results() -> None:
    obj = {
        "devices": {
            "results": [
                {"request": "a", "driver": "d", "pool": "p", "device": "x"},
                {"request": "b", "driver": "d", "pool": "p", "device": "y", "adminAccess": True},
                {"request": "c", "driver": "d", "pool": "p", "device": "z", "adminAccess": False},
            ]
        }
    }
    assert allocated_device_ids(parse_allocation(obj)) == [DeviceID("d", "p", "x"), DeviceID("d", "p", "z")]


def test_claim_status_allocation_is_parsed_with_its_path() -> None:
    parsed = claim("c")
    assert parsed.allocation is None
    with pytest.raises(ParseError, match=r"status\.allocation\.devices\.results\[0\]\.pool: required"):
        parse_resource_claim(
            {
                "metadata": {"name": "c", "namespace": "default"},
                "spec": {"devices": {"requests": [exactly()]}},
                "status": {"allocation": {"devices": {"results": [{"request": "gpu", "driver": "d", "device": "x"}]}}},
            }
        )
