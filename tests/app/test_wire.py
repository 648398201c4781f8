"""Decoding kube-scheduler bodies: the one-pass Go-cased path, the any-case path, lazy node parsing."""

from __future__ import annotations

import json
from typing import Any
from unittest import mock

import msgspec
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.http import answers, go_layout, wire
from tests.conftest import filter_body, make_service, node_obj, pod_obj


def _nodes_body(items: list[bytes], key: str = "Nodes") -> bytes:
    pod = json.dumps(pod_obj("p")).encode()
    return b'{"Pod":' + pod + b',"' + key.encode() + b'":{"metadata":{},"items":[' + b",".join(items) + b"]}}"


def test_node_name_fast_path_and_fallback_agree() -> None:
    go_order = b'{"metadata":{"name":"n1","uid":"x"},"status":{"allocatable":{"nvidia.com/gpu":"4"}}}'
    other_order = b'{"status":{"allocatable":{"nvidia.com/gpu":"2"}},"metadata":{"uid":"y","name":"n2"}}'
    escaped = b'{"metadata":{"name":"n\\u0033"},"status":{}}'
    for key in ("Nodes", "nodes"):
        args = wire.decode_extender_args(_nodes_body([go_order, other_order, escaped], key))
        assert args.nodes is not None
        assert [n.name for n in args.nodes] == ["n1", "n2", "n3"]
        assert [dict(n.allocatable or {}) for n in args.nodes] == [{"nvidia.com/gpu": "4"}, {"nvidia.com/gpu": "2"}, {}]
        assert [bytes(n.raw) for n in args.nodes] == [go_order, other_order, escaped]


def test_broken_node_is_judged_invalid_not_a_crash() -> None:
    service = make_service([node_obj("known", gpus=4)])
    broken = b'{"metadata":{"name":"broken"},"status":{"allocatable":["not","a","map"]}}'
    body = _nodes_body([json.dumps(node_obj("known", gpus=4)).encode(), broken])
    answer = service.filter(body.replace(b'"Pod":{', b'"Pod":{"x":1,', 1))
    assert answer["Error"] == ""
    assert answer["FailedAndUnresolvableNodes"] == {"broken": "node(s) with invalid allocatable"}


def test_pod_is_parsed_once_for_identical_bytes() -> None:
    service = make_service([node_obj("g1", gpus=4)])
    body = json.dumps({"Pod": pod_obj("p", gpus=1), "NodeNames": ["g1"], "Nodes": None}).encode()
    service.filter(body)
    args = wire.decode_extender_args(body)
    first = service._pod(args.pod_raw)
    assert service._pod(wire.decode_extender_args(body).pod_raw) is first


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b'{"Pod": {"metadata": {"name": "p"}}, "NodeNames": "g1"}', "NodeNames: Expected `array | null`"),
        (b'{"Pod": null, "NodeNames": []}', "Pod: missing or not an object"),
        (b'{"Pod": {"metadata": {"name": "p"}}}', "neither NodeNames nor Nodes is set"),
    ],
)
def test_errors_come_from_the_precise_path(body: bytes, error: str) -> None:
    with pytest.raises(wire.WireError, match=error.replace("|", r"\|")):
        wire.decode_extender_args(body)


def test_encode_echoes_raw_nodes() -> None:
    raw = msgspec.Raw(b'{"metadata":{"name":"a"}}')
    assert wire.encode(wire.filter_result(nodes=[raw])).startswith(
        b'{"Nodes":{"metadata":{},"items":[{"metadata":{"name":"a"}}]}'
    )


@pytest.mark.parametrize("victim", ["a-string", {"metadata": "a-string"}, 7])
def test_preempt_victims_that_are_not_pod_objects_are_a_wire_error(victim: object) -> None:
    """Found by the fuzzer: a victim that is not an object (or whose metadata is not) crashed the
    decoder into an internal error; it is a bad request, answered like any other."""
    body = json.dumps({"Pod": pod_obj("p", gpus=1), "NodeNameToVictims": {"g1": {"Pods": [victim]}}}).encode()
    with pytest.raises(wire.WireError, match="victims of node g1: a victim is not a Pod object"):
        wire.decode_preempt_args(body)


