"""Partitionable devices (DRAPartitionableDevices): counter sets shared by the devices of a pool.

Each test names the upstream rule it checks (kube-scheduler 1.36, ``structured/internal/incubating``:
``allocateDevice`` / ``checkAvailableCounters`` and ``pools_incubating.go``'s ``buildPool``).
"""

from __future__ import annotations

from typing import Any

import pytest

from allocator import REASON_CANNOT_ALLOCATE, DeviceID, NodeRef, ParseError, Unschedulable, parse_resource_slice
from tests.allocator.builders import (
    DRIVER,
    NODE,
    Shares,
    allocate,
    claim,
    exactly,
    gpu,
    index,
    picked,
    shares_of,
    slice_obj,
)

POOL = NODE
WHOLE = 'device.attributes["gpu.example.com"].kind == "whole"'
MIG = 'device.attributes["gpu.example.com"].kind == "mig"'


def counter_slice(name: str = "counters", sets: dict[str, dict[str, str]] | None = None, **kw: Any) -> dict[str, Any]:
    """A 1.36 counter slice: only ``sharedCounters``, no devices."""
    obj = slice_obj(name, [], pool=POOL, count=2, **kw)
    del obj["spec"]["devices"]
    sets = sets or {"gpu-0": {"memory": "40Gi", "slices": "7"}}
    obj["spec"]["sharedCounters"] = [
        {"name": n, "counters": {k: {"value": v} for k, v in counters.items()}} for n, counters in sets.items()
    ]
    return obj


def partition(name: str, kind: str, memory: str, slices: str, counter_set: str = "gpu-0") -> dict[str, Any]:
    return {
        "name": name,
        "attributes": {"kind": {"string": kind}},
        "consumesCounters": [
            {"counterSet": counter_set, "counters": {"memory": {"value": memory}, "slices": {"value": slices}}}
        ],
    }


def mig_node(*extra: dict[str, Any], **kw: Any) -> list[dict[str, Any]]:
    """One GPU as a whole device and as three partitions (1g, 1g, 3g), counters in their own slice."""
    devices = [
        partition("gpu-0", "whole", "40Gi", "7"),
        partition("gpu-0-mig-a", "mig", "5Gi", "1"),
        partition("gpu-0-mig-b", "mig", "5Gi", "1"),
        partition("gpu-0-mig-3g", "mig", "20Gi", "3"),
        *extra,
    ]
    return [counter_slice(**kw), slice_obj("devices", devices, pool=POOL, count=2)]


def test_a_partition_blocks_the_whole_gpu() -> None:
    # checkAvailableCounters: the whole GPU needs every counter; a 1g partition took some.
    outcome = allocate(mig_node(), claim("mig", exactly("gpu", MIG)), claim("whole", exactly("gpu", WHOLE)))
    assert outcome == Unschedulable(REASON_CANNOT_ALLOCATE)


def test_the_whole_gpu_blocks_every_partition() -> None:
    outcome = allocate(mig_node(), claim("whole", exactly("gpu", WHOLE)), claim("mig", exactly("gpu", MIG)))
    assert outcome == Unschedulable(REASON_CANNOT_ALLOCATE)


def test_partitions_fill_the_counters_exactly() -> None:
    # 5 + 5 + 20 = 30Gi of 40Gi and 1 + 1 + 3 = 5 of 7 slices: all three partitions fit together.
    outcome = allocate(mig_node(), claim("c", exactly("gpu", MIG, count=3)))
    assert picked(outcome) == ["gpu-0-mig-a", "gpu-0-mig-b", "gpu-0-mig-3g"]


def test_a_partition_that_would_overdraw_a_counter_is_skipped() -> None:
    big = partition("gpu-0-mig-4g", "mig", "20Gi", "4")
    # 3g (3 slices) + 4g (4 slices) = 7 fits; adding a 1g on top (8 slices) does not.
    outcome = allocate(mig_node(big), claim("c", exactly("gpu", MIG, count=4)))
    assert outcome == Unschedulable(REASON_CANNOT_ALLOCATE)
    assert picked(allocate(mig_node(big), claim("c", exactly("gpu", MIG, count=3)))) == [
        "gpu-0-mig-a",
        "gpu-0-mig-b",
        "gpu-0-mig-3g",
    ]


def test_allocated_partitions_count_across_claims() -> None:
    # Available counters are the sets minus what allocated devices of the pool consume.
    taken = frozenset({DeviceID(DRIVER, POOL, "gpu-0-mig-a")})
    assert allocate(mig_node(), claim("c", exactly("gpu", WHOLE)), allocated=taken) == Unschedulable(
        REASON_CANNOT_ALLOCATE
    )
    assert picked(allocate(mig_node(), claim("c", exactly("gpu", MIG)), allocated=taken)) == ["gpu-0-mig-b"]


