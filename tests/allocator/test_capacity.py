"""Consumable capacity (DRAConsumableCapacity): shares of devices that allow multiple allocations.

Each test names the upstream rule it checks (kube-scheduler 1.36, ``structured/internal/incubating``:
``consumable_capacity.go`` and ``allocateDevice``; API docs in ``resource/v1/types.go``).
"""

from __future__ import annotations

from typing import Any

import pytest

from allocator import (
    REASON_CANNOT_ALLOCATE,
    Allocated,
    AllocationError,
    DeviceID,
    ParseError,
    Unschedulable,
    parse_resource_slice,
)
from tests.allocator.builders import (
    DRIVER,
    NODE,
    Shares,
    allocate,
    claim,
    exactly,
    first_available,
    gpu,
    picked,
    shared_gpu,
    shares_of,
    slice_obj,
    sub,
)

GIB_RANGE = {"default": "1Gi", "validRange": {"min": "1Gi", "max": "32Gi", "step": "1Gi"}}


def one_shared(**capacity: str) -> list[dict[str, Any]]:
    return [slice_obj("s", [shared_gpu("g0", **capacity)])]


# ---------------------------------------------------------------------------------------- shares


def test_two_claims_share_one_device_and_each_records_its_share() -> None:
    # allocateDevice: a device with allowMultipleAllocations is not marked in use; each allocation
    # gets a new shareID and consumedCapacity for every capacity of the device.
    outcome = allocate(
        one_shared(memory="40Gi"),
        claim("a", exactly("gpu", capacity={"memory": "10Gi"})),
        claim("b", exactly("gpu", capacity={"memory": "30Gi"})),
    )
    assert shares_of(outcome, 0) == [("g0", "share-1", {"memory": "10Gi"})]
    assert shares_of(outcome, 1) == [("g0", "share-2", {"memory": "30Gi"})]


def test_a_share_the_search_gives_back_takes_no_share_id() -> None:
    # Each share of the result gets a shareID of its own (random UUIDs, as upstream, in a cluster);
    # one the search tried and gave back (request "b" could not match g0's model) takes none.
    def shared(name: str, model: str) -> dict[str, Any]:
        return {**shared_gpu(name, memory="40Gi"), "attributes": {"uuid": {"string": name}, "model": {"string": model}}}

    outcome = allocate(
        [slice_obj("s", [shared("g0", "x"), shared("g1", "y"), gpu("p1", uuid="p1", model="y")])],
        claim(
            "c",
            exactly("a", capacity={"memory": "10Gi"}),
            exactly("b", f'device.attributes["{DRIVER}"].uuid == "p1"'),
            constraints=[{"requests": ["a", "b"], "matchAttribute": f"{DRIVER}/model"}],
        ),
    )
    assert shares_of(outcome) == [("g1", "share-1", {"memory": "10Gi"}), ("p1", None, {})]


def test_the_shares_never_consume_more_than_the_capacity() -> None:
    # CmpRequestOverCapacity: consumed + allocating (this search) must stay <= the capacity value.
    slices = [slice_obj("s", [shared_gpu("g0", memory="40Gi"), shared_gpu("g1", memory="40Gi")])]
    claims = [claim(f"c{i}", exactly("gpu", capacity={"memory": "15Gi"})) for i in range(4)]
    outcome = allocate(slices, *claims)
    assert [picked(outcome, i) for i in range(4)] == [["g0"], ["g0"], ["g1"], ["g1"]]
    assert allocate(slices, *claims, claim("c4", exactly("gpu", capacity={"memory": "15Gi"}))) == Unschedulable(
        REASON_CANNOT_ALLOCATE
    )


def test_existing_shares_count_against_the_capacity() -> None:
    # AggregatedCapacity of allocated (and in-flight) claims is the starting point.
    shares = Shares({DeviceID(DRIVER, NODE, "g0"): {"memory": "30Gi"}})
    c = claim("c", exactly("gpu", capacity={"memory": "20Gi"}))
    assert allocate(one_shared(memory="40Gi"), c, shared=shares) == Unschedulable(REASON_CANNOT_ALLOCATE)
    assert picked(allocate(one_shared(memory="50Gi"), c, shared=shares)) == ["g0"]


