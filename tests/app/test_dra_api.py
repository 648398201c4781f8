"""DRA against the fake API server over real HTTP: watches of classes, claims and slices, the bind's
write order (finalizer, status, Binding) and its rollback."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from app.cluster.binding import FINALIZER, ApiClaimWriter
from app.cluster.reflector import DEVICE_TAINT_RULES_NOT_SERVED
from app.cluster.writes import ClaimWriteError
from app.pipeline.claims import DraClaims
from app.pipeline.dynamicresources import Reservation
from tests.app.apiharness import Harness, add_dra_node, eventually
from tests.app.apiharness import run as run_harness
from tests.conftest import bind_body, claim_obj, filter_answer, filter_body, pod_obj, slice_obj, with_claims
from tests.fakeapi import FakeAPIServer

CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"


def setup_cluster(fake: FakeAPIServer, *claims: str) -> None:
    """Node d1 whose two GPUs differ in memory (24Gi, 80Gi), with ``claims`` pending."""
    add_dra_node(fake, *claims, memory=("24Gi", "80Gi"))


def run(fake: FakeAPIServer, body: Callable[[Harness], Awaitable[None]]) -> Harness:
    """The harness, with ``body`` starting after the initial sync."""
    return run_harness(fake, body, synced=True)


def test_bind_writes_finalizer_then_status_then_binding(fake: FakeAPIServer) -> None:
    setup_cluster(fake, "x")
    pod = fake.add(with_claims(pod_obj("p"), "x"))

    async def body(h: Harness) -> None:
        assert filter_answer(h.service, filter_body(pod, ["d1"]))["NodeNames"] == ["d1"]
        start = len(fake.requests)
        assert await h.service.bind(bind_body(pod, "d1")) == {"Error": ""}
        writes = [(m, path) for m, path in fake.requests[start:] if m != "GET"]
        assert writes == [
            ("PUT", f"{CLAIMS}/x"),
            ("PUT", f"{CLAIMS}/x/status"),
            ("POST", "/api/v1/namespaces/default/pods/p/binding"),
        ]
        claim = h.claim("x")
        assert claim["metadata"]["finalizers"] == [FINALIZER]
        assert claim["status"]["allocation"]["devices"]["results"] == [
            {"request": "gpu", "driver": "gpu.example.com", "pool": "d1", "device": "gpu-0"}
        ]
        assert claim["status"]["allocation"]["nodeSelector"] == {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["d1"]}]}]
        }
        assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "p", "uid": pod["metadata"]["uid"]}]
        # The watch brings the same claim back; the device stays allocated exactly once.
        await eventually(
            lambda: h.cache.dra.claims["default/x"].resource_version == claim["metadata"]["resourceVersion"],
            "claim watched",
        )
        assert not h.cache.dra.inflight

    run(fake, body)


def test_binding_refused_rolls_back_the_claim(fake: FakeAPIServer) -> None:
    setup_cluster(fake, "x")
    pod = fake.add(with_claims(pod_obj("p"), "x"))

    async def body(h: Harness) -> None:
        filter_answer(h.service, filter_body(pod, ["d1"]))
        fake.fail_next(1, 403, path_contains="/binding")
        answer = await h.service.bind(bind_body(pod, "d1"))
        assert "403" in answer["Error"]
        claim = h.claim("x")
        assert "allocation" not in claim.get("status", {})
        assert not claim["status"].get("reservedFor")
        assert FINALIZER not in claim["metadata"].get("finalizers", [])
        assert h.cache.dra.claims["default/x"].allocation is None
        assert not h.cache.dra.inflight and pod["metadata"]["uid"] not in h.cache.ledger
        # The retry succeeds and allocates the same device.
        assert await h.service.bind(bind_body(pod, "d1")) == {"Error": ""}
        assert h.claim("x")["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-0"

    run(fake, body)


def test_status_conflict_is_retried_from_a_fresh_read(fake: FakeAPIServer) -> None:
    setup_cluster(fake, "x")
    pod = fake.add(with_claims(pod_obj("p"), "x"))

    async def body(h: Harness) -> None:
        filter_answer(h.service, filter_body(pod, ["d1"]))
        fake.fail_next(1, 409, path_contains="/resourceclaims/x/status")
        assert await h.service.bind(bind_body(pod, "d1")) == {"Error": ""}
        status_writes = [p for m, p in fake.requests if m == "PUT" and p.endswith("/x/status")]
        assert len(status_writes) == 2
        assert h.claim("x")["status"]["reservedFor"][0]["name"] == "p"

    run(fake, body)


def _to_write(h: Harness, pod: Any, node: str) -> Any:
    """The allocation /bind would write for the pod's one claim on ``node`` (reserve, then given back)."""
    dra = h.service.pipeline.get(DraClaims).dra
    reservation = dra.reserve(pod, node)
    assert isinstance(reservation, Reservation)
    dra.state.end(pod.uid)
    [(_, allocation)] = reservation.allocate
    return allocation


def test_claim_allocated_by_someone_else_meanwhile_is_not_overwritten(fake: FakeAPIServer) -> None:
    setup_cluster(fake, "x")
    pod = fake.add(with_claims(pod_obj("p"), "x"))

    async def body(h: Harness) -> None:
        filter_answer(h.service, filter_body(pod, ["d1"]))
        cached = h.cache.dra.claims["default/x"]
        proposal = _to_write(h, h.service._pending[pod["metadata"]["uid"]], "d1")
        # Another scheduler allocates the claim after our cache last saw it.
        stolen = h.claim("x")
        result = {"request": "gpu", "driver": "gpu.example.com", "pool": "d1", "device": "gpu-1"}
        stolen["status"] = {"allocation": {"devices": {"results": [result]}}}
        fake.update(stolen)
        start = len(fake.updates)
        with pytest.raises(ClaimWriteError, match="allocated meanwhile"):
            await ApiClaimWriter(h.client).allocate(cached, proposal, h.service._pending[pod["metadata"]["uid"]])
        assert fake.updates[start:] == []
        assert h.claim("x")["status"]["allocation"]["devices"]["results"] == [result]

    run(fake, body)


