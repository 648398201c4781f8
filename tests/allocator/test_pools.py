"""Pool gathering for one node and the KEP-5773 search order, through ``SliceIndex.pools_for``.

Expected orders are derived by hand from the reference's section 4 and upstream 1.36's
``GatherPools`` (pools_incubating.go): every pool without binding-condition devices before every
pool with them, across drivers; within each part pools by driver, then pool priority (higher
first), then name; slices in a pool by slice priority (higher first), then name; devices in
published order.
"""

from __future__ import annotations

from allocator import NodeRef
from tests.allocator.builders import (
    DRIVER,
    NODE,
    OTHER_DRIVER,
    candidate_names,
    gpu,
    index,
    labels_selector,
    rslice,
    slice_obj,
)

# ---------------------------------------------------------------------------------------- order


def test_devices_keep_their_published_order_within_a_slice() -> None:
    idx = index(slice_obj("s", [gpu("c"), gpu("a"), gpu("b")], pool="p"))
    assert candidate_names(idx) == ["p/c", "p/a", "p/b"]


def test_slices_without_priority_are_ordered_by_name() -> None:
    idx = index(
        slice_obj("s-b", [gpu("b0")], pool="p", count=2),
        slice_obj("s-a", [gpu("a0")], pool="p", count=2),
    )
    assert candidate_names(idx) == ["p/a0", "p/b0"]


def test_higher_slice_priority_comes_first_then_name() -> None:
    # s-a (1) and s-c (1) tie and go by name; s-b (5) is first; s-d (unset = 0) last.
    idx = index(
        slice_obj("s-a", [gpu("a")], pool="p", count=4, priority=1),
        slice_obj("s-b", [gpu("b")], pool="p", count=4, priority=5),
        slice_obj("s-c", [gpu("c")], pool="p", count=4, priority=1),
        slice_obj("s-d", [gpu("d")], pool="p", count=4),
    )
    assert candidate_names(idx) == ["p/b", "p/a", "p/c", "p/d"]


def test_negative_slice_priority_comes_after_unset() -> None:
    idx = index(
        slice_obj("s-a", [gpu("a")], pool="p", count=2, priority=-1),
        slice_obj("s-z", [gpu("z")], pool="p", count=2),
    )
    assert candidate_names(idx) == ["p/z", "p/a"]


def test_spec_slice_priority_overrides_annotation_in_the_order() -> None:
    # Annotations alone would put s-a first (10 > 0); the spec field of s-a (-10) wins over it.
    idx = index(
        slice_obj("s-a", [gpu("a")], pool="p", count=2, priority=10, spec_priority=-10),
        slice_obj("s-b", [gpu("b")], pool="p", count=2),
    )
    assert candidate_names(idx) == ["p/b", "p/a"]


def test_pools_without_priority_are_ordered_by_name() -> None:
    idx = index(slice_obj("s1", [gpu("x")], pool="zeta"), slice_obj("s2", [gpu("y")], pool="alpha"))
    assert candidate_names(idx) == ["alpha/y", "zeta/x"]


def test_pool_priority_outranks_slice_priority() -> None:
    # Pool "b" (pool priority 1) holds a slice of priority -100; pool "a" (0) one of priority 100.
    # Pool order decides first, so b's device is tried before a's.
    idx = index(
        slice_obj("s-a", [gpu("in-a")], pool="a", priority=100),
        slice_obj("s-b", [gpu("in-b")], pool="b", pool_priority=1, priority=-100),
    )
    assert candidate_names(idx) == ["b/in-b", "a/in-a"]


def test_negative_pool_priority_comes_after_unset() -> None:
    idx = index(
        slice_obj("s-a", [gpu("x")], pool="a", pool_priority=-3),
        slice_obj("s-b", [gpu("y")], pool="b"),
    )
    assert candidate_names(idx) == ["b/y", "a/x"]


def test_pool_priority_does_not_order_across_drivers() -> None:
    # The KEP orders pools of one driver only: driver name decides first, so gpu.example.com's
    # pool (priority 0) comes before nic.example.com's (priority 100).
    idx = index(
        slice_obj("s-nic", [gpu("n")], pool="nic", driver=OTHER_DRIVER, pool_priority=100),
        slice_obj("s-gpu", [gpu("g")], pool="gpu", driver=DRIVER),
    )
    assert DRIVER < OTHER_DRIVER
    assert candidate_names(idx) == ["gpu/g", "nic/n"]


def test_pools_with_binding_condition_devices_come_after_equal_priority_pools() -> None:
    bc = {**gpu("bc"), "bindingConditions": ["attached"]}
    idx = index(slice_obj("s-a", [bc], pool="a"), slice_obj("s-b", [gpu("plain")], pool="b"))
    pools = idx.pools_for(NodeRef(NODE))
    assert [p.name for p in pools.pools] == ["b", "a"]


