"""Cache accounting: every pod counted exactly once, in any event order; the assume ledger."""

from __future__ import annotations

import asyncio
import gc
from dataclasses import fields, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.cluster.cache import ClusterCache
from app.cluster.objects import node_from_obj, pod_from_obj
from app.cluster.usage import NodeUsage
from scoring.framework import Code, Status
from tests.app.cache_ops import Clock, apply_pod_event
from tests.conftest import labelled, node_obj, pod_obj


def _cache(clock: Clock | None = None) -> ClusterCache:
    cache = ClusterCache(assume_ttl=60, clock=clock or Clock())
    cache.replace_nodes([node_from_obj(node_obj("g1", gpus=8)), node_from_obj(node_obj("g2", gpus=8))])
    return cache


def test_update_moves_contribution_and_delete_is_idempotent() -> None:
    cache = _cache()
    pod = pod_from_obj(pod_obj("p", gpus=2, cpu="500m", memory=None, node="g1", phase="Running"))
    cache.upsert_pod(pod)
    cache.upsert_pod(pod)  # a duplicate event changes nothing
    info = cache.node_info("g1")
    assert info is not None
    assert info.requested == {"cpu": 500, "nvidia.com/gpu": 2}
    assert (info.non_zero_cpu, info.non_zero_memory, info.pod_count) == (500, 200 * 1024 * 1024, 1)
    cache.upsert_pod(replace(pod, node_name="g2"))
    assert cache.usage("g1").requested == {} and cache.usage("g2").requested["nvidia.com/gpu"] == 2
    cache.delete_pod(pod.uid)
    cache.delete_pod(pod.uid)
    assert cache.usage("g2").pod_count == 0
    cache.check_invariants()


@pytest.mark.parametrize("field", [f.name for f in fields(NodeUsage)])
def test_the_invariant_check_sees_a_drift_in_every_aggregate(field: str) -> None:
    """Each aggregate a node's usage keeps is compared with the recount: a drift in any one fails."""
    cache = _cache()
    cache.upsert_pod(pod_from_obj(pod_obj("p", gpus=2, cpu="500m", node="g1", phase="Running")))
    cache.check_invariants()
    usage = cache._usage["g1"]
    value = getattr(usage, field)
    if isinstance(value, int):
        setattr(usage, field, value + 1)
    elif isinstance(value, set):
        value.add("another-uid")
    else:
        value["drift"] = {0: 1} if field == "kinds" else 1
    with pytest.raises(AssertionError, match="usage of node g1 drifted"):
        cache.check_invariants()


def test_assumption_lifecycle() -> None:
    clock = Clock()
    cache = _cache(clock)
    pod = pod_from_obj(pod_obj("p", gpus=3))
    cache.upsert_pod(pod)  # pending: counts nowhere
    assert cache.usage("g1").pod_count == 0
    assert cache.assume(pod, "g1") is None
    assert cache.usage("g1").requested["nvidia.com/gpu"] == 3 and cache.usage("g1").assumed_count == 1
    assert cache.assume(pod, "g2") is None  # replaced, never added twice
    assert cache.usage("g1").pod_count == 0 and cache.usage("g2").requested["nvidia.com/gpu"] == 3
    cache.upsert_pod(replace(pod, node_name="g2"))  # the watch confirms
    assert not cache.ledger and cache.usage("g2").assumed_count == 0
    assert cache.usage("g2").requested["nvidia.com/gpu"] == 3
    cache.check_invariants()


def test_the_watch_confirming_an_assumption_leaves_the_node_row_as_it_is() -> None:
    """Scoring memoises per table row (its stamp): the same demand confirmed on the same node, or a
    status update of a bound pod, must not write the row again; a changed demand must."""
    cache = _cache()
    pod = pod_from_obj(pod_obj("p", gpus=3))
    cache.upsert_pod(pod)
    assert cache.assume(pod, "g1") is None
    row = cache.table.index["g1"]
    assumed = int(cache.table.stamps[row])
    bound = replace(pod, node_name="g1", resource_version="7")
    cache.upsert_pod(bound)  # the watch confirms
    assert int(cache.table.stamps[row]) == assumed
    assert cache.usage("g1").assumed_count == 0 and cache.counted(pod.uid) == ("g1", bound)
    running = pod_from_obj(pod_obj("p", gpus=3, node="g1", phase="Running", uid=pod.uid))
    cache.upsert_pod(running)
    assert int(cache.table.stamps[row]) == assumed and cache.counted(pod.uid) == ("g1", running)
    cache.upsert_pod(pod_from_obj(pod_obj("p", gpus=4, node="g1", phase="Running", uid=pod.uid)))  # resized
    assert int(cache.table.stamps[row]) > assumed
    info = cache.node_info("g1")
    assert info is not None and info.requested["nvidia.com/gpu"] == 4
    cache.check_invariants()


