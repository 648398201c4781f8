"""Device taints with DeviceTaintRules (DRADeviceTaints) and binding conditions
(DRADeviceBindingConditions), as kube-scheduler 1.36's allocator and DynamicResources plugin have them."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator import (
    REASON_CANNOT_ALLOCATE,
    Allocated,
    DeviceID,
    ParseError,
    TaintRules,
    Unschedulable,
    parse_device_taint_rule,
    parse_resource_claim,
    parse_resource_slice,
)
from allocator.binding import binding_state, pods_binding_state
from allocator.taints import DeviceTaintRule
from allocator.types import DeviceTaint, DeviceToleration
from tests.allocator.builders import (
    DRIVER,
    NODE,
    OTHER_DRIVER,
    allocate,
    claim,
    device_class,
    exactly,
    gpu,
    picked,
    slice_obj,
)

# ---------------------------------------------------------------------------------------- DeviceTaintRules


def rule(
    name: str, effect: str = "NoSchedule", key: str = "broken", value: str = "", **selector: str
) -> dict[str, Any]:
    taint: dict[str, Any] = {"key": key, "effect": effect}
    if value:
        taint["value"] = value
    return {
        "apiVersion": "resource.k8s.io/v1beta2",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": {"deviceSelector": dict(selector), "taint": taint},
    }


def rules(*objs: dict[str, Any]) -> TaintRules:
    out = TaintRules()
    out.replace(parse_device_taint_rule(o) for o in objs)
    return out


def test_a_rule_is_parsed_with_its_selector_and_taint() -> None:
    parsed = parse_device_taint_rule(rule("r", "NoExecute", value="v", driver=DRIVER, pool="p", device="g0"))
    assert parsed == DeviceTaintRule("r", DeviceTaint("broken", "NoExecute", "v"), DRIVER, "p", "g0")


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"deviceSelector": {}}, r"spec\.taint: required"),
        ({"taint": {"key": "k", "effect": "Sometimes"}}, r"spec\.taint\.effect: must be one of"),
        ({"taint": {"effect": "NoSchedule"}}, r"spec\.taint\.key"),
        ({"taint": {"key": "k", "effect": "NoSchedule"}, "deviceSelector": {"pool": 3}}, r"spec\.deviceSelector\.pool"),
    ],
)
def test_a_bad_rule_is_a_parse_error_naming_the_rule_and_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(ParseError, match=rf"DeviceTaintRule bad: {field}"):
        parse_device_taint_rule({"metadata": {"name": "bad"}, "spec": spec})


def test_set_selector_fields_must_all_match_and_unset_ones_match_anything() -> None:
    # upstream tracker applyPatches: driver, pool and device each narrow the rule when set.
    r = parse_device_taint_rule(rule("r", driver=DRIVER, device="g1"))
    assert r.matches(DeviceID(DRIVER, "any-pool", "g1"))
    assert not r.matches(DeviceID(DRIVER, "any-pool", "g0"))
    assert not r.matches(DeviceID("other.example.com", "any-pool", "g1"))
    assert parse_device_taint_rule(rule("all")).matches(DeviceID("x", "y", "z"))


def test_a_rule_taint_keeps_new_allocations_off_the_device() -> None:
    s = slice_obj("s", [gpu("g0"), gpu("g1")])
    tainted = rules(rule("r", pool=NODE, device="g0"))
    assert picked(allocate([s], claim(), taint_rules=tainted)) == ["g1"]
    assert allocate([slice_obj("s", [gpu("g0")])], claim(), taint_rules=tainted) == Unschedulable(
        REASON_CANNOT_ALLOCATE
    )


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        ({"key": "broken", "operator": "Exists"}, True),
        ({"operator": "Exists"}, True),  # empty key + Exists: every taint
        ({"key": "broken", "operator": "Equal", "value": "v"}, True),
        ({"key": "broken", "value": "v"}, True),  # no operator means Equal
        ({"key": "broken", "operator": "Equal", "value": "w"}, False),
        ({"key": "broken", "operator": "Exists", "effect": "NoExecute"}, False),  # another effect
        ({"key": "broken", "operator": "Exists", "effect": "NoSchedule"}, True),
        ({"key": "other", "operator": "Exists"}, False),
        ({"key": "broken", "operator": "Gt", "value": "1"}, False),  # not a device toleration operator
    ],
)
def test_tolerations_match_as_upstream_tolerates_taint(toleration: dict[str, Any], tolerated: bool) -> None:
    # upstream resourceclaim.ToleratesTaint: effect, then key, then Exists / Equal (anything else: no).
    s = slice_obj("s", [gpu("g0")])
    c = claim("c", exactly("gpu", tolerations=[toleration]))
    outcome = allocate([s], c, taint_rules=rules(rule("r", value="v")))
    assert isinstance(outcome, Allocated) is tolerated


def test_a_none_effect_rule_blocks_nothing_and_no_execute_blocks_like_no_schedule() -> None:
    s = slice_obj("s", [gpu("g0")])
    assert picked(allocate([s], claim(), taint_rules=rules(rule("r", "None")))) == ["g0"]
    assert allocate([s], claim(), taint_rules=rules(rule("r", "NoExecute"))) == Unschedulable(REASON_CANNOT_ALLOCATE)


def test_a_rule_on_an_all_request_makes_it_unschedulable_unless_tolerated() -> None:
    s = slice_obj("s", [gpu("g0"), gpu("g1")])
    blocked = rules(rule("r", device="g1"))
    assert allocate([s], claim("c", exactly("gpu", mode="All")), taint_rules=blocked) == Unschedulable(
        REASON_CANNOT_ALLOCATE
    )
    ok = claim("c", exactly("gpu", mode="All", tolerations=[{"operator": "Exists"}]))
    assert picked(allocate([s], ok, taint_rules=blocked)) == ["g0", "g1"]


def test_rules_are_kept_by_name_and_can_be_deleted() -> None:
    kept = rules(rule("a", device="g0"))
    kept.upsert(parse_device_taint_rule(rule("b", "None", device="g0")))
    assert kept.taints_for(DeviceID(DRIVER, NODE, "g0")) == (
        DeviceTaint("broken", "NoSchedule"),
        DeviceTaint("broken", "None"),
    )
    kept.delete("a")
    assert not kept  # only a None taint is left: nothing blocks
    assert picked(allocate([slice_obj("s", [gpu("g0")])], claim(), taint_rules=kept)) == ["g0"]


_TAINT = st.fixed_dictionaries(
    {"key": st.sampled_from(["a", "b"]), "effect": st.sampled_from(["None", "NoSchedule", "NoExecute"])},
    optional={"value": st.sampled_from(["x", "y"])},
)
_TOLERATION = st.fixed_dictionaries(
    {},
    optional={
        "key": st.sampled_from(["a", "b"]),
        "operator": st.sampled_from(["Exists", "Equal"]),
        "value": st.sampled_from(["x", "y"]),
        "effect": st.sampled_from(["NoSchedule", "NoExecute"]),
    },
)


@settings(max_examples=150, deadline=None)
@given(
    slice_taints=st.lists(st.lists(_TAINT, max_size=2), min_size=1, max_size=4),
    rule_taints=st.lists(st.tuples(st.integers(0, 3), _TAINT), max_size=3),
    tolerations=st.lists(_TOLERATION, max_size=2),
    count=st.integers(1, 3),
)
def test_a_device_with_an_untolerated_blocking_taint_is_never_allocated(
    slice_taints: list[list[dict[str, Any]]],
    rule_taints: list[tuple[int, dict[str, Any]]],
    tolerations: list[dict[str, Any]],
    count: int,
) -> None:
    devices = [{**gpu(f"g{i}"), "taints": taints} for i, taints in enumerate(slice_taints)]
    objs = [rule(f"r{n}", device=f"g{i}", **taint) for n, (i, taint) in enumerate(rule_taints)]
    in_force = rules(*objs)
    c = claim("c", exactly("gpu", count=count, tolerations=tolerations))
    parsed = parse_resource_slice(slice_obj("s", devices))
    tols = c.requests[0].exactly.tolerations if c.requests[0].exactly else ()

    def usable(name: str) -> bool:
        device = next(d for d in parsed.devices if d.name == name)
        every = (*device.taints, *in_force.taints_for(DeviceID(DRIVER, NODE, name)))
        return all(not t.blocks or any(tol.tolerates(t) for tol in tols) for t in every)

    assert all(isinstance(t, DeviceToleration) for t in tols)
    outcome = allocate([parsed], c, taint_rules=in_force)
    allowed = [d.name for d in parsed.devices if usable(d.name)]
    if isinstance(outcome, Allocated):
        assert all(usable(name) for name in picked(outcome))
    else:
        assert len(allowed) < count  # it only fails when too few devices are usable


# ---------------------------------------------------------------------------------------- binding conditions


def test_a_binding_condition_list_longer_than_four_is_a_parse_error() -> None:
    device = {**gpu("g0"), "bindingConditions": ["a", "b", "c", "d", "e"]}
    with pytest.raises(ParseError, match=r"spec\.devices\[0\]\.bindingConditions: must have at most 4"):
        parse_resource_slice(slice_obj("s", [device]))
    device = {**gpu("g0"), "bindingConditions": ["a"], "bindingFailureConditions": [""]}
    with pytest.raises(ParseError, match=r"spec\.devices\[0\]\.bindingFailureConditions\[0\]"):
        parse_resource_slice(slice_obj("s", [device]))


def test_pools_without_binding_conditions_are_preferred() -> None:
    # upstream 1.36: pools with a binding-condition device sort after all others (then by name).
    bc = slice_obj("s-a", [{**gpu("bc"), "bindingConditions": ["attached"]}], pool="a")
    plain = slice_obj("s-b", [gpu("plain")], pool="b")
    assert picked(allocate([bc, plain], claim())) == ["plain"]
    assert picked(allocate([bc, plain], claim("c", exactly("gpu", count=2)))) == ["plain", "bc"]


def test_a_plain_device_of_another_driver_is_preferred_to_a_binding_condition_device() -> None:
    # upstream 1.36 puts binding-condition pools after the plain pools of every driver, not per driver:
    # a class that accepts both drivers gets the other driver's plain device first.
    both = device_class("any-gpu", f'device.driver in ["{DRIVER}", "{OTHER_DRIVER}"]')
    bc = slice_obj("s-a", [{**gpu("bc"), "bindingConditions": ["attached"]}], pool="a", driver=DRIVER)
    plain = slice_obj("s-b", [gpu("plain")], pool="b", driver=OTHER_DRIVER)
    request = exactly("gpu", device_class_name="any-gpu")
    assert picked(allocate([bc, plain], claim("c", request), classes=[both])) == ["plain"]
    two = exactly("gpu", device_class_name="any-gpu", count=2)
    assert picked(allocate([bc, plain], claim("c", two), classes=[both])) == ["plain", "bc"]


def allocated_claim(results: list[dict[str, Any]], devices: list[dict[str, Any]] | None = None) -> Any:
    status: dict[str, Any] = {"allocation": {"devices": {"results": results}}}
    if devices is not None:
        status["devices"] = devices
    return parse_resource_claim(
        {"metadata": {"name": "c", "namespace": "ns", "uid": "u"}, "spec": {"devices": {}}, "status": status}
    )


def result(device: str = "g0", conditions: tuple[str, ...] = ("attached",), failures: tuple[str, ...] = ("failed",)):
    out: dict[str, Any] = {"request": "gpu", "driver": DRIVER, "pool": "p", "device": device}
    if conditions:
        out["bindingConditions"] = list(conditions)
    if failures:
        out["bindingFailureConditions"] = list(failures)
    return out


def status(device: str = "g0", pool: str = "p", **conditions: str) -> dict[str, Any]:
    return {
        "driver": DRIVER,
        "pool": pool,
        "device": device,
        "conditions": [{"type": t, "status": s, "reason": "R", "message": "m"} for t, s in conditions.items()],
    }


def test_a_claim_is_ready_only_when_every_binding_condition_is_true() -> None:
    # upstream isClaimReadyForBinding
    assert binding_state(allocated_claim([result()], [status(attached="True")])).ready
    pending = binding_state(allocated_claim([result()], [status(attached="False")]))
    assert not pending.ready and not pending.failed and pending.pending == (f"ns/c: {DRIVER}/p/g0 attached",)
    assert not binding_state(allocated_claim([result()])).ready  # no status for the device yet
    assert not binding_state(allocated_claim([result()], [status(pool="q", attached="True")])).ready  # another pool


def test_a_true_failure_condition_fails_binding_even_when_the_conditions_are_true() -> None:
    state = binding_state(allocated_claim([result()], [status(attached="True", failed="True")]))
    assert state.failed.startswith(f"ns/c: {DRIVER}/p/g0: binding failed: failed is True")
    assert "reason='R'" in state.failed


def test_results_without_binding_conditions_need_nothing() -> None:
    plain, bc = result("g0", conditions=(), failures=()), result("g1")
    claim_obj = allocated_claim([plain, bc], [status("g1", attached="True")])
    assert binding_state(claim_obj).ready
    # upstream reads failure conditions only of results that have binding conditions
    quiet = allocated_claim([result("g0", conditions=(), failures=("failed",))], [status("g0", failed="True")])
    assert binding_state(quiet).ready


def test_a_pod_is_ready_when_all_its_claims_are_and_fails_on_the_first_failure() -> None:
    ready = allocated_claim([result()], [status(attached="True")])
    waiting = allocated_claim([result()], [])
    failed = allocated_claim([result()], [status(failed="True")])
    assert pods_binding_state([ready, ready]).ready
    assert pods_binding_state([ready, waiting]).pending
    assert pods_binding_state([waiting, failed]).failed


def test_a_bad_device_status_is_a_parse_error_naming_the_field() -> None:
    with pytest.raises(ParseError, match=r"status\.devices\[0\]\.conditions\[0\]\.status: required"):
        allocated_claim([result()], [{"driver": DRIVER, "pool": "p", "device": "g0", "conditions": [{"type": "a"}]}])