def _bc(name: str) -> dict[str, object]:
    return {**gpu(name), "bindingConditions": ["attached"]}


def test_binding_condition_pools_come_after_the_plain_pools_of_every_driver() -> None:
    # upstream 1.36 (pools_incubating.go GatherPools): the binding-condition pools are sorted apart
    # and appended after all others, so gpu.example.com's pool with a binding-condition device comes
    # after nic.example.com's plain pool although its driver name sorts first.
    idx = index(
        slice_obj("s-bc", [_bc("attach")], pool="a-bc", driver=DRIVER),
        slice_obj("s-plain", [gpu("local")], pool="z-plain", driver=OTHER_DRIVER),
    )
    assert DRIVER < OTHER_DRIVER
    assert candidate_names(idx) == ["z-plain/local", "a-bc/attach"]
    assert [(p.driver, p.name) for p in idx.pools_for(NodeRef(NODE)).gathered] == [
        (OTHER_DRIVER, "z-plain"),
        (DRIVER, "a-bc"),
    ]


def test_a_binding_condition_pool_comes_after_plain_pools_of_any_priority() -> None:
    # Pool priority orders within each part only: 100 on a binding-condition pool does not bring it
    # before a plain pool of priority -5.
    idx = index(
        slice_obj("s-bc", [_bc("attach")], pool="bc", pool_priority=100),
        slice_obj("s-low", [gpu("low")], pool="low", pool_priority=-5),
    )
    assert candidate_names(idx) == ["low/low", "bc/attach"]


def test_binding_condition_pools_are_ordered_by_driver_priority_and_name_among_themselves() -> None:
    idx = index(
        slice_obj("s-1", [_bc("n")], pool="nic", driver=OTHER_DRIVER, pool_priority=50),
        slice_obj("s-2", [_bc("b")], pool="b", driver=DRIVER),
        slice_obj("s-3", [_bc("a")], pool="a", driver=DRIVER),
        slice_obj("s-4", [_bc("c")], pool="c", driver=DRIVER, pool_priority=1),
        slice_obj("s-5", [gpu("plain")], pool="plain", driver=OTHER_DRIVER),
    )
    assert candidate_names(idx) == ["plain/plain", "c/c", "a/a", "b/b", "nic/n"]


def test_an_unusable_pool_sorts_with_the_pools_without_binding_conditions() -> None:
    # Upstream's incomplete or invalid pool has no device slices, so none with binding conditions:
    # it stays in the first part (and is the pool an ``All`` request's error names first).
    idx = index(
        slice_obj("s-inc", [_bc("x")], pool="b-incomplete", count=2),
        slice_obj("s-dup", [_bc("d"), _bc("d")], pool="c-invalid"),
        slice_obj("s-bc", [_bc("y")], pool="a-bc"),
        slice_obj("s-plain", [gpu("z")], pool="d-plain"),
    )
    pools = idx.pools_for(NodeRef(NODE))
    assert [p.name for p in pools.gathered] == ["b-incomplete", "c-invalid", "d-plain", "a-bc"]
    assert [p.name for p in pools.unusable] == ["b-incomplete", "c-invalid"]
    assert not any(p.has_binding_conditions for p in pools.unusable)


# ---------------------------------------------------------------------------------------- relevance


def test_slices_for_another_node_are_not_relevant() -> None:
    idx = index(slice_obj("mine", [gpu("m")], pool="p1"), slice_obj("theirs", [gpu("t")], node="node-2", pool="p2"))
    assert candidate_names(idx) == ["p1/m"]


def test_all_nodes_slices_are_relevant_everywhere() -> None:
    idx = index(slice_obj("net", [gpu("n")], pool="net", all_nodes=True))
    assert candidate_names(idx, NodeRef("node-1")) == ["net/n"]
    assert candidate_names(idx, NodeRef("node-9")) == ["net/n"]


def test_node_selector_slices_are_relevant_only_to_matching_labels() -> None:
    idx = index(slice_obj("rack", [gpu("r")], pool="rack", node_selector=labels_selector("rack", "r1")))
    assert candidate_names(idx, NodeRef("a", {"rack": "r1"})) == ["rack/r"]
    assert candidate_names(idx, NodeRef("b", {"rack": "r2"})) == []
    assert candidate_names(idx, NodeRef("c")) == []


def test_node_selector_match_fields_select_by_node_name() -> None:
    selector = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}]}]}
    idx = index(slice_obj("s", [gpu("x")], pool="p", node_selector=selector))
    assert candidate_names(idx, NodeRef("a")) == ["p/x"]
    assert candidate_names(idx, NodeRef("b")) == []