def test_a_request_without_capacity_consumes_all_of_an_unpolicied_capacity() -> None:
    # calculateConsumedCapacity: no request for a capacity and no requestPolicy -> the full value.
    whole = claim("whole", exactly("gpu"))
    outcome = allocate(one_shared(memory="40Gi"), whole)
    assert shares_of(outcome) == [("g0", "share-1", {"memory": "40Gi"})]
    part = claim("part", exactly("gpu", capacity={"memory": "1Gi"}))
    assert allocate(one_shared(memory="40Gi"), part, whole) == Unschedulable(REASON_CANNOT_ALLOCATE)


def test_a_capacity_the_request_does_not_name_is_consumed_in_full() -> None:
    # Every capacity of the device is consumed: the unnamed one at its full value.
    a = claim("a", exactly("gpu", capacity={"memory": "10Gi"}))
    b = claim("b", exactly("gpu", capacity={"memory": "10Gi"}))
    outcome = allocate(one_shared(memory="40Gi", cores="100"), a)
    assert shares_of(outcome) == [("g0", "share-1", {"memory": "10Gi", "cores": "100"})]
    assert allocate(one_shared(memory="40Gi", cores="100"), a, b) == Unschedulable(REASON_CANNOT_ALLOCATE)


def test_a_device_without_capacity_takes_any_number_of_shares() -> None:
    claims = [claim(f"c{i}") for i in range(5)]
    outcome = allocate([slice_obj("s", [{"name": "g0", "allowMultipleAllocations": True}])], *claims)
    assert [shares_of(outcome, i) for i in range(5)] == [[("g0", f"share-{i + 1}", {})] for i in range(5)]


def test_a_device_without_multiple_allocations_is_used_whole() -> None:
    outcome = allocate([slice_obj("s", [gpu("g0", memory="40Gi")])], claim("a"), claim("b"))
    assert outcome == Unschedulable(REASON_CANNOT_ALLOCATE)


def test_one_claim_can_hold_two_shares_of_one_device() -> None:
    # Upstream never marks a shared device in use, not even for the next request of the same claim.
    c = claim("c", exactly("a", capacity={"memory": "8Gi"}), exactly("b", capacity={"memory": "8Gi"}))
    assert picked(allocate(one_shared(memory="16Gi"), c)) == ["g0", "g0"]


def test_a_whole_device_claim_keeps_shares_off() -> None:
    # A result without shareID puts the device in AllocatedDevices: in use for everyone.
    outcome = allocate(one_shared(memory="40Gi"), claim("c"), allocated=frozenset({DeviceID(DRIVER, NODE, "g0")}))
    assert outcome == Unschedulable(REASON_CANNOT_ALLOCATE)


# ---------------------------------------------------------------------------------------- capacity as a filter


def test_capacity_requests_filter_devices_that_are_not_shared() -> None:
    # CmpRequestOverCapacity runs for every candidate: a 40Gi request skips a 24Gi device; a device
    # that does not allow multiple allocations records no share.
    slices = [slice_obj("s", [gpu("small", memory="24Gi"), gpu("big", memory="80Gi")])]
    outcome = allocate(slices, claim("c", exactly("gpu", capacity={"memory": "40Gi"})))
    assert shares_of(outcome) == [("big", None, {})]


def test_a_request_for_a_capacity_the_device_lacks_skips_the_device() -> None:
    # requestsContainNonExistCapacity: an error for that device, which is skipped (not fatal).
    slices = [slice_obj("s", [shared_gpu("g0", memory="40Gi"), shared_gpu("g1", cores="8", memory="40Gi")])]
    assert picked(allocate(slices, claim("c", exactly("gpu", capacity={"cores": "2"})))) == ["g1"]


def test_capacity_names_are_matched_exactly_as_published() -> None:
    # 1.36 looks requests up by the exact key: "gpu.example.com/memory" is not "memory".
    c = claim("c", exactly("gpu", capacity={f"{DRIVER}/memory": "1Gi"}))
    assert allocate(one_shared(memory="40Gi"), c) == Unschedulable(REASON_CANNOT_ALLOCATE)


def test_first_available_falls_back_when_the_capacity_does_not_fit() -> None:
    big = sub("big", capacity={"memory": "60Gi"})
    small = sub("small", capacity={"memory": "20Gi"})
    outcome = allocate(one_shared(memory="40Gi"), claim("c", first_available("gpu", big, small)))
    assert isinstance(outcome, Allocated)
    result = outcome.results[0].devices[0]
    assert (result.request, result.consumed_capacity) == ("gpu/small", {"memory": "20Gi"})