def test_counter_sets_are_independent() -> None:
    # Two GPUs, two counter sets: the whole gpu-1 is free while gpu-0 is partitioned.
    sets = {"gpu-0": {"memory": "40Gi", "slices": "7"}, "gpu-1": {"memory": "40Gi", "slices": "7"}}
    devices = [
        partition("gpu-0", "whole", "40Gi", "7"),
        partition("gpu-1", "whole", "40Gi", "7", counter_set="gpu-1"),
        partition("gpu-0-mig-a", "mig", "5Gi", "1"),
    ]
    slices = [counter_slice(sets=sets), slice_obj("devices", devices, pool=POOL, count=2)]
    outcome = allocate(slices, claim("mig", exactly("gpu", MIG)), claim("whole", exactly("gpu", WHOLE)))
    assert [picked(outcome, 0), picked(outcome, 1)] == [["gpu-0-mig-a"], ["gpu-1"]]


def test_the_search_backtracks_out_of_counters() -> None:
    # The first claim takes the first fitting device (the whole GPU); the second claim needs a
    # partition, so the search must give the whole GPU's counters back and try partitions instead.
    first = claim("any", exactly("gpu"))
    second = claim("mig", exactly("gpu", MIG))
    outcome = allocate(mig_node(), first, second)
    assert [picked(outcome, 0), picked(outcome, 1)] == [["gpu-0-mig-a"], ["gpu-0-mig-b"]]


def test_counters_from_a_counter_slice_for_no_particular_node() -> None:
    # 1.36 shape: counters published once for the pool (here allNodes), devices per node.
    outcome = allocate(mig_node(all_nodes=True), claim("c", exactly("gpu", WHOLE)))
    assert picked(outcome) == ["gpu-0"]


def test_devices_of_the_pool_on_other_nodes_consume_counters() -> None:
    # DeviceSlicesNotTargetingNode: a device of another node's slice in the same pool, allocated,
    # takes from the shared counter set as well.
    counters = counter_slice(all_nodes=True, sets={"fabric": {"links": "2"}})
    counters["spec"]["pool"]["resourceSliceCount"] = 3

    def link(name: str) -> dict[str, Any]:
        return {"name": name, "consumesCounters": [{"counterSet": "fabric", "counters": {"links": {"value": "2"}}}]}

    mine = slice_obj("mine", [link("mine")], pool=POOL, count=3)
    theirs = slice_obj("theirs", [link("theirs")], node="node-2", pool=POOL, count=3)
    c = claim("c")
    assert picked(allocate([counters, mine, theirs], c)) == ["mine"]
    taken = frozenset({DeviceID(DRIVER, POOL, "theirs")})
    assert allocate([counters, mine, theirs], c, allocated=taken) == Unschedulable(REASON_CANNOT_ALLOCATE)
    assert picked(allocate([counters, mine, theirs], c, node=NodeRef("node-2"))) == ["theirs"]


def test_an_over_committed_pool_allocates_no_counter_device() -> None:
    # checkAvailableCounters compares every counter of the pool: one already below zero (devices
    # allocated before the counters shrank) fails any device that consumes counters.
    sets = {"gpu-0": {"memory": "40Gi", "slices": "7"}, "other": {"memory": "1Gi", "slices": "1"}}
    devices = [
        partition("gpu-0-mig-a", "mig", "5Gi", "1"),
        partition("other-big", "whole", "2Gi", "1", counter_set="other"),
    ]
    slices = [counter_slice(sets=sets), slice_obj("devices", devices, pool=POOL, count=2)]
    taken = frozenset({DeviceID(DRIVER, POOL, "other-big")})
    assert allocate(slices, claim("c", exactly("gpu", MIG)), allocated=taken) == Unschedulable(REASON_CANNOT_ALLOCATE)


def test_a_shared_partitionable_device_consumes_its_counters_once() -> None:
    # allocateDevice: skipCounterCheck for a device allowing multiple allocations that already has
    # a share; so two shares of the whole GPU leave no room for a partition, and none for a second GPU
    # share is needed.
    whole = {**partition("gpu-0", "whole", "40Gi", "7"), "allowMultipleAllocations": True}
    whole["capacity"] = {"memory": {"value": "40Gi"}}
    slices = mig_node(whole | {"name": "gpu-0-shared"})
    shared = exactly("gpu", "device.allowMultipleAllocations", capacity={"memory": "10Gi"})
    outcome = allocate(slices, claim("a", shared), claim("b", shared))
    assert [shares_of(outcome, i)[0][:2] for i in range(2)] == [
        ("gpu-0-shared", "share-1"),
        ("gpu-0-shared", "share-2"),
    ]
    assert allocate(slices, claim("a", shared), claim("m", exactly("gpu", MIG))) == Unschedulable(
        REASON_CANNOT_ALLOCATE
    )