@given(st.lists(st.tuples(st.text(min_size=1, max_size=20), st.integers(min_value=0, max_value=10)), max_size=30))
def test_host_priority_raw_is_the_host_priority_list(entries: list[tuple[str, int]]) -> None:
    """The prebuilt answer decodes to the HostPriorityList (each score in two characters): the hosts
    scored above 0, in order (kube-scheduler counts a host not listed as 0)."""
    prefixes = [b'{"Host":' + json.dumps(name).encode() + b',"Score":' for name, _ in entries]
    scores = [score for _, score in entries]
    names = [name for name, _ in entries]
    raw = wire.host_priority_raw(prefixes, scores)
    listed = [{"Host": name, "Score": score} for name, score in entries if score > 0]
    assert json.loads(bytes(raw)) == json.loads(wire.encode(wire.host_priority_list(names, scores))) == listed
    assert bytes(wire.host_priority_raw(prefixes, np.array(scores, dtype=np.int64))) == bytes(raw)  # as the verb passes


@given(st.data(), st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=20))
def test_a_long_host_priority_list_asked_for_again_is_rewritten_in_place(data: Any, names: list[str]) -> None:
    """The same hosts list (by identity) with new scores on the same hosts: the kept answer with its
    scores rewritten, the very bytes a new join gives; other hosts scored, or a list of equal content
    but another object, are joined anew."""
    prefixes = [b'{"Host":' + json.dumps(name).encode() + b',"Score":' for name in names]
    size = len(names)
    with mock.patch.object(answers, "_REWRITE_MIN", 1):
        scored = np.array(data.draw(st.lists(st.booleans(), min_size=size, max_size=size)))
        for _ in range(3):
            if data.draw(st.booleans()):  # now and then other hosts scored
                scored = np.array(data.draw(st.lists(st.booleans(), min_size=size, max_size=size)))
            values = np.array(data.draw(st.lists(st.integers(1, 10), min_size=size, max_size=size)))
            scores = np.where(scored, values, 0)
            raw = bytes(wire.host_priority_raw(prefixes, scores))
            fresh = bytes(wire.host_priority_raw(list(prefixes), scores))
            assert raw == fresh
            assert json.loads(raw) == [{"Host": n, "Score": int(v)} for n, v in zip(names, scores, strict=True) if v]
        assert len(answers._rewritable) <= answers._REWRITE_KEPT


def test_the_same_hosts_scored_again_take_the_kept_answer() -> None:
    prefixes = [b'{"Host":"' + name.encode() + b'","Score":' for name in ("a", "b", "c")]
    with mock.patch.object(answers, "_REWRITE_MIN", 1):
        first = bytes(wire.host_priority_raw(prefixes, [3, 0, 10]))
        kept = answers._rewritable[0]
        again = bytes(wire.host_priority_raw(prefixes, [7, 0, 1]))
        assert first == b'[{"Host":"a","Score": 3},{"Host":"c","Score":10}]'
        assert again == b'[{"Host":"a","Score": 7},{"Host":"c","Score": 1}]'
        assert answers._rewritable[0] is kept and kept.slots is not None  # rewritten, not joined
        other = bytes(wire.host_priority_raw(prefixes, [0, 2, 0]))
        assert other == b'[{"Host":"b","Score": 2}]'
        assert answers._rewritable[0] is not kept
        assert bytes(wire.host_priority_raw(prefixes, [0, 0, 0])) == b"[]"


def test_host_priority_raw_refuses_a_score_count_that_does_not_match() -> None:
    with pytest.raises(ValueError, match="2 hosts but 1 scores"):
        wire.host_priority_raw([b'{"Host":"a","Score":', b'{"Host":"b","Score":'], [3])


