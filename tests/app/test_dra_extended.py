"""DRA devices counted as extended resources in the cluster cache (issue 16 part 6).

A DeviceClass with ``extendedResourceName`` makes its devices on a node count as that resource for
NodeResourcesFitPlus and ScarceResourceAvoidance: allocatable = devices of the class published for
the node, requested = devices allocated by claims and in-flight binds (shares by consumed capacity),
in milli-devices. Upstream rule: noderesources ``calculateResourceAllocatableRequest`` (DRA counts
only when ``status.allocatable`` has none of the resource) and ExtendedResourceCache (the newest
class naming a resource wins, then the lowest name). Amounts change at cache-update time only.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from allocator import (
    AllocationResult,
    DeviceID,
    DeviceRequestAllocationResult,
    ResourceClaim,
    parse_device_class,
    parse_resource_slice,
)
from app.cluster.cache import ClusterCache
from app.cluster.objects import node_from_obj
from scoring.framework import NodeInfo
from tests.conftest import DRIVER, gpu_device, labelled, memory_at_least, node_obj, slice_obj

GPU = "nvidia.com/gpu"


def gpu_class(name: str = "gpu", expression: str | None = None, resource: str | None = GPU, created: str = "") -> Any:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": expression or f'device.driver == "{DRIVER}"'}}]}
    if resource is not None:
        spec["extendedResourceName"] = resource
    meta: dict[str, Any] = {"name": name}
    if created:
        meta["creationTimestamp"] = created
    return parse_device_class({"kind": "DeviceClass", "metadata": meta, "spec": spec})


def shared_gpu(name: str, memory: str = "40Gi") -> dict[str, Any]:
    return {"name": name, "allowMultipleAllocations": True, "capacity": {"memory": {"value": memory}}}


def gpus(node: str, count: int, *, start: int = 0, shared: bool = False, **kwargs: Any) -> Any:
    make = shared_gpu if shared else gpu_device
    devices = [make(f"gpu-{i}") for i in range(start, start + count)]
    return parse_resource_slice(slice_obj(f"{node}-gpus", devices, node=node, **kwargs))


def claim(name: str, *results: tuple[str, str, str | None, str | None]) -> ResourceClaim:
    """An allocated claim: results (pool, device, shareID, consumed memory)."""
    devices = tuple(
        DeviceRequestAllocationResult(
            "gpu", DRIVER, pool, device, share_id=share, consumed_capacity=None if mem is None else {"memory": mem}
        )
        for pool, device, share, mem in results
    )
    return ResourceClaim("default", name, uid=name, resource_version="1", allocation=AllocationResult(devices))


def cache_with(*nodes: dict[str, Any]) -> ClusterCache:
    cache = ClusterCache()
    cache.replace_nodes([node_from_obj(n) for n in nodes])
    return cache


def info(cache: ClusterCache, name: str) -> NodeInfo:
    found = cache.node_info(name)
    assert found is not None
    return found


def table_amounts(cache: ClusterCache, name: str, pod_amount: int = 0) -> tuple[int, int]:
    batch = cache.table.batch([name])
    assert batch is not None
    amounts = batch.fit_amounts(GPU, pod_amount)
    assert amounts is not None
    return int(amounts[0][0]), int(amounts[1][0])


def test_a_dra_only_gpu_node_offers_the_resource_to_scoring_only() -> None:
    cache = cache_with(node_obj("dra", gpus=None), node_obj("cpu", gpus=None))
    cache.dra.replace_classes([gpu_class()])
    cache.dra.replace_slices([gpus("dra", 4)])
    dra = info(cache, "dra")
    assert dra.dra_allocatable == {GPU: 4000} and dra.dra_requested == {GPU: 0}
    assert GPU in dra.allocatable_types
    assert GPU not in dra.allocatable  # filters still see no device-plugin GPUs
    assert GPU not in info(cache, "cpu").allocatable_types
    assert dra.fit_amounts(GPU, 1) == table_amounts(cache, "dra", 1) == (1000, 4000)


def test_claims_and_in_flight_binds_count_as_requested() -> None:
    cache = cache_with(node_obj("dra", gpus=None))
    cache.dra.replace_classes([gpu_class()])
    cache.dra.replace_slices([gpus("dra", 4)])
    generation = cache.generation
    cache.dra.upsert_claim(claim("a", ("dra", "gpu-0", None, None), ("dra", "gpu-1", None, None)))
    assert info(cache, "dra").dra_requested == {GPU: 2000}
    assert cache.generation > generation  # filters waiting on the cache see the change
    assert table_amounts(cache, "dra") == (2000, 4000)
    cache.dra.begin("pod-uid", "default/p", "dra", {"default/b": claim("b", ("dra", "gpu-2", None, None)).allocation})  # type: ignore[dict-item]
    assert info(cache, "dra").dra_requested == {GPU: 3000}
    cache.dra.end("pod-uid")
    cache.dra.delete_claim("default/a")
    assert info(cache, "dra").dra_requested == {GPU: 0}
    assert table_amounts(cache, "dra") == (0, 4000)
    cache.check_invariants()


def test_shares_count_by_consumed_capacity_rounded_up_to_a_milli_device() -> None:
    cache = cache_with(node_obj("dra", gpus=None))
    cache.dra.replace_classes([gpu_class()])
    cache.dra.replace_slices([gpus("dra", 2, shared=True)])
    cache.dra.upsert_claim(claim("a", ("dra", "gpu-0", "s1", "10Gi")))
    assert info(cache, "dra").dra_requested == {GPU: 250}
    cache.dra.upsert_claim(claim("b", ("dra", "gpu-0", "s2", "15Gi"), ("dra", "gpu-1", "s3", "1Gi")))
    # gpu-0: 25Gi of 40Gi = 625; gpu-1: 1Gi of 40Gi = 25
    assert info(cache, "dra").dra_requested == {GPU: 650}
    cache.dra.upsert_claim(claim("c", ("dra", "gpu-1", "s4", "12Gi")))
    # gpu-1: 13Gi of 40Gi = 325
    assert info(cache, "dra").dra_requested == {GPU: 950}
    cache.dra.upsert_claim(claim("c", ("dra", "gpu-1", "s4", "12800Mi")))  # 1Gi + 12.5Gi = 13.5Gi: 337.5 -> 338
    assert info(cache, "dra").dra_requested == {GPU: 963}
    cache.check_invariants()


def test_a_binds_share_counts_once_while_its_claim_is_written_and_its_in_flight_entry_ends() -> None:
    cache = cache_with(node_obj("dra", gpus=None))
    cache.dra.replace_classes([gpu_class()])
    cache.dra.replace_slices([gpus("dra", 2, shared=True)])
    told: list[list[str]] = []
    listener = cache.dra.listener
    assert listener is not None

    def tell(nodes: list[str]) -> None:
        told.append(list(nodes))
        listener(nodes)

    cache.dra.listener = tell
    written = claim("a", ("dra", "gpu-0", "s1", "10Gi"))  # what /bind writes: the in-flight share
    assert written.allocation is not None
    device = DeviceID(DRIVER, "dra", "gpu-0")
    cache.dra.begin("pod-uid", "default/p", "dra", {written.key: written.allocation})
    assert info(cache, "dra").dra_requested == {GPU: 250} and told == [["dra"]]
    cache.dra.upsert_claim(written)
    # One share, not two: for the amounts, the fast path and another pod's allocator alike.
    assert cache.dra.holders(device) == (False, 1, {"memory": Fraction(10 * 2**30)})
    assert cache.dra.shared_view("other-pod").consumed(device) == {"memory": Fraction(10 * 2**30)}
    cache.dra.end("pod-uid")
    assert info(cache, "dra").dra_requested == {GPU: 250}
    assert told == [["dra"]]  # neither the write nor the end changed how the device is held: no recount
    cache.check_invariants()
    other = claim("b", ("dra", "gpu-0", "s2", "10Gi"))  # another share of the device does count
    cache.dra.upsert_claim(other)
    assert info(cache, "dra").dra_requested == {GPU: 500} and told == [["dra"], ["dra"]]
    cache.check_invariants()


def test_a_device_plugin_node_is_scored_on_its_allocatable_alone() -> None:
    """Upstream counts DRA devices only where status.allocatable has none of the resource: the same
    GPUs published both ways while a driver migrates must not count twice."""
    cache = cache_with(node_obj("both", gpus=8))
    cache.dra.replace_classes([gpu_class()])
    cache.dra.replace_slices([gpus("both", 4)])
    both = info(cache, "both")
    assert both.dra_allocatable == {}
    assert both.fit_amounts(GPU, 1) == table_amounts(cache, "both", 1) == (1, 8)
    cache.upsert_node(node_from_obj(node_obj("both", gpus=None)))  # the device plugin went away
    assert info(cache, "both").fit_amounts(GPU, 1) == (1000, 4000)


def test_only_devices_the_class_selects_and_only_classes_with_a_name_count() -> None:
    cache = cache_with(node_obj("dra", gpus=None))
    cache.dra.replace_slices([gpus("dra", 4)])
    cache.dra.replace_classes([gpu_class(resource=None)])
    assert info(cache, "dra").dra_allocatable == {}
    h100 = 'device.attributes["gpu.example.com"].model == "H100"'
    cache.dra.upsert_class(gpu_class("two", expression=f"{h100} && {memory_at_least('40Gi')}"))
    assert info(cache, "dra").dra_allocatable == {GPU: 4000}
    cache.dra.upsert_class(gpu_class("none", expression="false", created="2030-01-01T00:00:00Z"))  # newer: wins
    assert info(cache, "dra").dra_allocatable == {}
    assert GPU not in info(cache, "dra").allocatable_types
    cache.dra.delete_class("none")
    assert info(cache, "dra").dra_allocatable == {GPU: 4000}
    cache.dra.delete_slice("dra-gpus")
    assert info(cache, "dra").dra_allocatable == {}
    assert table_amounts(cache, "dra", 1) == (1, 0)
    cache.check_invariants()


def test_node_selector_slices_follow_node_labels() -> None:
    cache = cache_with(labelled("a", {"rack": "r1"}, gpus=None), labelled("b", {"rack": "r2"}, gpus=None))
    cache.dra.replace_classes([gpu_class()])
    selector = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}]}
    cache.dra.replace_slices([parse_resource_slice(slice_obj("net", [gpu_device("gpu-0")], node_selector=selector))])
    assert info(cache, "a").dra_allocatable == {GPU: 1000} and info(cache, "b").dra_allocatable == {}
    cache.dra.upsert_claim(claim("a", ("net", "gpu-0", None, None)))
    assert info(cache, "a").dra_requested == {GPU: 1000}
    cache.upsert_node(node_from_obj(labelled("b", {"rack": "r1"}, gpus=None)))
    assert info(cache, "b").dra_allocatable == {GPU: 1000} and info(cache, "b").dra_requested == {GPU: 1000}
    cache.upsert_node(node_from_obj(labelled("a", {"rack": "r2"}, gpus=None)))
    assert info(cache, "a").dra_allocatable == {}
    cache.delete_node("b")
    assert cache.dra.extended_amounts("b") is None
    cache.check_invariants()


# ----------------------------------------------------------------------------- any order of updates

NODES = ("n0", "n1")
OPS = st.lists(
    st.tuples(
        st.sampled_from(["slice", "unslice", "class", "unclass", "claim", "unclaim", "begin", "end", "label", "fast"]),
        st.integers(0, 1),
        st.integers(0, 3),
        st.sampled_from([None, "5Gi", "30Gi"]),
    ),
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(OPS)
def test_any_order_of_updates_keeps_amounts_exact_and_the_table_in_step(ops: list[tuple[str, int, int, Any]]) -> None:
    """After every change the amounts equal a count from scratch (check_invariants), and the node
    table's rows give the same FitPlus amounts as the snapshots."""
    cache = cache_with(*(labelled(n, {"rack": "r0"}, gpus=None) for n in NODES))
    for op, n, device, memory in ops:
        node = NODES[n]
        if op == "slice":
            cache.dra.upsert_slice(gpus(node, device + 1, shared=memory is not None))
        elif op == "unslice":
            cache.dra.delete_slice(f"{node}-gpus")
        elif op == "class":
            cache.dra.upsert_class(gpu_class(f"c{device % 2}", expression=None if device < 2 else "false"))
        elif op == "unclass":
            cache.dra.delete_class(f"c{device % 2}")
        elif op == "claim":
            share = None if memory is None else f"s{n}{device}"
            cache.dra.upsert_claim(claim(f"{node}-{device}", (node, f"gpu-{device}", share, memory)))
        elif op == "unclaim":
            cache.dra.delete_claim(f"default/{node}-{device}")
        elif op == "begin":  # with memory, the share a "claim" op of that device writes (same shareID)
            share = None if memory is None else f"s{n}{device}"
            result = claim("x", (node, f"gpu-{device}", share, memory)).allocation
            assert result is not None
            cache.dra.begin(f"pod-{n}", "default/p", node, {"default/x": result})
        elif op == "end":
            cache.dra.end(f"pod-{n}")
        elif op == "fast":  # the fast path's tables, as a filter builds them: updated from now on
            dra = cache.dra
            for device_class in dra.classes.values():
                dra.fast.table(device_class, dra.node_refs, dra.slices, dra.selectors, dra.holders)
        else:
            cache.upsert_node(node_from_obj(labelled(node, {"rack": f"r{device}"}, gpus=None)))
        cache.check_invariants()
        for name in NODES:
            assert info(cache, name).fit_amounts(GPU, 1) == table_amounts(cache, name, 1)