def test_per_device_node_selection_devices_for_other_nodes_are_marked_off_node() -> None:
    obj = slice_obj("s", [{**gpu("mine"), "nodeName": NODE}, {**gpu("theirs"), "nodeName": "node-2"}], pool="p")
    del obj["spec"]["nodeName"]
    obj["spec"]["perDeviceNodeSelection"] = True
    pools = index(obj).pools_for(NodeRef(NODE))
    assert [c.id.device for i, c in enumerate(pools.candidates) if i not in pools.off_node] == ["mine"]


def test_a_shared_counters_slice_offers_no_devices_on_any_node() -> None:
    # 1.36 buildPool: a slice with sharedCounters is a counter slice (the API allows devices or
    # counters, never both), so devices published in one anyway are offered to no node.
    theirs = slice_obj("theirs", [gpu("t")], node="node-2", pool="p2")
    theirs["spec"]["sharedCounters"] = [{"name": "mem", "counters": {"m": {"value": "8Gi"}}}]
    idx = index(theirs, slice_obj("mine", [gpu("m")], pool="p1"))
    assert candidate_names(idx, NodeRef("node-1")) == ["p1/m"]
    assert candidate_names(idx, NodeRef("node-2")) == []


# ---------------------------------------------------------------------------------------- generations, completeness


def test_only_the_highest_generation_is_used() -> None:
    idx = index(
        slice_obj("old", [gpu("old-dev")], pool="p", generation=1),
        slice_obj("new", [gpu("new-dev")], pool="p", generation=2),
    )
    pools = idx.pools_for(NodeRef(NODE))
    assert candidate_names(idx) == ["p/new-dev"]
    assert [(p.name, p.generation) for p in pools.gathered] == [("p", 2)]


def test_an_incomplete_pool_contributes_no_devices() -> None:
    # resourceSliceCount 2, one slice published: incomplete, kept only to explain why.
    idx = index(slice_obj("s1", [gpu("g")], pool="p", count=2), slice_obj("other", [gpu("o")], pool="q"))
    pools = idx.pools_for(NodeRef(NODE))
    assert candidate_names(idx) == ["q/o"]
    assert [(p.name, p.incomplete) for p in pools.unusable] == [("p", True)]
    assert not pools.has_invalid


def test_a_pool_is_complete_when_its_other_slices_are_for_other_nodes() -> None:
    # Two slices of generation 1, count 2: one for this node, one for node-2. All are published.
    idx = index(
        slice_obj("s1", [gpu("here")], pool="shared", count=2),
        slice_obj("s2", [gpu("there")], node="node-2", pool="shared", count=2),
    )
    assert candidate_names(idx) == ["shared/here"]


def test_an_obsolete_generation_is_dropped_silently() -> None:
    # This node still has generation 1 (count 2: incomplete on its own); the driver already
    # published generation 2 for node-2. The pool is being replaced: no devices, not unusable.
    idx = index(
        slice_obj("s1", [gpu("here")], pool="p", count=2, generation=1),
        slice_obj("s2", [gpu("there")], node="node-2", pool="p", count=2, generation=2),
    )
    pools = idx.pools_for(NodeRef(NODE))
    assert pools.gathered == ()
    assert pools.candidates == ()


def test_duplicate_device_names_in_a_pool_make_it_invalid() -> None:
    idx = index(
        slice_obj("s1", [gpu("g0")], pool="p", count=2),
        slice_obj("s2", [gpu("g0")], pool="p", count=2),
    )
    pools = idx.pools_for(NodeRef(NODE))
    assert pools.candidates == ()
    assert pools.has_invalid
    assert "duplicate device name g0" in pools.unusable[0].invalid


def test_same_device_name_in_different_pools_is_fine() -> None:
    idx = index(slice_obj("s1", [gpu("g0")], pool="p"), slice_obj("s2", [gpu("g0")], pool="q"))
    assert candidate_names(idx) == ["p/g0", "q/g0"]


def test_mismatched_pool_priority_in_one_generation_makes_the_pool_invalid() -> None:
    idx = index(
        slice_obj("s1", [gpu("a")], pool="p", count=2, pool_priority=1),
        slice_obj("s2", [gpu("b")], pool="p", count=2, pool_priority=2),
    )
    pools = idx.pools_for(NodeRef(NODE))
    assert pools.candidates == ()
    assert "disagree on the pool priority (1, 2)" in pools.unusable[0].invalid


def test_mismatch_with_a_slice_for_another_node_also_invalidates() -> None:
    # The KEP says all slices of the generation: node-2's slice (pool priority 5) counts too.
    idx = index(
        slice_obj("s1", [gpu("a")], pool="p", count=2, pool_priority=0),
        slice_obj("s2", [gpu("b")], node="node-2", pool="p", count=2, pool_priority=5),
    )
    pools = idx.pools_for(NodeRef(NODE))
    assert pools.candidates == ()
    assert pools.has_invalid


