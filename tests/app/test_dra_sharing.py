"""Shared GPUs (consumable capacity) and partitions (shared counters) through the service verbs.

Snapshot mode: /bind writes the claims in memory, the cache keeps the allocated and in-flight
shares, and every later /filter counts them. The node g1 publishes one 40Gi GPU that allows
multiple allocations, and a MIG-style GPU (whole device and 20Gi partitions over one counter set).
"""

from __future__ import annotations

import asyncio
from typing import Any

from allocator import DeviceID
from app.cluster.objects import pod_from_obj
from app.pipeline.claims import DraClaims
from tests.conftest import (
    DRIVER,
    bind_body,
    claim_obj,
    device_class_obj,
    filter_body,
    make_service,
    node_obj,
    pod_obj,
    slice_obj,
    with_claims,
)

SHARED = "device.allowMultipleAllocations"
WHOLE = 'device.attributes["gpu.example.com"].kind == "whole"'
MIG = 'device.attributes["gpu.example.com"].kind == "mig"'


def shared_claim(name: str, memory: str | None) -> dict[str, Any]:
    obj = claim_obj(name, selector=SHARED)
    if memory is not None:
        obj["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {"requests": {"memory": memory}}
    return obj


def mig_device(name: str, kind: str, memory: str) -> dict[str, Any]:
    return {
        "name": name,
        "attributes": {"kind": {"string": kind}},
        "consumesCounters": [{"counterSet": "gpu-1", "counters": {"memory": {"value": memory}}}],
    }


def cluster(*claims: dict[str, Any]) -> Any:
    shared = {
        "name": "gpu-0",
        "attributes": {"kind": {"string": "shared"}},
        "allowMultipleAllocations": True,
        "capacity": {"memory": {"value": "40Gi"}},
    }
    counters = slice_obj("g1-counters", [], node="g1", pool="g1-mig", slice_count=2)
    del counters["spec"]["devices"]
    counters["spec"]["sharedCounters"] = [{"name": "gpu-1", "counters": {"memory": {"value": "40Gi"}}}]
    mig = [
        mig_device("gpu-1", "whole", "40Gi"),
        mig_device("gpu-1-a", "mig", "20Gi"),
        mig_device("gpu-1-b", "mig", "20Gi"),
    ]
    dra = [
        device_class_obj(),
        slice_obj("g1-shared", [shared], node="g1"),
        counters,
        slice_obj("g1-mig", mig, node="g1", pool="g1-mig", slice_count=2),
        *claims,
    ]
    return make_service([node_obj("g1", gpus=None)], dra=dra)


def bind(service: Any, pod: dict[str, Any], node: str = "g1") -> dict[str, Any]:
    service.cache.upsert_pod(pod_from_obj(pod))
    return asyncio.run(service.bind(bind_body(pod, node)))


def passes(service: Any, pod: dict[str, Any]) -> bool:
    answer = service.filter(filter_body(pod, ["g1"]))
    assert answer["Error"] == "", answer["Error"]
    return answer["NodeNames"] == ["g1"]


def results(service: Any, key: str) -> list[tuple[str, str | None, dict[str, str]]]:
    claim = service.cache.dra.claims[key]
    assert claim.allocation is not None, key
    return [(r.device, r.share_id, dict(r.consumed_capacity or {})) for r in claim.allocation.devices]


def test_two_pods_share_one_gpu_and_a_third_does_not_fit() -> None:
    service = cluster(shared_claim("a", "10Gi"), shared_claim("b", "30Gi"), shared_claim("c", "1Gi"))
    first, second, third = (with_claims(pod_obj(n), c) for n, c in (("p1", "a"), ("p2", "b"), ("p3", "c")))
    for pod in (first, second):
        assert passes(service, pod)
        assert bind(service, pod)["Error"] == ""
    (a,) = results(service, "default/a")
    (b,) = results(service, "default/b")
    assert (a[0], a[2], b[0], b[2]) == ("gpu-0", {"memory": "10Gi"}, "gpu-0", {"memory": "30Gi"})
    assert a[1] and b[1] and a[1] != b[1]  # two shares, each with its own shareID
    assert not passes(service, third)  # 10Gi + 30Gi: the 40Gi GPU is full
    service.cache.dra.check_invariants()


def test_a_released_share_frees_its_capacity() -> None:
    service = cluster(shared_claim("a", "30Gi"), shared_claim("b", "20Gi"))
    pod = with_claims(pod_obj("p1"), "a")
    assert bind(service, pod)["Error"] == ""
    other = with_claims(pod_obj("p2"), "b")
    assert not passes(service, other)
    service.cache.dra.delete_claim("default/a")  # the claim is gone: so is its share
    assert passes(service, other)
    service.cache.dra.check_invariants()


def test_in_flight_shares_count_for_other_pods_only() -> None:
    service = cluster(shared_claim("a", "30Gi"), shared_claim("b", "20Gi"))
    dra = service.cache.dra
    pod_a = with_claims(pod_obj("p1"), "a")
    assert passes(service, pod_a)
    claims = service.pipeline.get(DraClaims)
    assert claims is not None
    claims.dra.reserve(pod_from_obj(pod_a), "g1")  # /bind's reserve step: held in flight, not written
    assert dra.inflight and dra.inflight[pod_a["metadata"]["uid"]].shares
    shared = dra.shared_view(pod_a["metadata"]["uid"])
    device = DeviceID(DRIVER, "g1", "gpu-0")
    assert device not in shared  # its own in-flight share does not count against the pod
    assert shared.totals is None  # (so it cannot read the kept totals, which count it)
    other = dra.shared_view("uid-of-another-pod")
    assert other.totals is not None and device in other
    assert other.consumed(device) == {"memory": 30 * 2**30}  # the in-flight share, from the totals
    assert not passes(service, with_claims(pod_obj("p2"), "b"))  # but it does against others
    dra.end(pod_a["metadata"]["uid"])
    assert passes(service, with_claims(pod_obj("p2"), "b"))
    dra.check_invariants()


def test_a_bound_partition_keeps_the_whole_gpu_off_for_the_next_pod() -> None:
    mig = claim_obj("mig", selector=MIG)
    whole = claim_obj("whole", selector=WHOLE)
    service = cluster(mig, whole)
    assert bind(service, with_claims(pod_obj("p1"), "mig"))["Error"] == ""
    assert results(service, "default/mig")[0][0] == "gpu-1-a"
    assert not passes(service, with_claims(pod_obj("p2"), "whole"))
    view = service.cache.dra.node_view("g1")
    assert view is not None
    (pool,) = [p for p in view["pools"] if p["pool"] == "g1-mig"]
    assert pool["counters"] == {"gpu-1": {"memory": {"total": 40 * 2**30, "available": 20 * 2**30}}}


def test_the_node_view_shows_who_holds_which_share() -> None:
    service = cluster(shared_claim("a", "10Gi"))
    assert bind(service, with_claims(pod_obj("p1"), "a"))["Error"] == ""
    view = service.cache.dra.node_view("g1")
    assert view is not None
    (pool,) = [p for p in view["pools"] if p["pool"] == "g1"]
    (device,) = pool["slices"][0]["devices"]
    (share,) = device["shares"]
    assert share["holder"] == "claim default/a"
    assert share["consumed"] == {"memory": 10 * 2**30}


def test_bind_decides_shares_again_instead_of_trusting_the_filter_proposal() -> None:
    # p1 is filtered while the GPU is empty; p2 takes 20Gi before p1 binds: p1's 30Gi no longer fits.
    service = cluster(shared_claim("a", "30Gi"), shared_claim("b", "20Gi"))
    late, early = with_claims(pod_obj("p1"), "a"), with_claims(pod_obj("p2"), "b")
    assert passes(service, late)
    assert bind(service, early)["Error"] == ""
    answer = bind(service, late)
    assert "cannot take the claims" in answer["Error"]
    assert service.cache.dra.claims["default/a"].allocation is None
    service.cache.dra.check_invariants()


def test_bind_decides_partitions_again_when_the_counters_changed() -> None:
    service = cluster(claim_obj("whole", selector=WHOLE), claim_obj("mig", selector=MIG))
    late, early = with_claims(pod_obj("p1"), "whole"), with_claims(pod_obj("p2"), "mig")
    assert passes(service, late)
    assert bind(service, early)["Error"] == ""
    assert "cannot take the claims" in bind(service, late)["Error"]


def test_explain_shows_the_share_and_who_else_holds_the_device() -> None:
    service = cluster(shared_claim("a", "10Gi"), shared_claim("b", "15Gi"))
    first = with_claims(pod_obj("first"), "a")
    assert passes(service, first) and bind(service, first)["Error"] == ""
    view = service.explain(filter_body(with_claims(pod_obj("second"), "b"), ["g1"]))
    [device] = view["nodes"][0]["dra"]["devices"]["default/b"]
    assert device["device"] == "gpu-0" and device["consumedCapacity"] == {"memory": "15Gi"}
    [holder] = device["sharedWith"]
    assert holder["holder"] == "claim default/a" and holder["consumed"] == {"memory": 10 * 2**30}
