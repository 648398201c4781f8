"""Binding conditions in /bind and device taints in /filter, through the service verbs (snapshot mode).

Node d1 publishes one GPU "att-0" whose binding needs the condition "attached" (and fails on
"failed"); /bind writes the allocation, then waits on the claim watch (here: claims the test stores
in the cache, as the watch would) until the conditions settle or ``dra.bindingTimeoutSeconds``
passes (upstream DynamicResources PreBind).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest

from allocator.types import AllocatedDeviceStatus, DeviceCondition
from app.cluster.objects import pod_from_obj, taint_rule_from_obj
from app.config import ConfigError, parse_config
from tests.conftest import (
    DRIVER,
    bind_body,
    claim_obj,
    device_class_obj,
    filter_body,
    gpu_device,
    make_service,
    node_obj,
    pod_obj,
    slice_obj,
    with_claims,
)
from tests.conftest import filter_answer as wire_answer

CLAIM = "default/c"


def attachable(name: str) -> dict[str, Any]:
    return {**gpu_device(name), "bindingConditions": ["attached"], "bindingFailureConditions": ["failed"]}


def service_with(devices: list[dict[str, Any]], timeout: float = 5.0) -> Any:
    nodes = [node_obj("d1", gpus=None)]
    dra = [device_class_obj(), slice_obj("d1-gpus", devices, node="d1"), claim_obj("c")]
    return make_service(nodes, dra=dra, config={"dra": {"bindingTimeoutSeconds": timeout}})


def pod() -> dict[str, Any]:
    return with_claims(pod_obj("p"), "c")


async def bind_while(service: Any, conditions: dict[str, str] | None) -> dict[str, Any]:
    """Start /bind; once the allocation is written, set the device's ``conditions`` (None: never)."""
    p = pod()
    service.cache.upsert_pod(pod_from_obj(p))
    task = asyncio.create_task(service.bind(bind_body(p, "d1")))
    state = service.cache.dra
    while state.claims[CLAIM].allocation is None:
        await state.claim_changes.changed_after(state.claim_changes.version, 5.0)
    written = state.claims[CLAIM]
    assert written.allocation is not None and written.allocation.allocation_timestamp is not None
    if conditions is not None:
        r = written.allocation.results[0]
        device = AllocatedDeviceStatus(
            r.driver, r.pool, r.device, conditions=tuple(DeviceCondition(t, s, "Driver") for t, s in conditions.items())
        )
        version = str(int(written.resource_version) + 1)
        assert state.upsert_claim(replace(written, resource_version=version, device_statuses=(device,)))
    result: dict[str, Any] = await task
    return result


def test_the_pod_binds_once_every_binding_condition_is_true() -> None:
    service = service_with([attachable("att-0")])
    answer = asyncio.run(bind_while(service, {"attached": "True"}))
    assert answer["Error"] == ""
    assert [(key, node) for key, _, node in service.binder.bindings] == [("default/p", "d1")]
    claim = service.cache.dra.claims[CLAIM]
    assert claim.allocation is not None and [r.device for r in claim.allocation.results] == ["att-0"]
    assert claim.allocation.results[0].binding_conditions == ("attached",)


def test_a_failure_condition_undoes_the_allocation_and_answers_an_error() -> None:
    service = service_with([attachable("att-0")])
    answer = asyncio.run(bind_while(service, {"attached": "False", "failed": "True"}))
    assert "binding failed: failed is True" in answer["Error"]
    assert service.binder.bindings == []
    claim = service.cache.dra.claims[CLAIM]
    assert claim.allocation is None and claim.reserved_for == () and claim.device_statuses == ()
    assert service.cache.dra.inflight == {}
    service.cache.dra.check_invariants()


def test_conditions_that_never_become_true_time_out_and_free_the_device() -> None:
    service = service_with([attachable("att-0")], timeout=0.05)
    answer = asyncio.run(bind_while(service, None))
    assert "not met within 0.05s (dra.bindingTimeoutSeconds)" in answer["Error"]
    assert f"{DRIVER}/d1/att-0 attached" in answer["Error"]
    assert service.binder.bindings == []
    assert service.cache.dra.claims[CLAIM].allocation is None
    # The device is free again: the pod passes filter on d1 once more.
    assert wire_answer(service, filter_body(pod(), ["d1"]))["NodeNames"] == ["d1"]


def test_a_device_without_binding_conditions_is_preferred_and_binds_at_once() -> None:
    # Pools with binding conditions come last (upstream), so the plain GPU of pool "z" wins over "a".
    nodes = [node_obj("d1", gpus=None)]
    dra = [
        device_class_obj(),
        slice_obj("a-gpus", [attachable("att-0")], node="d1", pool="a"),
        slice_obj("z-gpus", [gpu_device("plain-0")], node="d1", pool="z"),
        claim_obj("c"),
    ]
    service = make_service(nodes, dra=dra, config={"dra": {"bindingTimeoutSeconds": 0.01}})
    p = pod()
    service.cache.upsert_pod(pod_from_obj(p))
    assert asyncio.run(service.bind(bind_body(p, "d1")))["Error"] == ""
    claim = service.cache.dra.claims[CLAIM]
    assert claim.allocation is not None and claim.allocation.results[0].device == "plain-0"
    assert claim.allocation.allocation_timestamp is None  # stamped only where binding conditions read it