@pytest.mark.parametrize("score", [-1, 11])
def test_host_priority_raw_refuses_a_score_outside_0_to_10(score: int) -> None:
    with pytest.raises(ValueError, match=r"scores must be 0\.\.10"):
        wire.host_priority_raw([b'{"Host":"a","Score":', b'{"Host":"b","Score":'], np.array([3, score]))


@given(
    st.lists(st.text(min_size=1, max_size=12), unique=True, max_size=20),
    st.lists(st.text(max_size=30), min_size=1, max_size=4),
    st.randoms(use_true_random=False),
)
def test_node_reasons_raw_is_the_map_of_name_to_reason(names: list[str], reasons: list[str], rng: Any) -> None:
    """The prebuilt FailedNodes map decodes to exactly the {name: reason} map it stands for."""
    index = [rng.randrange(len(reasons)) for _ in names]
    keys = [json.dumps(name).encode() + b":" for name in names]
    raw = wire.node_reasons_raw(keys, reasons, index)
    assert json.loads(bytes(raw)) == {name: reasons[i] for name, i in zip(names, index, strict=True)}


_SEAM = '},{"metadata":{"name":"x'  # the item seam, inside strings it must not split anything
_node_names = st.from_regex(r"[a-z0-9]([a-z0-9.\-]{0,20}[a-z0-9])?", fullmatch=True)
_texts = st.one_of(st.text(max_size=15), st.just(_SEAM), st.just('"Nodes":{"metadata":{},"items":['))
_nodes = st.builds(
    lambda name, labels, images, taints: {
        "metadata": {"name": name, "labels": labels, "annotations": {"note": _SEAM}},
        "spec": {"taints": taints},
        "status": {"allocatable": {"cpu": "4"}, "images": images},
    },
    _node_names,
    st.dictionaries(st.text(max_size=8), _texts, max_size=3),
    st.lists(st.builds(lambda n, s: {"names": [n], "sizeBytes": s}, _texts, st.integers(0, 2**40)), max_size=3),
    st.lists(st.builds(lambda k, v: {"key": k, "value": v, "effect": "NoSchedule"}, _texts, _texts), max_size=2),
)


@given(st.lists(_nodes, max_size=6), st.dictionaries(st.text(max_size=5), _texts, max_size=2))
def test_go_node_lists_split_without_decoding_match_the_full_decode(nodes: list[Any], labels: Any) -> None:
    """A body in Go's exact NodeList layout is split at the item seams, never inside a string; the
    names and echoed bytes are those a full decode gives (a trailing space forces that path)."""
    pod = {"metadata": {"name": "p", "labels": labels}, "spec": {}}
    body = msgspec.json.encode({"Pod": pod, "Nodes": {"metadata": {}, "items": nodes}, "NodeNames": None})
    fast = wire._go_node_list(body)
    slow = wire.decode_extender_args(body + b" ")
    assert fast is not None and fast.nodes is not None and slow.nodes is not None
    assert [n.name for n in fast.nodes] == [n.name for n in slow.nodes] == [n["metadata"]["name"] for n in nodes]
    assert [bytes(n.raw) for n in fast.nodes] == [bytes(n.raw) for n in slow.nodes]
    assert json.loads(fast.pod_raw) == pod
    assert [n.allocatable for n in fast.nodes] == [{"cpu": "4"}] * len(nodes)


def _node_list_body(nodes: list[Any]) -> bytes:
    return msgspec.json.encode(
        {"Pod": {"metadata": {"name": "p"}}, "Nodes": {"metadata": {}, "items": nodes}, "NodeNames": None}
    )


