"""The DRA fast path (``app.cluster.dra_fast``) against the full allocator search.

Random nodes publish devices (shared or not, with or without capacity and request policies, some
tainted or with binding conditions, which the fast path must leave to the allocator), random claims
already hold whole devices or shares, and a random pod claim asks for ExactCount devices with or
without a capacity request. Wherever the fast path decides a node, it must say what the full
search says: pass or fail, and the same reason.
"""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allocator import AllocationError, DeviceID
from app.cluster.dra_inuse import SharedView
from app.cluster.objects import claim_from_obj, pod_from_obj
from app.pipeline.dynamicresources import DynamicResources, PodClaims
from tests.conftest import DRIVER, claim_obj, device_class_obj, make_service, node_obj, pod_obj, slice_obj, with_claims

NODES = ("n0", "n1", "n2")
MEM_SELECTOR = 'device.capacity["gpu.example.com"].mem.compareTo(quantity("3")) >= 0'


@st.composite
def policies(draw: st.DrawFn) -> dict[str, Any] | None:
    kind = draw(st.sampled_from(["none", "range", "step", "values", "default"]))
    if kind == "none":
        return None
    if kind == "range":
        return {"validRange": {"min": str(draw(st.integers(1, 3))), "max": str(draw(st.integers(3, 8)))}}
    if kind == "step":
        return {"validRange": {"min": "1", "step": str(draw(st.integers(1, 3)))}}
    if kind == "values":
        values = sorted(draw(st.sets(st.integers(1, 8), min_size=1, max_size=3)))
        return {"validValues": [str(v) for v in values]}
    return {"default": str(draw(st.integers(1, 4)))}


@st.composite
def devices(draw: st.DrawFn, node: str) -> list[dict[str, Any]]:
    out = []
    for i in range(draw(st.integers(0, 4))):
        device: dict[str, Any] = {"name": f"d{i}", "attributes": {"kind": {"string": draw(st.sampled_from("ab"))}}}
        if draw(st.booleans()):
            device["allowMultipleAllocations"] = True
        if draw(st.booleans()):
            capacity: dict[str, Any] = {"value": str(draw(st.integers(1, 8)))}
            policy = draw(policies()) if device.get("allowMultipleAllocations") else None
            if policy is not None:
                capacity["requestPolicy"] = policy
            device["capacity"] = {"mem": capacity}
        if draw(st.integers(0, 9)) == 0:
            device["taints"] = [{"key": "k", "effect": "NoSchedule"}]
        out.append(device)
    return out


def allocated(name: str, node: str, held: list[tuple[str, int | None]]) -> dict[str, Any]:
    """A claim already allocated on ``node``: per device a share consuming ``mem`` or the whole device."""
    obj = claim_obj(name)
    results = []
    for device, mem in held:
        result: dict[str, Any] = {"request": "gpu", "driver": DRIVER, "pool": node, "device": device}
        if mem is not None:
            result["shareID"] = str(uuid.uuid4())
            result["consumedCapacity"] = {"mem": str(mem)}
        results.append(result)
    obj["status"] = {"allocation": {"devices": {"results": results}}}
    return obj


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    selector = draw(st.sampled_from([None, 'device.attributes["gpu.example.com"].kind == "a"']))
    objects: list[dict[str, Any]] = [device_class_obj(expression=selector)]
    for node in NODES:
        published = draw(devices(node))
        objects.append(slice_obj(f"{node}-slice", published, node=node))
        for i, device in enumerate(published):
            if draw(st.integers(0, 2)) == 0:
                continue
            shares = draw(st.integers(1, 2)) if device.get("allowMultipleAllocations") else 1
            for share in range(shares):
                mem = draw(st.integers(0, 4)) if device.get("allowMultipleAllocations") else None
                objects.append(allocated(f"{node}-{i}-{share}", node, [(device["name"], mem)]))
    # The request's own selector: none, one every device answers, or one that fails on devices
    # without the capacity it reads (the fast path must then leave every node to the search).
    own = draw(st.sampled_from([None, 'device.attributes["gpu.example.com"].kind == "b"', MEM_SELECTOR]))
    request = claim_obj("mine", count=draw(st.integers(1, 3)), selector=own)
    if draw(st.booleans()):
        exactly = request["spec"]["devices"]["requests"][0]["exactly"]
        exactly["capacity"] = {"requests": {"mem": str(draw(st.integers(1, 9)))}}
    return objects, request


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_the_fast_path_decides_every_node_as_the_allocator_does(cluster: tuple[list[dict[str, Any]], Any]) -> None:
    objects, request = cluster
    service = make_service([node_obj(n, gpus=None) for n in NODES], dra=objects)
    state = service.cache.dra
    state.upsert_claim(claim_from_obj(request))
    pod = pod_from_obj(with_claims(pod_obj("p"), "mine"))
    dra = DynamicResources(state)
    claims = dra.prefilter(pod)
    assert isinstance(claims, PodClaims)
    names = [*NODES, "unknown"]
    fast = dra.fast_filter(pod, claims, names)
    selector = request["spec"]["devices"]["requests"][0]["exactly"].get("selectors")
    if fast is None:  # only a selector that fails on some device sends every node to the search
        assert selector is not None and selector[0]["cel"]["expression"] == MEM_SELECTOR
        return
    allocator = dra.allocator(pod.uid)
    for position, name in enumerate(names):
        try:
            status, _ = dra.filter(allocator, claims, name)
        except AllocationError:  # a failing selector on a node the fast path leaves to the search
            assert not fast.decided[position], name
            continue
        if not fast.decided[position]:
            continue
        assert bool(fast.passes[position]) == status.passed, name
        if not status.passed:
            assert fast.reasons[fast.reason[position]] == status, name
    # Candidates the node table knows, in another order, are read by their rows: the same answer.
    order = list(reversed(NODES))
    batch = service.cache.table.batch(order)
    assert batch is not None and batch.all_known
    by_row = DynamicResources(state).fast_filter(pod, claims, order, batch)
    by_name = DynamicResources(state).fast_filter(pod, claims, list(order))
    assert by_row is not None and by_name is not None
    for answer in ("decided", "passes", "reason"):
        assert getattr(by_row, answer).tolist() == getattr(by_name, answer).tolist()