@pytest.mark.parametrize("value", [0, -1, 601, "soon"])
def test_a_bad_binding_timeout_is_a_config_error_naming_the_field(value: Any) -> None:
    with pytest.raises(ConfigError, match=r"dra\.bindingTimeoutSeconds"):
        parse_config({"dra": {"bindingTimeoutSeconds": value}})


def test_the_default_binding_timeout_is_below_the_shipped_http_timeout() -> None:
    assert 0 < parse_config({}).dra.bindingTimeoutSeconds < 5.0  # deploy/kube-scheduler-config.yaml: 5s


# ---------------------------------------------------------------------------------------- device taints


def taint_rule(name: str, device: str, effect: str = "NoSchedule") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1beta2",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": {"deviceSelector": {"driver": DRIVER, "device": device}, "taint": {"key": "bad", "effect": effect}},
    }


def explained_device(service: Any, claim_pod: dict[str, Any]) -> Any:
    view = service.explain(filter_body(claim_pod, ["d1"]))
    return view["nodes"][0]["dra"]


def test_a_device_taint_rule_moves_new_allocations_to_other_devices() -> None:
    service = service_with([gpu_device("gpu-0"), gpu_device("gpu-1")])
    assert explained_device(service, pod())["devices"][CLAIM][0]["device"] == "gpu-0"
    service.cache.dra.upsert_taint_rule(taint_rule_from_obj(taint_rule("r", "gpu-0")))
    assert explained_device(service, pod())["devices"][CLAIM][0]["device"] == "gpu-1"
    service.cache.dra.upsert_taint_rule(taint_rule_from_obj(taint_rule("r2", "gpu-1", "NoExecute")))
    answer = wire_answer(service, filter_body(pod(), ["d1"]))
    assert answer["NodeNames"] == [] and "d1" in answer["FailedAndUnresolvableNodes"]
    service.cache.dra.delete_taint_rule("r")
    assert explained_device(service, pod())["devices"][CLAIM][0]["device"] == "gpu-0"


def test_a_tainted_device_in_the_slice_is_skipped_but_already_allocated_claims_keep_it() -> None:
    tainted = {**gpu_device("gpu-0"), "taints": [{"key": "bad", "effect": "NoSchedule"}]}
    service = service_with([tainted, gpu_device("gpu-1")])
    assert explained_device(service, pod())["devices"][CLAIM][0]["device"] == "gpu-1"
    p = pod()
    service.cache.upsert_pod(pod_from_obj(p))
    assert asyncio.run(service.bind(bind_body(p, "d1")))["Error"] == ""
    # A later rule on the allocated device changes nothing for the claim (eviction is not ours).
    service.cache.dra.upsert_taint_rule(taint_rule_from_obj(taint_rule("r", "gpu-1", "NoExecute")))
    claim = service.cache.dra.claims[CLAIM]
    assert claim.allocation is not None and claim.allocation.results[0].device == "gpu-1"
    assert wire_answer(service, filter_body(pod(), ["d1"]))["NodeNames"] == ["d1"]  # allocated: only its selector


def test_debug_shows_a_bind_waiting_for_its_binding_conditions() -> None:
    """While /bind waits, /debug names the pod, its node, the claim and the condition still pending;
    once the condition is True and the pod bound, the entry is gone."""
    from app.operator.debug import debug_view

    service = service_with([attachable("att-0")])
    seen: list[Any] = []

    async def scenario() -> dict[str, Any]:
        p = pod()
        service.cache.upsert_pod(pod_from_obj(p))
        task = asyncio.create_task(service.bind(bind_body(p, "d1")))
        state = service.cache.dra
        while state.claims[CLAIM].allocation is None:
            await state.claim_changes.changed_after(state.claim_changes.version, 5.0)
        for _ in range(100):  # the bind task registers its wait before it first awaits the watch
            if service.binding_waits():
                break
            await asyncio.sleep(0)
        seen.extend(debug_view(service, include_nodes=False)["draBindingConditionsPending"])
        written = state.claims[CLAIM]
        assert written.allocation is not None
        r = written.allocation.results[0]
        device = AllocatedDeviceStatus(
            r.driver, r.pool, r.device, conditions=(DeviceCondition("attached", "True", "D"),)
        )
        version = str(int(written.resource_version) + 1)
        assert state.upsert_claim(replace(written, resource_version=version, device_statuses=(device,)))
        result: dict[str, Any] = await task
        return result

    assert asyncio.run(scenario())["Error"] == ""
    (wait,) = seen
    assert wait["pod"] == "default/p" and wait["node"] == "d1" and wait["claims"] == [CLAIM]
    assert wait["pending"] == [f"{CLAIM}: {DRIVER}/d1/att-0 attached"]
    assert wait["timeoutSeconds"] == 5.0 and wait["waitingSeconds"] >= 0
    assert debug_view(service, include_nodes=False)["draBindingConditionsPending"] == []