@given(
    st.lists(_nodes, max_size=6),
    st.lists(st.tuples(st.integers(0, 5), st.sampled_from(["keep", "change", "drop"])), max_size=6),
)
def test_node_list_items_remembered_from_the_last_body_split_as_a_fresh_scan_does(
    nodes: list[Any], edits: list[tuple[int, str]]
) -> None:
    """The second of two bodies splits into exactly what a splitter that remembers nothing gives;
    an item with the same bytes as last time is the same object, a changed one a new object."""
    second = [dict(node) for node in nodes]
    for index, edit in edits:
        if index < len(second) and edit == "change":
            second[index] = {**second[index], "spec": {"unschedulable": True}}
        elif index < len(second) and edit == "drop":
            del second[index]
    second.reverse()
    remembering = go_layout.NodeListItems(wire.RequestNode)
    first_split = remembering.split(_node_list_body(nodes))
    again = remembering.split(_node_list_body(second))
    fresh = go_layout.NodeListItems(wire.RequestNode).split(_node_list_body(second))
    assert first_split is not None and again is not None and fresh is not None
    assert [(n.name, bytes(n.raw)) for n in again[1]] == [(n.name, bytes(n.raw)) for n in fresh[1]]
    before = {n.name: n for n in first_split[1]}
    for node in again[1]:
        if node.name in before:
            assert (node is before[node.name]) == (bytes(node.raw) == bytes(before[node.name].raw))


