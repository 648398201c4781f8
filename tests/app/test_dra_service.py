"""DRA through the service verbs (snapshot mode: claim writes applied in memory).

The cluster: nodes d1 and d2 each publish a node-local pool of GPUs with 10Gi, 24Gi, 48Gi and 80Gi
of memory (in that order); c1 has no devices. Expected devices are derived from the KEP-5773
first-fit rule: the first free device, in pool/slice/device order, that every selector accepts.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from app.cluster.objects import pod_from_obj
from app.cluster.writes import BindError, ClaimWriteError
from app.operator.debug import debug_view
from app.pipeline.claims import DraClaims
from scoring.framework import Status
from tests.conftest import (
    bind_body,
    claim_obj,
    device_class_obj,
    filter_body,
    gpu_device,
    make_service,
    memory_at_least,
    node_obj,
    pod_obj,
    slice_obj,
    with_claims,
)
from tests.conftest import (
    bind_pod as bind,
)
from tests.conftest import filter_answer as wire_answer

MEMORIES = ("10Gi", "24Gi", "48Gi", "80Gi")


def node_slices(node: str) -> dict[str, Any]:
    return slice_obj(f"{node}-gpus", [gpu_device(f"gpu-{i}", m) for i, m in enumerate(MEMORIES)], node=node)


def cluster(*claims: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    nodes = [node_obj("d1", gpus=None), node_obj("d2", gpus=None), node_obj("c1", gpus=None)]
    dra = [device_class_obj(), node_slices("d1"), node_slices("d2"), *claims]
    return nodes, dra


def filter_answer(service: Any, pod: dict[str, Any], names: list[str] = ["d1", "d2", "c1"]) -> dict[str, Any]:  # noqa: B006
    return wire_answer(service, filter_body(pod, names))


def devices_of(service: Any, key: str) -> list[str]:
    claim = service.cache.dra.claims[key]
    assert claim.allocation is not None, f"{key} is not allocated"
    return [f"{r.pool}/{r.device}" for r in claim.allocation.devices]


def test_filter_passes_nodes_that_can_allocate_and_refuses_the_rest() -> None:
    nodes, dra = cluster(claim_obj("big", selector=memory_at_least("40Gi")))
    service = make_service(nodes, dra=dra)
    answer = filter_answer(service, with_claims(pod_obj("p", cpu="1"), "big"))
    assert answer["Error"] == ""
    assert answer["NodeNames"] == ["d1", "d2"]
    assert list(answer["FailedAndUnresolvableNodes"]) == ["c1"]  # no device at all there
    assert answer["FailedNodes"] == {}


def test_explain_shows_the_smallest_fitting_gpu_per_node() -> None:
    nodes, dra = cluster(claim_obj("mid", selector=memory_at_least("20Gi")))
    service = make_service(nodes, dra=dra)
    pod = with_claims(pod_obj("p"), "mid")
    view = service.explain(filter_body(pod, ["d1", "c1"]))
    by_node = {n["name"]: n for n in view["nodes"]}
    # 10Gi is too small; 24Gi is the first that fits in publication order.
    assert by_node["d1"]["dra"]["devices"] == {
        "default/mid": [{"request": "gpu", "driver": "gpu.example.com", "pool": "d1", "device": "gpu-1"}]
    }
    assert by_node["c1"]["dra"]["passed"] is False


def test_missing_claim_refuses_every_node_with_the_reason() -> None:
    nodes, dra = cluster()
    service = make_service(nodes, dra=dra)
    answer = filter_answer(service, with_claims(pod_obj("p"), "nowhere"))
    assert answer["NodeNames"] == []
    assert set(answer["FailedAndUnresolvableNodes"].values()) == {"waiting for resourceclaim 'nowhere' to be created"}


def test_template_claim_not_created_yet_refuses_every_node() -> None:
    nodes, dra = cluster()
    service = make_service(nodes, dra=dra)
    pod = pod_obj("p")
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    answer = filter_answer(service, pod)
    assert set(answer["FailedAndUnresolvableNodes"].values()) == {
        "waiting for the ResourceClaim of pod claim 'gpu' to be created"
    }


def test_generated_claim_must_belong_to_the_pod() -> None:
    claim = claim_obj("p-gpu-x1")
    nodes, dra = cluster(claim)
    service = make_service(nodes, dra=dra)
    pod = pod_obj("p")
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    pod["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": "p-gpu-x1"}]
    answer = filter_answer(service, pod)
    assert set(answer["FailedAndUnresolvableNodes"].values()) == {
        "resourceclaim 'p-gpu-x1' was not created for this pod"
    }
    # Owned by the pod: it is the pod's claim and is allocated normally.
    owned = claim_obj("p-gpu-x1", uid=claim["metadata"]["uid"])
    owned["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": pod["metadata"]["uid"], "controller": True}
    ]
    nodes, dra = cluster(owned)
    service = make_service(nodes, dra=dra)
    assert filter_answer(service, pod)["NodeNames"] == ["d1", "d2"]


def test_bind_writes_the_claim_and_the_next_pod_gets_the_next_device() -> None:
    nodes, dra = cluster(claim_obj("first"), claim_obj("second"))
    service = make_service(nodes, dra=dra)
    first, second = with_claims(pod_obj("a"), "first"), with_claims(pod_obj("b"), "second")
    assert filter_answer(service, first)["NodeNames"] == ["d1", "d2"]
    assert bind(service, first, "d1") == {"Error": ""}
    claim = service.cache.dra.claims["default/first"]
    assert devices_of(service, "default/first") == ["d1/gpu-0"]
    assert [(r.resource, r.name, r.uid) for r in claim.reserved_for] == [("pods", "a", first["metadata"]["uid"])]
    assert "resource.kubernetes.io/delete-protection" in claim.finalizers
    # Node-local devices: the allocation is pinned to d1.
    assert service.cache.pods[first["metadata"]["uid"]].node_name == "d1"
    assert service.claim_writer.writes == [("default/first", "finalizer"), ("default/first", "status")]
    # gpu-0 of d1 is taken now: the second pod gets gpu-1 there.
    assert bind(service, second, "d1") == {"Error": ""}
    assert devices_of(service, "default/second") == ["d1/gpu-1"]
    service.cache.check_invariants()


def test_allocated_claim_only_needs_its_node_selector_and_a_reservation() -> None:
    nodes, dra = cluster(claim_obj("shared"))
    service = make_service(nodes, dra=dra)
    a, b = with_claims(pod_obj("a"), "shared"), with_claims(pod_obj("b"), "shared")
    assert bind(service, a, "d2") == {"Error": ""}
    # b shares the claim: only d2, where its devices are, can run it.
    answer = filter_answer(service, b)
    assert answer["NodeNames"] == ["d2"]
    assert answer["FailedAndUnresolvableNodes"] == {
        "d1": "resourceclaim not available on the node",
        "c1": "resourceclaim not available on the node",
    }
    assert bind(service, b, "d2") == {"Error": ""}
    claim = service.cache.dra.claims["default/shared"]
    assert [r.name for r in claim.reserved_for] == ["a", "b"]
    assert devices_of(service, "default/shared") == ["d2/gpu-0"]  # allocated once, not again


def test_bind_reuses_the_filter_proposal_and_decides_again_when_it_went_stale() -> None:
    nodes, dra = cluster(
        claim_obj("x", selector=memory_at_least("40Gi")), claim_obj("y", selector=memory_at_least("40Gi"))
    )
    service = make_service(nodes, dra=dra)
    px, py = with_claims(pod_obj("px"), "x"), with_claims(pod_obj("py"), "y")
    filter_answer(service, px)
    filter_answer(service, py)  # both proposals name d1/gpu-2 (48Gi)
    assert bind(service, px, "d1") == {"Error": ""}
    assert devices_of(service, "default/x") == ["d1/gpu-2"]
    assert bind(service, py, "d1") == {"Error": ""}  # its proposal is taken: the next fitting device
    assert devices_of(service, "default/y") == ["d1/gpu-3"]


def test_no_device_left_fails_bind_and_leaves_nothing_behind() -> None:
    nodes, dra = cluster(
        claim_obj("x", selector=memory_at_least("60Gi")), claim_obj("y", selector=memory_at_least("60Gi"))
    )
    service = make_service(nodes, dra=dra)
    px, py = with_claims(pod_obj("px"), "x"), with_claims(pod_obj("py"), "y")
    assert bind(service, px, "d1") == {"Error": ""}
    answer = bind(service, py, "d1")
    assert "cannot take the claims" in answer["Error"]
    assert service.cache.dra.claims["default/y"].allocation is None
    assert py["metadata"]["uid"] not in service.cache.ledger  # the pod's assumption was dropped too
    assert not service.cache.dra.inflight
    service.cache.check_invariants()


def test_concurrent_binds_never_share_a_device() -> None:
    """Two binds interleave at the claim write; the second must see the first's devices in flight."""
    nodes, dra = cluster(
        claim_obj("x", selector=memory_at_least("60Gi")), claim_obj("y", selector=memory_at_least("60Gi"))
    )
    service = make_service(nodes, dra=dra)
    writer = service.claim_writer
    real_allocate = writer.allocate
    px, py = with_claims(pod_obj("px"), "x"), with_claims(pod_obj("py"), "y")
    service.cache.replace_pods([pod_from_obj(px), pod_from_obj(py)])  # both pending, from the pod watch

    async def both() -> list[dict[str, Any]]:
        reached, gate = asyncio.Event(), asyncio.Event()

        async def slow_allocate(*args: Any) -> Any:
            reached.set()
            await gate.wait()  # hold the first write until the second bind has decided
            return await real_allocate(*args)

        writer.allocate = slow_allocate
        first = asyncio.create_task(service.bind(bind_body(px, "d1")))
        await asyncio.wait_for(reached.wait(), timeout=30)  # a bound on failure, not a sync
        assert service.cache.dra.inflight, "the first bind counts its devices before writing"
        second = asyncio.create_task(service.bind(bind_body(py, "d1")))
        result_second = await second  # decides while the first is in flight: no 80Gi GPU left
        gate.set()
        return [await first, result_second]

    first, second = asyncio.run(both())
    assert first == {"Error": ""}
    assert "cannot take the claims" in second["Error"]
    assert devices_of(service, "default/x") == ["d1/gpu-3"]
    assert service.cache.dra.claims["default/y"].allocation is None
    service.cache.check_invariants()