def test_tainted_devices_and_unknown_nodes_go_to_the_allocator() -> None:
    tainted = {"name": "d0", "taints": [{"key": "k", "effect": "NoSchedule"}]}
    objects = [
        device_class_obj(),
        slice_obj("n0-slice", [tainted], node="n0"),
        slice_obj("n1-slice", [{"name": "d0"}], node="n1"),
    ]
    service = make_service([node_obj("n0", gpus=None), node_obj("n1", gpus=None)], dra=objects)
    service.cache.dra.upsert_claim(claim_from_obj(claim_obj("mine")))
    pod = pod_from_obj(with_claims(pod_obj("p"), "mine"))
    dra = DynamicResources(service.cache.dra)
    claims = dra.prefilter(pod)
    assert isinstance(claims, PodClaims)
    fast = dra.fast_filter(pod, claims, ["n0", "n1", "n9"])
    assert fast is not None
    assert fast.decided.tolist() == [False, True, False] and bool(fast.passes[1])


def test_a_pod_with_two_claims_is_not_simple() -> None:
    objects = [device_class_obj(), slice_obj("n0-slice", [{"name": "d0"}, {"name": "d1"}], node="n0")]
    service = make_service([node_obj("n0", gpus=None)], dra=objects)
    for name in ("a", "b"):
        service.cache.dra.upsert_claim(claim_from_obj(claim_obj(name)))
    pod = pod_from_obj(with_claims(pod_obj("p"), "a", "b"))
    dra = DynamicResources(service.cache.dra)
    claims = dra.prefilter(pod)
    assert isinstance(claims, PodClaims)
    assert dra.fast_filter(pod, claims, ["n0"]) is None


