"""bench.extender_unscored: the shipped /filter with every participant's verdicts and the failure
reasons, keeping the first node that passes instead of the best scored one."""

from __future__ import annotations

import asyncio
import json

import pytest

from app.pipeline.fit import ResourceFit
from bench.extender_unscored import first_passing
from tests.conftest import filter_body, make_service, node_obj, pod_obj
from tests.e2e.controlplane import extender_config


def test_the_first_node_that_passes_is_kept_and_the_reasons_are_still_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    nodes = [node_obj("small", gpus=1), node_obj("a", gpus=8), node_obj("b", gpus=8)]
    running = [pod_obj("old", gpus=1, node="small"), pod_obj("older", gpus=4, node="b")]
    pod = pod_obj("p", gpus=2)
    body = filter_body(pod, ["small", "a", "b"])
    # The shipped scoring packs the pod onto the used node b.
    assert make_service(nodes, running, extender_config()).filter(body)["NodeNames"] == ["b"]
    monkeypatch.setattr(ResourceFit, "best_scored", first_passing)
    service = make_service(nodes, running, extender_config())
    answer = service.filter(body)
    assert answer["NodeNames"] == ["a"] and answer["Error"] == ""  # "small" fails: the first that passes
    decision = service.decisions[-1]
    assert (
        decision["passed"] == 1
        and decision["feasible"] == 2
        and decision["failed"] == {"Insufficient nvidia.com/gpu": 1}
    )
    bind = {"PodName": "p", "PodNamespace": pod["metadata"]["namespace"], "PodUID": pod["metadata"]["uid"], "Node": "a"}
    assert asyncio.run(service.bind(json.dumps(bind).encode())) == {"Error": ""}
    counted = service.cache.counted(pod["metadata"]["uid"])
    assert counted is not None and counted[0] == "a"