def test_existing_shares_hold_the_counters_for_new_shares() -> None:
    whole = {**partition("gpu-0-shared", "whole", "40Gi", "7"), "allowMultipleAllocations": True}
    whole["capacity"] = {"memory": {"value": "40Gi"}}
    shares = Shares({DeviceID(DRIVER, POOL, "gpu-0-shared"): {"memory": "10Gi"}})
    shared = exactly("gpu", "device.allowMultipleAllocations", capacity={"memory": "10Gi"})
    assert picked(allocate(mig_node(whole), claim("a", shared), shared=shares)) == ["gpu-0-shared"]
    assert allocate(mig_node(whole), claim("m", exactly("gpu", MIG)), shared=shares) == Unschedulable(
        REASON_CANNOT_ALLOCATE
    )


def test_a_tainted_partition_gives_its_counters_back() -> None:
    # Decision: upstream 1.36 keeps a device's counters when a taint rejects it after the counter
    # check; here a rejected device never holds counters, so the untainted whole GPU still fits.
    tainted = partition("gpu-0-mig-t", "mig", "40Gi", "7")
    tainted["taints"] = [{"key": "broken", "effect": "NoSchedule"}]
    devices = [tainted, partition("gpu-0", "whole", "40Gi", "7")]
    slices = [counter_slice(), slice_obj("devices", devices, pool=POOL, count=2)]
    assert picked(allocate(slices, claim("c"))) == ["gpu-0"]


# ---------------------------------------------------------------------------------------- invalid pools


@pytest.mark.parametrize(
    ("consumes", "problem"),
    [
        ({"counterSet": "nope", "counters": {"memory": {"value": "1Gi"}}}, "counter set nope not found"),
        ({"counterSet": "gpu-0", "counters": {"nope": {"value": "1"}}}, "counter nope not found in counter set gpu-0"),
    ],
)
def test_a_device_consuming_an_unknown_counter_makes_the_pool_invalid(consumes: dict[str, Any], problem: str) -> None:
    bad = {"name": "bad", "consumesCounters": [consumes]}
    outcome = allocate(mig_node(bad), claim("c", exactly("gpu", WHOLE)))
    assert isinstance(outcome, Unschedulable)
    assert "invalid resource pools were encountered" in outcome.reason


def test_a_negative_counter_is_a_parse_error_naming_the_field() -> None:
    obj = counter_slice(sets={"gpu-0": {"memory": "-1Gi"}})
    with pytest.raises(ParseError, match=r"sharedCounters\[0\]\.counters\['memory'\]\.value: must not be negative"):
        parse_resource_slice(obj)


def test_counters_published_for_another_node_still_count_for_the_pool() -> None:
    # The counter slice names node-2; node-1's devices of the same pool still draw from it.
    slices = mig_node(node="node-2")
    assert picked(allocate(slices, claim("c", exactly("gpu", WHOLE)))) == ["gpu-0"]
    assert allocate(slices, claim("a", exactly("gpu", WHOLE)), claim("b", exactly("gpu", MIG))) == Unschedulable(
        REASON_CANNOT_ALLOCATE
    )


def test_a_node_does_not_see_pools_it_has_no_devices_from() -> None:
    # Decision: upstream gathers every counter slice on every node, so node-2 would see node-1's
    # MIG pool (empty); here it does not, and a broken MIG pool elsewhere cannot fail this node.
    idx = index(*mig_node(), slice_obj("theirs", [gpu("t")], node="node-2", pool="p2"))
    assert [p.id for p in idx.pools_for(NodeRef("node-2")).gathered] == [f"{DRIVER}/p2"]
    assert [p.id for p in idx.pools_for(NodeRef(NODE)).gathered] == [f"{DRIVER}/{POOL}"]


def test_a_changed_counter_slice_for_another_node_refreshes_the_pool() -> None:
    counters, devices = mig_node(node="node-2")
    idx = index(devices)
    assert idx.pools_for(NodeRef(NODE)).gathered[0].incomplete  # the counter slice is not there yet
    idx.upsert(parse_resource_slice(counters))
    pools = idx.pools_for(NodeRef(NODE))
    assert pools.gathered[0].usable and set(pools.counters[(DRIVER, POOL)].sets) == {"gpu-0"}
    smaller = counter_slice(node="node-2", sets={"gpu-0": {"memory": "10Gi", "slices": "7"}})
    idx.upsert(parse_resource_slice(smaller))
    assert idx.pools_for(NodeRef(NODE)).counters[(DRIVER, POOL)].sets["gpu-0"]["memory"] == 10 * 2**30
