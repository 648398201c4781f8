"""The allocation search: errors that are the pod's (not the node's), and the result: configs, the
node selector, JSON round trips, other drivers and one allocator over many nodes."""

from __future__ import annotations

import pytest

from allocator import (
    Allocated,
    AllocationError,
    Allocator,
    DeviceID,
    NodeRef,
    SelectorCache,
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
    index,
    labels_selector,
    memory_at_least,
    named,
    picked,
    sized,
    slice_obj,
    sub,
)

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