def test_failed_binding_rolls_the_claims_back() -> None:
    nodes, dra = cluster(claim_obj("x"))
    service = make_service(nodes, dra=dra)
    pod = with_claims(pod_obj("p"), "x")
    filter_answer(service, pod)

    class Refusing:
        async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
            raise BindError(f'pods "{name}" not found', kind="not-found")

    service.binder = Refusing()
    answer = bind(service, pod, "d1")
    assert "not found" in answer["Error"]
    claim = service.cache.dra.claims["default/x"]
    assert claim.allocation is None and not claim.reserved_for and not claim.finalizers
    assert service.cache.dra.allocated_view().claimed == {}
    service.cache.check_invariants()


def test_a_failed_claim_write_undoes_the_earlier_ones() -> None:
    nodes, dra = cluster(claim_obj("one"), claim_obj("two"))
    service = make_service(nodes, dra=dra)
    writer = service.claim_writer
    real_allocate = writer.allocate

    async def refuse_second(claim: Any, allocation: Any, pod: Any) -> Any:
        if claim.name == "two":
            raise ClaimWriteError("resourceclaim default/two: write status: 422 Invalid")
        return await real_allocate(claim, allocation, pod)

    writer.allocate = refuse_second
    pod = with_claims(pod_obj("p"), "one", "two")
    answer = bind(service, pod, "d1")
    assert "writing the claims" in answer["Error"] and "422" in answer["Error"]
    for key in ("default/one", "default/two"):
        claim = service.cache.dra.claims[key]
        assert claim.allocation is None and not claim.reserved_for and not claim.finalizers
    assert pod["metadata"]["uid"] not in service.cache.ledger
    assert not service.cache.dra.inflight
    assert not service.cache.pods[pod["metadata"]["uid"]].node_name  # never bound
    service.cache.check_invariants()