def test_watched_slices_and_claims_drive_the_filter(fake: FakeAPIServer) -> None:
    setup_cluster(fake, "x", "y")
    px = fake.add(with_claims(pod_obj("px"), "x"))
    py = fake.add(with_claims(pod_obj("py"), "y"))

    async def body(h: Harness) -> None:
        await asyncio.to_thread(fake.wait_for_watchers, 5)
        assert await h.service.bind(bind_body(px, "d1")) == {"Error": ""}
        # A second claim takes the other device; then the driver withdraws the slice.
        assert await h.service.bind(bind_body(py, "d1")) == {"Error": ""}
        fake.add(claim_obj("z"))
        pz = fake.add(with_claims(pod_obj("pz"), "z"))
        await eventually(lambda: "default/z" in h.cache.dra.claims, "claim z watched")
        answer = filter_answer(h.service, filter_body(pz, ["d1"]))
        assert answer["NodeNames"] == [] and "d1" in answer["FailedAndUnresolvableNodes"]
        fake.delete("ResourceClaim", "x", "default")  # px's claim is gone: its device is free again
        await eventually(lambda: "default/x" not in h.cache.dra.claims, "claim x deletion watched")
        assert filter_answer(h.service, filter_body(pz, ["d1"]))["NodeNames"] == ["d1"]
        fake.delete("ResourceSlice", "d1-gpus")
        await eventually(lambda: len(h.cache.dra.slices) == 0, "slice deletion watched")
        assert filter_answer(h.service, filter_body(pz, ["d1"]))["NodeNames"] == []

    run(fake, body)


def test_release_recognises_our_allocation_when_the_server_added_fields(fake: FakeAPIServer) -> None:
    """Our allocation is found by its devices, not byte equality: extra fields do not leak it."""
    setup_cluster(fake, "x")
    pod = fake.add(with_claims(pod_obj("p"), "x"))

    async def body(h: Harness) -> None:
        filter_answer(h.service, filter_body(pod, ["d1"]))
        info = h.service._pending[pod["metadata"]["uid"]]
        proposal = _to_write(h, info, "d1")
        writer = ApiClaimWriter(h.client)
        stored = await writer.allocate(h.cache.dra.claims["default/x"], proposal, info)
        annotated = h.claim("x")
        annotated["status"]["allocation"]["allocationTimestamp"] = "2026-11-23T07:00:00Z"
        fake.update(annotated)
        released = await writer.release(stored, info, proposal)
        assert released is not None and released.allocation is None and not released.reserved_for
        claim = h.claim("x")
        assert "allocation" not in claim["status"] and FINALIZER not in claim["metadata"].get("finalizers", [])

    run(fake, body)


def test_device_taint_rules_not_served_count_as_synced_and_empty(fake: FakeAPIServer) -> None:
    # The fake API server does not serve resource.k8s.io/v1beta2 (DRADeviceTaintRules is off by
    # default in 1.36): the optional watch answers 404, the extender is ready, and no rule applies.
    add_dra_node(fake, "c1")

    async def body(h: Harness) -> None:
        await eventually(lambda: h.service.not_ready_reason() == "", "ready without devicetaintrules")
        state = h.cache.source("devicetaintrules")
        assert state.synced and state.last_error == DEVICE_TAINT_RULES_NOT_SERVED
        assert ("GET", "/apis/resource.k8s.io/v1beta2/devicetaintrules") in {
            (method, target.split("?")[0]) for method, target in fake.requests
        }
        assert len(h.cache.dra.taint_rules) == 0

    run(fake, body)


def test_objects_beyond_the_136_limits_are_skipped(fake: FakeAPIServer, caplog: pytest.LogCaptureFixture) -> None:
    """A slice with 129 devices (ResourceSliceMaxDevices) in the initial list and one with three
    counter consumptions on a device, watched later, are skipped with an error naming the object and
    the field; the usable slice keeps serving the filter."""
    setup_cluster(fake, "x")
    fake.add(slice_obj("too-many", [{"name": f"d{i}"} for i in range(129)], node="d1", pool="other"))
    px = fake.add(with_claims(pod_obj("px"), "x"))

    async def body(h: Harness) -> None:
        assert "too-many" not in h.cache.dra.slices and "d1-gpus" in h.cache.dra.slices
        consumes = [{"counterSet": f"s{i}", "counters": {"c": {"value": "1"}}} for i in range(3)]
        fake.add(slice_obj("late", [{"name": "d", "consumesCounters": consumes}], node="d1", pool="late"))
        fake.add(slice_obj("fine", [{"name": "d"}], node="d1", pool="fine"))
        await eventually(lambda: "fine" in h.cache.dra.slices, "the slice after the refused one watched")
        assert "late" not in h.cache.dra.slices
        assert filter_answer(h.service, filter_body(px, ["d1"]))["NodeNames"] == ["d1"]

    run(fake, body)
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert any("ResourceSlice too-many: spec.devices: must have at most 128" in e for e in errors), errors
    assert any("ResourceSlice late: spec.devices[0].consumesCounters: must have at most 2" in e for e in errors), errors
