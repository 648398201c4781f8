"""bench.extender_nameless: the shipped /filter over every node of the cache, the request's names
neither decoded nor looked up (bench.throughput's measure of the extender's CPU without them)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.cluster.objects import node_from_obj
from app.http import go_layout
from app.pipeline.nodes import CandidateNodes
from bench import extender_nameless
from tests.conftest import make_service, node_obj, pod_obj
from tests.e2e.controlplane import extender_config


def _go_body(pod: dict[str, Any], names: list[str]) -> bytes:
    """A /filter body in Go's layout (compact, NodeNames last), as kube-scheduler writes it."""
    compact = {"separators": (",", ":")}
    return b'{"Pod":%s,"Nodes":null,"NodeNames":%s}' % (
        json.dumps(pod, **compact).encode(),  # type: ignore[arg-type]
        json.dumps(names, **compact).encode(),  # type: ignore[arg-type]
    )


def test_the_names_are_not_read_and_every_node_is_judged(monkeypatch: pytest.MonkeyPatch) -> None:
    nodes = [node_obj("small", gpus=1), node_obj("a", gpus=8), node_obj("b", gpus=8)]
    running = [pod_obj("old", gpus=1, node="small"), pod_obj("older", gpus=4, node="b")]
    body = _go_body(pod_obj("p", gpus=2), ["small"])
    assert make_service(nodes, running, extender_config()).filter(body)["NodeNames"] == []  # small is full
    monkeypatch.setattr(go_layout, "node_names", extender_nameless.no_names)
    monkeypatch.setattr(CandidateNodes, "gather", extender_nameless.gather_every_node)
    service = make_service(nodes, running, extender_config())
    assert service.filter(body)["NodeNames"] == ["b"]  # the shipped scoring's choice among all three
    assert service.decisions[-1]["failed"] == {"Insufficient nvidia.com/gpu": 1}


def test_every_node_is_one_list_while_the_table_keeps_its_names() -> None:
    service = make_service([node_obj("a"), node_obj("b")], [], extender_config())
    table = service.cache.table
    first = extender_nameless.every_node(table)
    assert sorted(first) == ["a", "b"] and extender_nameless.every_node(table) is first
    service.cache.upsert_node(node_from_obj(node_obj("c")))
    later = extender_nameless.every_node(service.cache.table)
    assert later is not first and sorted(later) == ["a", "b", "c"]