def test_assumption_expires_after_ttl() -> None:
    clock = Clock()
    cache = _cache(clock)
    pod = pod_from_obj(pod_obj("p", gpus=3))
    cache.assume(pod, "g1")
    clock.now += 59
    assert cache.expire() == []
    clock.now += 2
    assert [a.pod.uid for a in cache.expire()] == [pod.uid]
    assert cache.usage("g1").requested == {}


def test_failed_check_leaves_previous_assumption() -> None:
    cache = _cache()
    pod = pod_from_obj(pod_obj("p", gpus=3))
    cache.assume(pod, "g1")
    refused = Status(Code.UNSCHEDULABLE, "no")
    assert cache.assume(pod, "g2", check=lambda node: refused) is refused
    assert cache.ledger[pod.uid].node == "g1" and cache.usage("g1").requested["nvidia.com/gpu"] == 3
    cache.check_invariants()


def test_deleted_pod_drops_assumption_and_terminal_pod_stops_counting() -> None:
    cache = _cache()
    pod = pod_from_obj(pod_obj("p", gpus=1))
    cache.assume(pod, "g1")
    cache.delete_pod(pod.uid)
    assert not cache.ledger and cache.usage("g1").pod_count == 0
    running = pod_from_obj(pod_obj("r", gpus=1, node="g1", phase="Running"))
    cache.upsert_pod(running)
    cache.upsert_pod(replace(running, terminal=True))
    assert cache.usage("g1").pod_count == 0
    cache.check_invariants()


def test_relist_replaces_exactly() -> None:
    cache = _cache()
    a = pod_from_obj(pod_obj("a", gpus=1, node="g1", phase="Running"))
    b = pod_from_obj(pod_obj("b", gpus=2, node="g1", phase="Running"))
    cache.replace_pods([a, b])
    cache.replace_pods([replace(b, node_name="g2")])
    assert set(cache.pods) == {b.uid}
    assert cache.usage("g1").requested == {} and cache.usage("g2").requested["nvidia.com/gpu"] == 2
    cache.check_invariants()


