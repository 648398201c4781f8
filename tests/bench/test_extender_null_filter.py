"""bench.extender_null_filter: the extender's /filter without scoring passes the first candidate and
leaves the pod known to /bind, which then binds it through the real pipeline."""

from __future__ import annotations

import asyncio
import json

from bench.extender_null_filter import first_candidate
from tests.conftest import filter_body, make_service, node_obj, pod_obj
from tests.e2e.controlplane import extender_config


def test_the_first_candidate_passes_and_bind_then_counts_the_pod_there() -> None:
    nodes, running = [node_obj("a", gpus=8), node_obj("b", gpus=8)], [pod_obj("old", gpus=4, node="b")]
    pod = pod_obj("p", gpus=1)
    # The shipped scoring packs the pod onto the used node; the null filter takes the first one named.
    assert make_service(nodes, running, extender_config()).filter(filter_body(pod, ["a", "b"]))["NodeNames"] == ["b"]
    service = make_service(nodes, running, extender_config())
    answer, suspect = first_candidate(service, filter_body(pod, ["a", "b"]))
    assert answer["NodeNames"] == ["a"] and answer["Error"] == "" and not suspect
    bind = {"PodName": "p", "PodNamespace": pod["metadata"]["namespace"], "PodUID": pod["metadata"]["uid"], "Node": "a"}
    assert asyncio.run(service.bind(json.dumps(bind).encode())) == {"Error": ""}
    counted = service.cache.counted(pod["metadata"]["uid"])
    assert counted is not None and counted[0] == "a"


def test_a_broken_body_is_an_error_answer_not_a_crash() -> None:
    answer, _ = first_candidate(make_service([node_obj("a", gpus=8)]), b"{")
    assert answer["Error"].startswith("invalid filter request")