def test_unset_pool_priority_counts_as_zero_in_the_check() -> None:
    idx = index(
        slice_obj("s1", [gpu("a")], pool="p", count=2),
        slice_obj("s2", [gpu("b")], pool="p", count=2, pool_priority=0),
    )
    assert candidate_names(idx) == ["p/a", "p/b"]


def test_pool_priority_of_an_older_generation_does_not_count() -> None:
    # Generation 1 leftovers (priority 9) for node-2 are obsolete; generation 2 agrees on 0.
    idx = index(
        slice_obj("s1", [gpu("a")], pool="p", generation=2),
        slice_obj("old", [gpu("b")], node="node-2", pool="p", generation=1, pool_priority=9),
    )
    assert candidate_names(idx) == ["p/a"]


# ---------------------------------------------------------------------------------------- SliceIndex memo


def test_pools_are_memoised_per_node() -> None:
    idx = index(slice_obj("s", [gpu("g")], pool="p"))
    assert idx.pools_for(NodeRef(NODE)) is idx.pools_for(NodeRef(NODE))


def test_upsert_of_a_slice_for_the_node_is_seen() -> None:
    idx = index(slice_obj("s", [gpu("g")], pool="p"))
    assert candidate_names(idx) == ["p/g"]
    idx.upsert(rslice("s", [gpu("g"), gpu("h")], pool="p"))
    assert candidate_names(idx) == ["p/g", "p/h"]


def test_delete_of_a_slice_is_seen() -> None:
    idx = index(slice_obj("s", [gpu("g")], pool="p"), slice_obj("t", [gpu("h")], pool="q"))
    assert candidate_names(idx) == ["p/g", "q/h"]
    idx.delete("s")
    assert candidate_names(idx) == ["q/h"]
    assert "s" not in idx


def test_upsert_for_another_node_in_the_same_pool_invalidates_this_node() -> None:
    # node-1's pool p is complete alone (count 1); then the driver moves p to count 2 with a
    # slice for node-2 carrying another pool priority: node-1 must see the invalid pool.
    idx = index(
        slice_obj("s1", [gpu("a")], pool="p", count=2), slice_obj("s2", [gpu("b")], node="node-2", pool="p", count=2)
    )
    assert candidate_names(idx) == ["p/a"]
    idx.upsert(rslice("s2", [gpu("b")], node="node-2", pool="p", count=2, pool_priority=3))
    pools = idx.pools_for(NodeRef(NODE))
    assert pools.candidates == ()
    assert pools.has_invalid


def test_deleting_the_other_nodes_slice_makes_the_pool_incomplete() -> None:
    idx = index(
        slice_obj("s1", [gpu("a")], pool="p", count=2), slice_obj("s2", [gpu("b")], node="node-2", pool="p", count=2)
    )
    assert candidate_names(idx) == ["p/a"]
    idx.delete("s2")
    assert candidate_names(idx) == []
    assert idx.pools_for(NodeRef(NODE)).unusable[0].incomplete


def test_a_label_change_regathers_label_dependent_pools() -> None:
    idx = index(slice_obj("rack", [gpu("r")], pool="rack", node_selector=labels_selector("rack", "r1")))
    assert candidate_names(idx, NodeRef(NODE, {"rack": "r1"})) == ["rack/r"]
    assert candidate_names(idx, NodeRef(NODE, {"rack": "r2"})) == []
    assert candidate_names(idx, NodeRef(NODE, {"rack": "r1"})) == ["rack/r"]


def test_equal_labels_in_a_new_mapping_reuse_the_memo() -> None:
    idx = index(slice_obj("rack", [gpu("r")], pool="rack", node_selector=labels_selector("rack", "r1")))
    first = idx.pools_for(NodeRef(NODE, {"rack": "r1"}))
    assert idx.pools_for(NodeRef(NODE, {"rack": "r1"})) is first


def test_a_new_node_selector_slice_is_seen_by_an_already_memoised_node() -> None:
    idx = index(slice_obj("s", [gpu("g")], pool="p"))
    node = NodeRef(NODE, {"rack": "r1"})
    assert candidate_names(idx, node) == ["p/g"]
    idx.upsert(rslice("rack", [gpu("r")], pool="rack", node_selector=labels_selector("rack", "r1")))
    assert candidate_names(idx, node) == ["p/g", "rack/r"]


def test_replace_swaps_every_slice() -> None:
    idx = index(slice_obj("s", [gpu("g")], pool="p"))
    assert candidate_names(idx) == ["p/g"]
    idx.replace([rslice("t", [gpu("h")], pool="q")])
    assert candidate_names(idx) == ["q/h"]
    assert [s.name for s in idx.slices()] == ["t"]