_ops = st.lists(
    st.tuples(
        st.sampled_from(["upsert", "delete", "assume", "forget", "expire", "relist"]),
        st.integers(0, 5),  # pod
        st.sampled_from(["", "g1", "g2"]),  # node
        st.booleans(),  # terminal
        st.integers(0, 4),  # gpus
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(_ops)
def test_any_event_order_keeps_usage_exact(ops: list[tuple[str, int, str, bool, int]]) -> None:
    clock = Clock()
    cache = _cache(clock)
    for op, index, node, terminal, gpus in ops:
        pod = replace(pod_from_obj(pod_obj(f"p{index}", gpus=gpus, uid=f"uid-{index}", node=node)), terminal=terminal)
        if not apply_pod_event(cache, clock, op, pod, node):  # a relist without the pod
            cache.replace_pods([p for p in cache.pods.values() if p.uid != pod.uid])
        cache.check_invariants()


def test_subscribers_get_typed_events_in_the_order_things_change() -> None:
    from app.cluster.cache_events import CacheEvent, Counted, NodeChanged, PodChanged, PodCounted

    cache = ClusterCache()
    events: list[CacheEvent] = []
    cache.subscribe(events.append)
    cache.upsert_node(node_from_obj(node_obj("g1", gpus=8)))
    pending = pod_from_obj(pod_obj("p", gpus=1, uid="u1"))
    cache.upsert_pod(pending)
    assert cache.assume(pending, "g1") is None
    bound = pod_from_obj(pod_obj("p", gpus=1, node="g1", uid="u1"))
    cache.upsert_pod(bound)
    relabelled = node_obj("g1", gpus=8)
    relabelled["metadata"]["labels"] = {"pool": "a"}
    cache.upsert_node(node_from_obj(relabelled))
    cache.delete_pod(pending.uid)
    cache.delete_node("g1")

    assert events[0] == NodeChanged("g1", {})
    assert events[1] == PodChanged(pending.uid, pending)  # pending: counts nowhere, nothing else
    assert isinstance(events[2], PodCounted) and events[2].counted is not None
    assumed = events[2].counted
    assert (assumed.node, assumed.assumed) == ("g1", True)
    # The watch confirms the bind: counted as the bound pod now, then the pod event.
    assert events[3] == PodCounted(pending.uid, Counted("g1", bound, False))
    assert events[4] == PodChanged(pending.uid, bound)
    # New labels: the node, then its pods again (their flavor may have changed).
    assert events[5] == NodeChanged("g1", {"pool": "a"})
    assert events[6] == PodCounted(pending.uid, Counted("g1", bound, False))
    assert events[7:] == [PodCounted(pending.uid, None), PodChanged(pending.uid, None), NodeChanged("g1", None)]


def test_a_node_update_that_changes_nothing_the_cache_reads_changes_nothing() -> None:
    """Status reports, images, annotations: no new snapshot, row stamp, nodes_version or event, so no
    memoised score and no cluster total goes stale; allocatable, labels or cordoning each count."""
    from app.cluster.cache_events import CacheEvent, NodeChanged

    cache = ClusterCache()
    first = node_obj("g1", gpus=8)
    first["metadata"]["resourceVersion"] = "1"
    cache.upsert_node(node_from_obj(first))
    events: list[CacheEvent] = []
    cache.subscribe(events.append)
    table = cache.table
    before = (cache.nodes_version, cache.generation, int(table.stamps[table.index["g1"]]))

    report = node_obj("g1", gpus=8)
    report["metadata"].update(resourceVersion="2", annotations={"node.alpha.kubernetes.io/ttl": "0"})
    report["status"].update(images=[{"names": ["registry.k8s.io/pause:3.10"]}], conditions=[{"type": "Ready"}])
    cache.upsert_node(node_from_obj(report))
    table = cache.table
    assert (cache.nodes_version, cache.generation, int(table.stamps[table.index["g1"]])) == before
    assert events == []
    assert cache.nodes["g1"].resource_version == "2"  # the newest object is kept all the same

    grown = node_obj("g1", gpus=4)
    relabelled = labelled("g1", {"pool": "a"}, gpus=4)
    cordoned = labelled("g1", {"pool": "a"}, gpus=4)
    cordoned["spec"] = {"unschedulable": True}
    for version, changed in enumerate((grown, relabelled, cordoned), 3):
        changed["metadata"]["resourceVersion"] = str(version)
        cache.upsert_node(node_from_obj(changed))
        assert cache.nodes_version == before[0] + version - 2
        assert events[-1] == NodeChanged("g1", dict(changed["metadata"].get("labels") or {}))
    assert cache.node_info("g1").allocatable["nvidia.com/gpu"] == 4  # type: ignore[union-attr]


def test_snapshots_are_rebuilt_once_per_event_loop_step_and_on_read() -> None:
    """Several changes to a node in one step rebuild it once, right after the step (not at the next
    request); without a running loop the next read rebuilds it."""
    cache = ClusterCache()
    cache.upsert_node(node_from_obj(node_obj("g1", gpus=8)))
    pod = pod_from_obj(pod_obj("p", gpus=2, node="g1", uid="p"))

    async def step() -> None:
        cache.upsert_pod(pod)
        cache.assume(pod_from_obj(pod_obj("q", gpus=1, uid="q")), "g1")
        assert cache._stale == {"g1": None}  # both changes wait for one rebuild
        await asyncio.sleep(0)  # the step ends: the loop runs the scheduled rebuild
        assert cache._stale == {}

    asyncio.run(step())
    assert cache.node_info("g1").requested["nvidia.com/gpu"] == 3  # type: ignore[union-attr]
    cache.delete_pod("p")  # no loop: rebuilt on the read
    assert cache.node_info("g1").requested["nvidia.com/gpu"] == 1  # type: ignore[union-attr]


def test_a_read_of_one_stale_node_leaves_its_table_row_to_the_next_read_of_the_table() -> None:
    """``node_info`` rebuilds the one node it is asked about, not its row: the row is written when the
    table is next read, from the snapshot as it then is (changed again meanwhile: rebuilt once more)."""
    cache = ClusterCache()
    for name in ("g1", "g2"):
        cache.upsert_node(node_from_obj(node_obj(name, gpus=8)))
    table = cache.table
    stamps = {name: int(table.stamps[table.index[name]]) for name in ("g1", "g2")}
    cache.assume(pod_from_obj(pod_obj("q", gpus=1, uid="q")), "g1")
    cache.assume(pod_from_obj(pod_obj("r", gpus=2, uid="r")), "g2")
    assert cache.node_info("g1").requested["nvidia.com/gpu"] == 1  # type: ignore[union-attr]
    assert int(cache._table.stamps[table.index["g1"]]) == stamps["g1"]  # the row is not written yet
    assert cache.node_info("g2").requested["nvidia.com/gpu"] == 2  # type: ignore[union-attr]
    cache.assume(pod_from_obj(pod_obj("s", gpus=4, uid="s")), "g2")  # g2 changes again after the read
    table = cache.table
    for name, held in (("g1", 1), ("g2", 6)):
        assert int(table.stamps[table.index[name]]) > stamps[name]
        assert int(table.requested["nvidia.com/gpu"][table.index[name]]) == held
        assert cache.node_info(name).requested["nvidia.com/gpu"] == held  # type: ignore[union-attr]
    assert (cache._stale, cache._unrowed) == ({}, {})
    cache.delete_node("g1")  # a node read, then deleted before the table was: no row is written for it
    cache.assume(pod_from_obj(pod_obj("t", gpus=1, uid="t")), "g2")
    cache.node_info("g2")
    cache.delete_node("g2")
    assert "g2" not in cache.table.index


def test_pods_and_nodes_removed_from_the_cache_leave_no_cycles() -> None:
    """The service freezes the cache once it is listed (app/runtime.py): frozen objects are never
    collected as cycles, so what the watches remove must be freed by reference counting alone."""
    cache = ClusterCache()
    for i in range(20):
        cache.upsert_node(node_from_obj(node_obj(f"n{i}", gpus=8)))
        for j in range(5):
            cache.upsert_pod(pod_from_obj(pod_obj(f"p{i}-{j}", gpus=1, node=f"n{i}", uid=f"p{i}-{j}")))
    pending = pod_from_obj(pod_obj("pending", gpus=1, uid="pending"))
    cache.upsert_pod(pending)
    assert cache.assume(pending, "n0") is None
    assert cache.table is not None
    gc.disable()
    try:
        gc.collect()
        for uid in list(cache.pods):
            cache.delete_pod(uid)
        for name in list(cache.nodes):
            cache.delete_node(name)
        assert cache.table is not None  # rebuilt without them
        assert gc.collect() == 0
    finally:
        gc.enable()


def test_snapshots_and_the_table_carry_the_nodes_labels() -> None:
    """GpuModelBalance reads a node's GPU model label from the table the cache keeps."""
    cache = ClusterCache()
    first = node_obj("g1", gpus=8)
    first["metadata"]["labels"] = {"nvidia.com/gpu.product": "A100"}
    cache.upsert_node(node_from_obj(first))
    cache.upsert_node(node_from_obj(node_obj("g2", gpus=8)))
    snapshot = cache.node_info("g1")
    assert snapshot is not None and snapshot.labels == {"nvidia.com/gpu.product": "A100"}
    table = cache.table
    codes, values = table.label_codes("nvidia.com/gpu.product")
    assert values == ("A100",)
    assert [int(codes[table.index[name]]) for name in ("g1", "g2")] == [0, -1]
    relabelled = node_obj("g2", gpus=8)
    relabelled["metadata"]["labels"] = {"nvidia.com/gpu.product": "H100"}
    cache.upsert_node(node_from_obj(relabelled))
    codes, values = cache.table.label_codes("nvidia.com/gpu.product")
    assert values == ("A100", "H100")
    assert [int(codes[table.index[name]]) for name in ("g1", "g2")] == [0, 1]


def test_nodes_with_a_prefer_no_schedule_taint_are_kept_apart() -> None:
    """tieBreak.random reads which nodes have a PreferNoSchedule taint: added, removed (a change the
    snapshots do not need) and deleted with the node."""
    cache = ClusterCache()
    tainted = node_obj("g1", gpus=8)
    tainted["spec"] = {"taints": [{"key": "a", "effect": "NoSchedule"}, {"key": "spot", "effect": "PreferNoSchedule"}]}
    cache.upsert_node(node_from_obj(tainted))
    cache.upsert_node(node_from_obj(node_obj("g2", gpus=8)))
    assert cache.prefer_no_schedule == {"g1"}
    cache.check_invariants()
    tainted["spec"]["taints"] = tainted["spec"]["taints"][:1]
    cache.upsert_node(node_from_obj(tainted))
    assert cache.prefer_no_schedule == set()
    tainted["spec"]["taints"].append({"key": "spot", "effect": "PreferNoSchedule"})
    cache.upsert_node(node_from_obj(tainted))
    assert cache.prefer_no_schedule == {"g1"}
    cache.delete_node("g1")
    assert cache.prefer_no_schedule == set()
    cache.check_invariants()