# ---------------------------------------------------------------------------------------- request policies


def policied(policy: dict[str, Any], value: str = "40Gi") -> list[dict[str, Any]]:
    return [slice_obj("s", [shared_gpu("g0", {"memory": policy}, memory=value)])]


@pytest.mark.parametrize(
    ("requested", "consumed"),
    [
        ("512Mi", "1Gi"),  # roundUpRange: below min -> min
        ("1536Mi", "2Gi"),  # step: up to min + n*step
        ("3Gi", "3Gi"),  # on the grid: unchanged
    ],
)
def test_valid_range_rounds_the_request_up(requested: str, consumed: str) -> None:
    outcome = allocate(policied(GIB_RANGE), claim("c", exactly("gpu", capacity={"memory": requested})))
    assert shares_of(outcome) == [("g0", "share-1", {"memory": consumed})]


def test_a_request_above_the_range_is_refused() -> None:
    # violateValidRange: above max -> the device cannot be allocated.
    c = claim("c", exactly("gpu", capacity={"memory": "33Gi"}))
    assert allocate(policied(GIB_RANGE), c) == Unschedulable(REASON_CANNOT_ALLOCATE)


def test_the_default_is_consumed_when_the_request_does_not_name_the_capacity() -> None:
    # fillEmptyRequest: requestPolicy.default.
    outcome = allocate(policied(GIB_RANGE), claim("c"))
    assert shares_of(outcome) == [("g0", "share-1", {"memory": "1Gi"})]


def test_rounded_shares_add_up_against_the_capacity() -> None:
    # Two 2.5Gi requests consume 3Gi each after rounding: 6Gi on a 5Gi device does not fit.
    claims = [claim(f"c{i}", exactly("gpu", capacity={"memory": "2560Mi"})) for i in range(2)]
    assert allocate(policied(GIB_RANGE, value="5Gi"), *claims) == Unschedulable(REASON_CANNOT_ALLOCATE)
    assert isinstance(allocate(policied(GIB_RANGE, value="6Gi"), *claims), Allocated)


def test_a_range_step_rounds_in_whole_units() -> None:
    # 1.36 roundUpRange works on Quantity.Value() (rounded up to whole units): a step of 500m
    # is a step of 1, so 250m of cores is consumed as 1.
    policy = {"default": "1", "validRange": {"min": "0", "step": "500m"}}
    slices = [slice_obj("s", [shared_gpu("g0", {"cores": policy}, cores="4")])]
    outcome = allocate(slices, claim("c", exactly("gpu", capacity={"cores": "250m"})))
    assert shares_of(outcome) == [("g0", "share-1", {"cores": "1"})]


@pytest.mark.parametrize(("requested", "consumed"), [("1Gi", "2Gi"), ("3Gi", "4Gi"), ("8Gi", "8Gi")])
def test_valid_values_round_up_to_the_next_value(requested: str, consumed: str) -> None:
    policy = {"default": "2Gi", "validValues": ["2Gi", "4Gi", "8Gi"]}
    outcome = allocate(policied(policy), claim("c", exactly("gpu", capacity={"memory": requested})))
    assert shares_of(outcome) == [("g0", "share-1", {"memory": consumed})]


def test_a_request_above_every_valid_value_is_refused() -> None:
    policy = {"default": "2Gi", "validValues": ["2Gi", "4Gi", "8Gi"]}
    c = claim("c", exactly("gpu", capacity={"memory": "9Gi"}))
    assert allocate(policied(policy), c) == Unschedulable(REASON_CANNOT_ALLOCATE)


def test_the_default_passes_the_policy_even_off_the_grid() -> None:
    # violatesPolicy: consumed == default is never a violation.
    policy = {"default": "3Gi", "validValues": ["2Gi", "4Gi"]}
    assert shares_of(allocate(policied(policy), claim("c"))) == [("g0", "share-1", {"memory": "3Gi"})]


# ---------------------------------------------------------------------------------------- All, constraints, CEL


def test_all_mode_lists_only_devices_with_room_for_the_request() -> None:
    # validateDeviceRequest (All): devices failing CmpRequestOverCapacity against existing shares
    # are left out of "all" instead of failing the request.
    slices = [slice_obj("s", [shared_gpu("g0", memory="40Gi"), shared_gpu("g1", memory="40Gi")])]
    shares = Shares({DeviceID(DRIVER, NODE, "g0"): {"memory": "35Gi"}})
    c = claim("c", exactly("gpu", mode="All", capacity={"memory": "10Gi"}))
    assert picked(allocate(slices, c, shared=shares)) == ["g1"]