def test_dra_disabled_leaves_claims_to_the_scheduler() -> None:
    nodes, dra = cluster()
    service = make_service(nodes, dra=dra, config={"dra": {"enabled": False}})
    answer = filter_answer(service, with_claims(pod_obj("p"), "nowhere"))
    assert answer["NodeNames"] == ["d1", "d2", "c1"]


@pytest.mark.parametrize("mode", ["names", "nodelist"])
def test_http_filter_for_a_dra_pod(mode: str, client_for: Any) -> None:
    nodes, dra = cluster(claim_obj("x"))
    service = make_service(nodes, dra=dra)
    client = client_for(service)
    pod = with_claims(pod_obj("p"), "x")
    if mode == "names":
        body = filter_body(pod, ["d1", "c1"])
    else:
        body = json.dumps({"Pod": pod, "Nodes": {"items": [nodes[0], nodes[2]]}, "NodeNames": None}).encode()
    answer = client.post("/filter", content=body).json()
    passed = answer["NodeNames"] if mode == "names" else [n["metadata"]["name"] for n in answer["Nodes"]["items"]]
    assert passed == ["d1"]
    assert list(answer["FailedAndUnresolvableNodes"]) == ["c1"]


def test_debug_shows_pools_in_allocation_order_holders_and_in_flight() -> None:
    """Pool priority 5 beats 0 although its name sorts later; holders come from claims and in-flight binds."""
    nodes = [node_obj("d1", gpus=None)]
    low = slice_obj("a-low", [gpu_device("g0", "80Gi")], node="d1", pool="a-low", pool_priority=0)
    high = slice_obj(
        "z-high", [gpu_device("g0", "10Gi"), gpu_device("g1", "24Gi")], node="d1", pool="z-high", pool_priority=5
    )
    service = make_service(nodes, dra=[device_class_obj(), low, high, claim_obj("x"), claim_obj("y")])
    px = with_claims(pod_obj("px"), "x")
    assert bind(service, px, "d1") == {"Error": ""}
    view = debug_view(service)
    dra = view["nodes"]["d1"]["dra"]
    assert [(p["pool"], p["priority"]) for p in dra["pools"]] == [("z-high", 5), ("a-low", 0)]
    first = dra["pools"][0]["slices"][0]["devices"]
    assert first[0] == {"name": "g0", "holder": "claim default/x", "capacity": {"memory": "10Gi"}}
    assert first[1]["holder"] is None
    assert (dra["freeDevices"], dra["allocatedDevices"]) == (2, 1)
    assert view["draInFlight"] == []
    # A bind in flight shows up with its devices until its claim write lands.
    py = with_claims(pod_obj("py"), "y")
    service.cache.upsert_pod(pod_from_obj(py))
    participant = service.pipeline.get(DraClaims)
    assert participant is not None
    claims = participant.dra.prefilter(service.cache.pods[py["metadata"]["uid"]])
    assert not isinstance(claims, Status)
    reservation = participant.dra.reserve(service.cache.pods[py["metadata"]["uid"]], "d1")
    assert not isinstance(reservation, Status)
    view = debug_view(service)
    assert [(e["pod"], e["devices"]) for e in view["draInFlight"]] == [("default/py", ["gpu.example.com/z-high/g1"])]
    assert view["nodes"]["d1"]["dra"]["pools"][0]["slices"][0]["devices"][1]["holder"] == "in flight for pod default/py"
