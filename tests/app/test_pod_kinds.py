"""The kinds of device use counted per node (``NodeInfo.pod_kinds``, app/cluster/pod_kinds.py): from
container requests, or from the pod's claims' requests; exact in any order of pod, claim and class
events, in the snapshots and the node table alike."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from allocator import AllocationResult, DeviceRequestAllocationResult, parse_device_class
from app.cluster.cache import ClusterCache
from app.cluster.objects import claim_from_obj, node_from_obj, pod_from_obj
from scoring.framework import SHARE_KIND, PodInfo
from tests.app.cache_ops import POD_EVENTS, Clock, apply_pod_event
from tests.conftest import DRIVER, claim_obj, node_obj, pod_obj, with_claims

GPU = "nvidia.com/gpu"


def gpu_class(name: str = "gpu", resource: str | None = GPU) -> Any:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}
    if resource is not None:
        spec["extendedResourceName"] = resource
    return parse_device_class({"kind": "DeviceClass", "metadata": {"name": name}, "spec": spec})


def gpu_claim(name: str, count: int = 1, milli: int | None = None, device_class: str = "gpu", **kw: Any) -> Any:
    """A claim as the simulator makes them: ``milli`` set, a share of one device's ``gpu-milli``."""
    obj = claim_obj(name, count=count, device_class=device_class, uid=kw.pop("uid", name))
    if milli is not None:
        obj["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {"requests": {"gpu-milli": str(milli)}}
    claim = claim_from_obj(obj)
    return replace(claim, **kw) if kw else claim


def allocated(claim: Any, node: str) -> Any:
    """``claim`` allocated a device of its own on ``node`` (no two claims share one)."""
    result = DeviceRequestAllocationResult("gpu", DRIVER, node, f"gpu-{claim.name}")
    return replace(claim, resource_version="2", allocation=AllocationResult((result,)))


def claim_pod(name: str, *claims: str, node: str = "", uid: str | None = None) -> PodInfo:
    return pod_from_obj(with_claims(pod_obj(name, node=node, uid=uid or name), *claims))


def cache() -> ClusterCache:
    found = ClusterCache(assume_ttl=60, clock=Clock())
    found.replace_nodes([node_from_obj(node_obj(n, gpus=None)) for n in ("g1", "g2")])
    found.dra.upsert_class(gpu_class())
    return found


def kinds(cache: ClusterCache, node: str, resource: str = GPU) -> dict[int, int]:
    """The node's kinds as the snapshot has them, checked against the node table's row."""
    info = cache.node_info(node)
    assert info is not None
    found = dict(info.pod_kinds.get(resource, {}))
    batch = cache.table.batch([node])
    assert batch is not None
    table = {kind: int(pods[0]) for kind, pods in batch.pod_kinds(resource).items() if pods[0]}
    assert table == found
    return found


def test_container_requests_count_as_whole_devices() -> None:
    c = cache()
    c.upsert_pod(pod_from_obj(pod_obj("a", gpus=1, node="g1", uid="a", phase="Running")))
    c.upsert_pod(pod_from_obj(pod_obj("b", gpus=2, node="g1", uid="b", phase="Running")))
    c.upsert_pod(pod_from_obj(pod_obj("cpu", node="g1", uid="cpu", phase="Running")))  # no kind
    assert kinds(c, "g1") == {1: 1, 2: 1}
    c.delete_pod("b")
    assert kinds(c, "g1") == {1: 1}
    c.check_invariants()


def test_claims_give_shares_and_whole_devices_whatever_comes_first() -> None:
    c = cache()
    c.dra.upsert_claim(gpu_claim("share", milli=500))
    c.upsert_pod(claim_pod("a", "share", node="g1"))
    assert kinds(c, "g1") == {SHARE_KIND: 1}
    c.upsert_pod(claim_pod("b", "whole", node="g1"))  # its claim is not known yet: no kind
    assert kinds(c, "g1") == {SHARE_KIND: 1}
    c.dra.upsert_claim(gpu_claim("whole", count=2))
    assert kinds(c, "g1") == {SHARE_KIND: 1, 2: 1}
    c.dra.upsert_claim(allocated(gpu_claim("whole", count=2), "g1"))  # allocated: the same kind
    assert kinds(c, "g1") == {SHARE_KIND: 1, 2: 1}
    c.dra.delete_claim("default/whole")
    c.dra.upsert_claim(gpu_claim("whole", count=1, uid="whole-2"))  # recreated, asking for less
    assert kinds(c, "g1") == {SHARE_KIND: 1, 1: 1}
    c.check_invariants()


def test_assumed_pods_count_and_move_with_their_assumption() -> None:
    c = cache()
    c.dra.upsert_claim(gpu_claim("s", milli=300))
    pending = claim_pod("a", "s")
    c.upsert_pod(pending)
    assert c.assume(pending, "g2") is None
    assert kinds(c, "g2") == {SHARE_KIND: 1} and kinds(c, "g1") == {}
    c.upsert_pod(replace(pending, node_name="g1"))  # bound elsewhere than assumed
    assert kinds(c, "g1") == {SHARE_KIND: 1} and kinds(c, "g2") == {}
    c.check_invariants()


def test_classes_decide_which_resource_a_claim_counts_for() -> None:
    c = cache()
    c.dra.upsert_claim(gpu_claim("x", count=4))
    c.upsert_pod(claim_pod("a", "x", node="g1"))
    assert kinds(c, "g1") == {4: 1}
    c.dra.upsert_class(gpu_class(resource="example.com/accel"))
    assert kinds(c, "g1") == {} and kinds(c, "g1", "example.com/accel") == {4: 1}
    c.dra.delete_class("gpu")
    assert kinds(c, "g1", "example.com/accel") == {}
    c.check_invariants()


def test_container_requests_win_over_claims_for_one_resource() -> None:
    c = cache()
    c.dra.upsert_claim(gpu_claim("s", milli=500))
    c.upsert_pod(pod_from_obj(with_claims(pod_obj("a", gpus=2, node="g1", uid="a"), "s")))
    assert kinds(c, "g1") == {2: 1}
    c.check_invariants()


# ----------------------------------------------------------------------------- any order of events

CLAIMS = ("c0", "c1", "c2")
SPECS = ((1, 500), (1, None), (2, None), (1, 1000))  # (count, gpu-milli request)
CLAIM_OPS = ("claim", "claim", "allocate", "unclaim", "class", "unclass")
OPS = st.lists(
    st.tuples(
        st.sampled_from(("upsert", "upsert", "delete", "assume", "forget", "expire", *CLAIM_OPS)),
        st.integers(0, 3),  # pod (pod i names claim i % 2, and c2 from pod 2 on), or claim spec
        st.sampled_from([0, 1, 0, 1, 2]),  # claim
        st.sampled_from(["g1", "g2", ""]),  # node
        st.integers(0, 2),  # whole GPUs in container requests
    ),
    max_size=50,
)


@settings(max_examples=500, deadline=None)
@given(OPS)
def test_any_order_of_events_keeps_kinds_exact(ops: list[tuple[str, int, int, str, int]]) -> None:
    """After every event the per-node kinds equal a count from scratch (check_invariants), and every
    snapshot and table row agree."""
    clock = Clock()
    c = cache()
    c.clock = c.dra.clock = clock
    for op, index, claim, node, gpus in ops:
        name = CLAIMS[claim]
        obj = pod_obj(f"p{index}", gpus=gpus if index == 3 else 0, node=node, uid=f"uid-{index}")
        pod = pod_from_obj(with_claims(obj, CLAIMS[index % 2], *CLAIMS[2:] if index >= 2 else ()))
        count, milli = SPECS[index]
        if op in POD_EVENTS:
            apply_pod_event(c, clock, op, pod, node)
        elif op == "claim":
            c.dra.upsert_claim(gpu_claim(name, count, milli, uid=f"{name}-{index}"))
        elif op == "allocate":
            current = c.dra.claims.get(f"default/{name}")
            if current is not None:
                c.dra.upsert_claim(allocated(current, node or "g1"))
        elif op == "unclaim":
            c.dra.delete_claim(f"default/{name}")
        elif op == "class":
            c.dra.upsert_class(gpu_class("gpu" if index < 2 else "other"))
        else:
            c.dra.delete_class("gpu" if index < 2 else "other")
        c.check_invariants()
        for each in ("g1", "g2"):
            assert sum(kinds(c, each).values()) <= len(c.usage(each).uids)