def test_distinct_attribute_puts_two_shares_on_different_devices() -> None:
    devices = [shared_gpu("g0", memory="40Gi"), shared_gpu("g1", memory="40Gi")]
    for i, d in enumerate(devices):
        d["attributes"] = {"uuid": {"string": f"GPU-{i}"}}
    requests = (exactly("a", capacity={"memory": "8Gi"}), exactly("b", capacity={"memory": "8Gi"}))
    assert picked(allocate([slice_obj("s", devices)], claim("c", *requests))) == ["g0", "g0"]
    distinct = claim("c", *requests, constraints=[{"distinctAttribute": f"{DRIVER}/uuid"}])
    assert picked(allocate([slice_obj("s", devices)], distinct)) == ["g0", "g1"]


def test_distinct_attribute_is_pairwise_within_one_request() -> None:
    # Decision: the API says the value is unique across the devices; upstream 1.36 only compares
    # against the latest device of each request and would accept g0, g1, g2 here.
    devices = [gpu(f"g{i}", model=m) for i, m in enumerate(["A", "B", "A", "C"])]
    c = claim("c", exactly("gpu", count=3), constraints=[{"distinctAttribute": f"{DRIVER}/model"}])
    assert picked(allocate([slice_obj("s", devices)], c)) == ["g0", "g1", "g3"]


def test_selectors_see_allow_multiple_allocations() -> None:
    devices = [gpu("whole"), shared_gpu("shared", memory="8Gi")]
    c = claim("c", exactly("gpu", "device.allowMultipleAllocations"))
    assert picked(allocate([slice_obj("s", devices)], c)) == ["shared"]


def test_admin_access_on_a_shared_device_still_consumes_within_the_search() -> None:
    # allocateDevice records the admin request's share like any other; the allocated state later
    # ignores admin results (tested in the cache).
    a = claim("a", exactly("gpu", admin_access=True, capacity={"memory": "30Gi"}))
    b = claim("b", exactly("gpu", capacity={"memory": "30Gi"}))
    assert allocate(one_shared(memory="40Gi"), a, b) == Unschedulable(REASON_CANNOT_ALLOCATE)


# ---------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("policy", "field"),
    [
        ({"validValues": ["1Gi"], "validRange": {"min": "1Gi"}}, "requestPolicy: must not set both"),
        ({"validRange": {"max": "1Gi"}}, r"validRange\.min: required"),
        ({"validRange": {"min": "1Gi", "step": "0"}}, r"validRange\.step: must be positive"),
        ({"validValues": ["4Gi", "2Gi"]}, r"validValues: must be sorted"),
        ({"default": "lots"}, r"requestPolicy\.default"),
    ],
)
def test_a_bad_request_policy_is_a_parse_error_naming_the_field(policy: dict[str, Any], field: str) -> None:
    with pytest.raises(ParseError, match=field):
        parse_resource_slice(slice_obj("s", [shared_gpu("g0", {"memory": policy}, memory="8Gi")]))


def test_a_negative_capacity_request_is_a_parse_error_naming_the_request() -> None:
    with pytest.raises(ParseError, match=r"capacity\.requests\['memory'\]: must not be negative"):
        claim("c", exactly("gpu", capacity={"memory": "-1Gi"}))


def test_an_unparseable_capacity_request_is_a_parse_error() -> None:
    with pytest.raises(ParseError, match=r"firstAvailable\[0\]\.capacity\.requests\['memory'\]"):
        claim("c", first_available("gpu", sub("x", capacity={"memory": "much"})))


def test_capacity_requests_never_raise_allocation_errors() -> None:
    # Whatever the request asks for, a device that cannot serve it is skipped, never a pod error.
    c = claim("c", exactly("gpu", capacity={"nonexistent": "1", "memory": "1Ti"}))
    try:
        outcome = allocate(one_shared(memory="40Gi"), c)
    except AllocationError as exc:  # pragma: no cover - the assertion below explains
        pytest.fail(f"raised {exc}")
    assert outcome == Unschedulable(REASON_CANNOT_ALLOCATE)