def _versioned(name: str, version: str, spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": version}, "spec": spec}


def test_an_item_is_the_last_one_of_its_name_by_resource_version_and_length() -> None:
    """With a resourceVersion, an item that begins as last time's did and ends where it ended is that
    item (the same object); a new resourceVersion or a different length is split and made again."""
    items = go_layout.NodeListItems(wire.RequestNode)
    nodes = [_versioned("a", "7", {"x": 1}), _versioned("b", "8", {})]
    first = items.split(_node_list_body(nodes))
    same = items.split(_node_list_body(nodes))
    assert first is not None and same is not None
    assert same[1][0] is first[1][0] and same[1][1] is first[1][1]
    # The API server never sends other content under one resourceVersion: the rest is not read.
    unread = items.split(_node_list_body([_versioned("a", "7", {"x": 2}), nodes[1]]))
    assert unread is not None and unread[1][0] is first[1][0]
    renewed = items.split(_node_list_body([_versioned("a", "9", {"x": 1}), _versioned("b", "8", {"y": [1, 2]})]))
    assert renewed is not None
    assert [bytes(n.raw) for n in renewed[1]] == [
        msgspec.json.encode(_versioned("a", "9", {"x": 1})),
        msgspec.json.encode(_versioned("b", "8", {"y": [1, 2]})),
    ]
    assert renewed[1][0] is not first[1][0] and renewed[1][1] is not first[1][1]


def test_node_list_items_outlive_a_body_of_a_few_of_them_and_are_bounded() -> None:
    """A /prioritize body of a few nodes between two /filter bodies does not cost the others their
    kept items; items of names not sent for a while go once there are more than twice a body's."""
    items = go_layout.NodeListItems(wire.RequestNode)
    nodes = [_versioned(name, "1", {}) for name in ("a", "b", "c")]
    first = items.split(_node_list_body(nodes))
    assert first is not None and items.split(_node_list_body(nodes[1:2])) is not None
    again = items.split(_node_list_body(nodes))
    assert again is not None and all(x is y for x, y in zip(first[1], again[1], strict=True))
    with mock.patch.object(go_layout, "_ITEMS_KEPT_MIN", 2):
        assert items.split(_node_list_body([_versioned("d", "1", {})])) is not None
    assert set(items.items) == {"d"}


def test_a_remembered_item_followed_by_no_seam_is_split_where_the_scan_splits() -> None:
    """The bytes of last time's item at the start of a longer item are not taken for that item."""
    items = go_layout.NodeListItems(wire.RequestNode)
    head = b'{"Pod":{},"Nodes":{"metadata":{},"items":['
    assert items.split(head + b'{"metadata":{"name":"a"}}' + go_layout.NODES_CLOSE) is not None
    split = items.split(head + b'{"metadata":{"name":"a"}},{"kind":"Node"}' + go_layout.NODES_CLOSE)
    assert split is not None
    assert [(n.name, bytes(n.raw)) for n in split[1]] == [("a", b'{"metadata":{"name":"a"}},{"kind":"Node"}')]
    again = items.split(head + b'{"metadata":{"name":"a"}},{"metadata":{"name":"b"}}' + go_layout.NODES_CLOSE)
    assert again is not None and [n.name for n in again[1]] == ["a", "b"]


@pytest.mark.parametrize(
    "body",
    [
        b'{"Pod":{"metadata":{"name":"p"}},"Nodes":{"metadata":{},"items":[{"kind":"Node"}]},"NodeNames":null}',
        b'{"Pod":{"metadata":{"name":"p"}},"Nodes":{"metadata":{},"items":[{"metadata":{"name":"a\\u0041"}}]},'
        b'"NodeNames":null}',
        b'{"Pod":{},"Nodes":{"metadata":{"resourceVersion":"1"},"items":[]},"NodeNames":null}',
    ],
)
def test_bodies_not_in_go_layout_take_the_decoding_path(body: bytes) -> None:
    assert wire._go_node_list(body) is None


def test_equal_node_name_lists_decode_to_one_list_that_filter_leaves_unchanged() -> None:
    """The same NodeNames bytes give the very same list (the node table then knows its rows at once);
    the list is shared, so filter and prioritize must not modify it."""
    names = [f"n{i}" for i in range(100)]
    service = make_service([node_obj(name, gpus=i % 3) for i, name in enumerate(names)])
    body = json.dumps({"Pod": pod_obj("p", gpus=1), "Nodes": None, "NodeNames": names}, separators=(",", ":"))
    first = wire.decode_extender_args(body.encode()).node_names
    again = wire.decode_extender_args(body.replace('"p"', '"q"').encode()).node_names
    assert first is again and first == names
    service.filter(body.encode())
    service.prioritize(body.encode())
    assert wire.decode_extender_args(body.encode()).node_names == names


def test_prioritize_finds_the_names_filter_answered() -> None:
    """kube-scheduler sends prioritize the nodes filter let through, encoded as Go encodes them: the
    list is recognised by its bytes instead of being decoded again."""
    names = [f"g{i}" for i in range(80)]
    service = make_service([node_obj(name, gpus=4) for name in names])
    pod = pod_obj("p", gpus=1)
    answer = msgspec.json.decode(wire.encode(service.filter(filter_body(pod, [*names, "unknown"]))))
    passed = answer["NodeNames"]
    assert passed == names
    go_body = b'{"Pod":' + msgspec.json.encode(pod) + b',"Nodes":null,"NodeNames":' + msgspec.json.encode(passed) + b"}"
    assert wire.decode_extender_args(go_body).node_names is wire.decode_extender_args(go_body).node_names
    assert (msgspec.json.encode(passed), passed) in go_layout._name_lists


def test_a_broken_node_split_off_unparsed_fails_as_invalid_allocatable_not_as_an_internal_error() -> None:
    service = make_service([node_obj("g1", gpus=4)])
    pod = msgspec.json.encode(pod_obj("p", gpus=1))
    known = msgspec.json.encode({k: v for k, v in node_obj("g1", gpus=4).items() if k != "kind"})
    broken = b'{"metadata":{"name":"fresh"},"status":{"allocatable":{"nvidia.com/gpu":"4",]}}}'
    body = b'{"Pod":' + pod + b',"Nodes":{"metadata":{},"items":[' + known + b"," + broken + b']},"NodeNames":null}'
    assert wire._go_node_list(body) is not None  # the fast path takes it
    answer = msgspec.json.decode(wire.encode(service.filter(body)))
    assert answer["Error"] == ""
    assert answer["FailedAndUnresolvableNodes"] == {"fresh": "node(s) with invalid allocatable"}
    assert [item["metadata"]["name"] for item in answer["Nodes"]["items"]] == ["g1"]


def test_the_kept_name_lists_are_bounded_and_most_recent_first() -> None:
    for i in range(12):
        go_layout.remember_node_names(msgspec.json.encode([f"n{i}"]), [f"n{i}"])
    assert len(go_layout._name_lists) == go_layout._NAME_LISTS_KEPT
    assert [names for _, names in go_layout._name_lists[:2]] == [["n11"], ["n10"]]
    body = b'{"Pod":{"metadata":{"name":"p"}},"Nodes":null,"NodeNames":["n5"]}'
    assert wire.decode_extender_args(body).node_names == ["n5"]
    assert go_layout._name_lists[0][1] == ["n5"]  # found again: now the most recent


@given(st.lists(_node_names, max_size=8), st.dictionaries(st.text(max_size=5), _texts, max_size=2))
def test_go_node_name_bodies_split_without_scanning_match_the_full_decode(names: list[str], labels: Any) -> None:
    """A NodeNames body in Go's layout is split where the Pod ends, even when the Pod's strings hold
    the very mark; the result is what the full decode gives (a trailing space forces that path)."""
    pod = {"metadata": {"name": "p", "labels": {**labels, "m": ',"Nodes":null,"NodeNames":['}}, "spec": {}}
    body = msgspec.json.encode({"Pod": pod, "Nodes": None, "NodeNames": names})
    fast = wire._go_node_names(body)
    slow = wire.decode_extender_args(body + b" ")
    assert fast is not None and fast.node_names == slow.node_names == names
    assert json.loads(fast.pod_raw) == json.loads(slow.pod_raw) == pod


def test_node_names_that_are_not_strings_take_the_decoding_path_and_its_error() -> None:
    body = b'{"Pod":{"metadata":{"name":"p"}},"Nodes":null,"NodeNames":[1,2]}'
    assert wire._go_node_names(body) is None
    with pytest.raises(wire.WireError, match="NodeNames"):
        wire.decode_extender_args(body)


def test_a_remembered_list_gives_back_its_bytes_by_identity_only() -> None:
    names = ["a", "b"]
    go_layout.remember_node_names(msgspec.json.encode(names), names)
    assert go_layout.encoded_node_names(names) == b'["a","b"]'
    assert go_layout.encoded_node_names(["a", "b"]) is None  # an equal list is not the one remembered


_BIND_FIELDS = ("PodName", "PodNamespace", "PodUID", "Node")


@given(
    values=st.tuples(*(st.text(max_size=8) for _ in _BIND_FIELDS)),
    renamed=st.sampled_from([None, *_BIND_FIELDS]),
)
def test_bind_args_in_go_layout_and_in_any_other_read_as_go_reads_them(
    values: tuple[str, str, str, str], renamed: str | None
) -> None:
    """kube-scheduler's exact keys take the struct decoder; a key in another case (which Go reads too,
    the last one winning) goes to the general path; both answer alike, errors included."""
    body = dict(zip(_BIND_FIELDS, values, strict=True))
    if renamed is not None:
        body[renamed.lower()] = "other"  # after the exact key: Go's decoder keeps this one
    encoded = json.dumps(body).encode()
    expected = {field: body.get(field.lower(), body[field]) for field in _BIND_FIELDS}
    if not expected["PodName"] or not expected["PodUID"] or not expected["Node"]:
        with pytest.raises(wire.WireError, match="missing or not a string"):
            wire.decode_bind_args(encoded)
        return
    args = wire.decode_bind_args(encoded)
    assert (args.pod_name, args.pod_namespace, args.pod_uid, args.node) == (
        expected["PodName"],
        expected["PodNamespace"] or "default",
        expected["PodUID"],
        expected["Node"],
    )