def test_allocations_update_the_table_in_place() -> None:
    shared = {"name": "d0", "allowMultipleAllocations": True, "capacity": {"mem": {"value": "4"}}}
    objects = [device_class_obj(), slice_obj("n0-slice", [shared], node="n0")]
    service = make_service([node_obj("n0", gpus=None)], dra=objects)
    state = service.cache.dra
    request = claim_obj("mine")
    request["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {"requests": {"mem": "3"}}
    state.upsert_claim(claim_from_obj(request))
    pod = pod_from_obj(with_claims(pod_obj("p"), "mine"))
    dra = DynamicResources(state)
    claims = dra.prefilter(pod)
    assert isinstance(claims, PodClaims)
    fast = dra.fast_filter(pod, claims, ["n0"])
    assert fast is not None and bool(fast.passes[0])
    table = next(iter(state.fast.tables.values()))
    state.upsert_claim(claim_from_obj(allocated("other", "n0", [("d0", 2)])))
    assert next(iter(state.fast.tables.values())) is table  # updated, not rebuilt
    fast = dra.fast_filter(pod, claims, ["n0"])
    assert fast is not None and not fast.passes[0]  # 2 + 3 > 4
    for key in [k for k in state.claims if k.endswith("/other")]:
        state.delete_claim(key)
    fast = dra.fast_filter(pod, claims, ["n0"])
    assert fast is not None and bool(fast.passes[0])  # the share given back: the kept counts follow


def test_a_device_too_small_for_the_request_stays_out_when_its_holders_change() -> None:
    # d1 has no mem capacity: it can never serve the request; d0 is full. When d1's shares come and
    # go, the kept count for n0 is judged again device by device, and must still leave d1 out.
    devices = [
        {"name": "d0", "allowMultipleAllocations": True, "capacity": {"mem": {"value": "8"}}},
        {"name": "d1", "allowMultipleAllocations": True, "capacity": {"cores": {"value": "3"}}},
    ]
    service = make_service(
        [node_obj("n0", gpus=None)], dra=[device_class_obj(), slice_obj("n0-slice", devices, node="n0")]
    )
    state = service.cache.dra
    request = claim_obj("mine")
    request["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {"requests": {"mem": "4"}}
    state.upsert_claim(claim_from_obj(request))
    state.upsert_claim(claim_from_obj(allocated("full", "n0", [("d0", 6)])))
    pod = pod_from_obj(with_claims(pod_obj("p"), "mine"))
    dra = DynamicResources(state)
    claims = dra.prefilter(pod)
    assert isinstance(claims, PodClaims)
    for step in range(3):
        fast = dra.fast_filter(pod, claims, ["n0"])
        assert fast is not None and bool(fast.decided[0]) and not fast.passes[0], step
        assert not dra.filter(dra.allocator(pod.uid), claims, "n0")[0].passed
        if step == 0:
            state.upsert_claim(claim_from_obj(allocated("small", "n0", [("d1", None)])))
        else:
            for key in [k for k in state.claims if k.endswith("/small")]:
                state.delete_claim(key)


@st.composite
def changes(draw: st.DrawFn) -> list[list[tuple[str, list[int], int | None]]]:
    """Rounds of changes between two filters: a claim allocated on some of n0's shared devices
    ("add", devices, mem; None: each device held whole) or one taken off ("delete", [which], 0)."""
    rounds = []
    for _ in range(draw(st.integers(1, 12))):
        steps: list[tuple[str, list[int], int | None]] = []
        for _ in range(draw(st.integers(1, 6))):
            if draw(st.integers(0, 2)):
                devices = sorted(draw(st.sets(st.integers(0, 2), min_size=1, max_size=3)))
                steps.append(("add", devices, draw(st.one_of(st.integers(0, 5), st.none()))))
            else:
                steps.append(("delete", [draw(st.integers(0, 30))], 0))
        rounds.append(steps)
    return rounds


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(changes(), st.integers(1, 4), st.integers(1, 2), st.sampled_from([1, 4096]))
def test_the_kept_counts_follow_every_change(
    rounds: list[list[tuple[str, list[int], int | None]]], mem: int, count: int, log: int
) -> None:
    """``DeviceTable.counts`` judges again only the devices in its change log; with a log short enough
    to be trimmed all the time (1) or never (4096), the fast path answers as the allocator after
    each round of allocations and releases."""
    import app.cluster.dra_fast as dra_fast

    shared = [
        {"name": f"d{i}", "allowMultipleAllocations": True, "capacity": {"mem": {"value": "8"}}} for i in range(3)
    ]
    objects = [device_class_obj(), slice_obj("n0-slice", shared, node="n0"), slice_obj("n1-slice", shared, node="n1")]
    service = make_service([node_obj(n, gpus=None) for n in ("n0", "n1")], dra=objects)
    state = service.cache.dra
    request = claim_obj("mine", count=count)
    request["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {"requests": {"mem": str(mem)}}
    state.upsert_claim(claim_from_obj(request))
    pod = pod_from_obj(with_claims(pod_obj("p"), "mine"))
    dra = DynamicResources(state)
    claims = dra.prefilter(pod)
    assert isinstance(claims, PodClaims)
    names = ["n0", "n1"]
    held: list[str] = []
    kept, dra_fast._LOG_MIN = dra_fast._LOG_MIN, log
    try:
        for number, steps in enumerate(rounds):
            for step, (kind, which, amount) in enumerate(steps):
                if kind == "add":
                    name = f"other-{number}-{step}"
                    state.upsert_claim(claim_from_obj(allocated(name, "n0", [(f"d{d}", amount) for d in which])))
                    held.append(name)
                elif held:
                    name = held.pop(which[0] % len(held))
                    state.delete_claim(next(k for k in state.claims if k.endswith(f"/{name}")))
            fast = dra.fast_filter(pod, claims, names)
            assert fast is not None and fast.decided.all()
            allocator = dra.allocator(pod.uid)
            assert fast.passes.tolist() == [dra.filter(allocator, claims, n)[0].passed for n in names]
            # The allocator reads the shares' totals kept as devices change hands: they are the sums.
            view, summed = state.shared_view(pod.uid), SharedView(state._claim_shares, state._inflight_shares, pod.uid)
            assert view.totals is not None
            for device in (DeviceID(DRIVER, node, f"d{i}") for node in names for i in range(3)):
                assert (device in view, view.consumed(device)) == (device in summed, summed.consumed(device))
    finally:
        dra_fast._LOG_MIN = kept
