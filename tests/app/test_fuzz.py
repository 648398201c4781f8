"""Fuzzing the HTTP handlers: whatever the body, an extender verb answers 200 with a well-formed result,
no handler raises (the catch-all in ``ExtenderVerbs`` would hide it, so its metric must stay at zero),
and /debug/explain answers 200 or 400, never 5xx.

Bodies are random JSON, real kube-scheduler requests (tests/fixtures/kube-scheduler-wire) with one
value replaced somewhere in the tree, and raw bytes. The service has queues (a ClusterQueue, KAI
queues, FlavorFairness in its profile) and half the captured pods are put in a queue first, so the
queue paths meet the same bodies. Bounded: ~150 examples per verb, no deadline.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.config import ExtenderConfiguration
from app.http.server import create_app
from app.service import ExtenderService
from tests.conftest import (
    WIRE_FIXTURES,
    claim_obj,
    device_class_obj,
    gpu_device,
    make_service,
    node_obj,
    pod_obj,
    slice_obj,
)

VERBS = ("filter", "prioritize", "preempt", "bind")
FIXTURES: dict[str, list[Any]] = {
    verb: [json.loads(p.read_text()) for p in sorted(WIRE_FIXTURES.glob(f"{verb}-*.request.json"))] for verb in VERBS
}
FIXTURES["debug/explain"] = FIXTURES["filter"]

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
    | st.sampled_from(["1", "0", "-1", "1e400", "9" * 40, "100Gi", "1.5", "NaN", "nvidia.com/gpu", "\u00e9\U0001f680"])
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)


def mutate(obj: Any, data: st.DataObject) -> Any:
    """Replace one value somewhere in ``obj`` (a random walk down dicts and lists) by a generated one."""
    if not isinstance(obj, dict | list) or not obj or data.draw(st.integers(0, 5)) == 0:
        return data.draw(json_values)
    keys = list(obj) if isinstance(obj, dict) else list(range(len(obj)))
    key = data.draw(st.sampled_from(keys))
    copy = dict(obj) if isinstance(obj, dict) else list(obj)
    if data.draw(st.integers(0, 9)) == 0 and isinstance(copy, dict):
        del copy[key]  # a missing field
    else:
        copy[key] = mutate(obj[key], data)
    return copy


QUEUE_LABELS = st.sampled_from(
    [
        {"kueue.x-k8s.io/queue-name": "lq"},
        {"kueue.x-k8s.io/queue-name": "no-such-queue"},
        {"kai.scheduler/queue": "qa"},
        {"kai.scheduler/queue": "org"},
        {"kai.scheduler/queue": "ghost"},
    ]
)


def queued(request: Any, data: st.DataObject) -> Any:
    """The captured request with its pod in a queue (half the time), before mutation."""
    pod = request.get("Pod") if isinstance(request, dict) else None
    if not isinstance(pod, dict) or data.draw(st.booleans()):
        return request
    metadata = {**pod.get("metadata", {}), "labels": data.draw(QUEUE_LABELS)}
    spec = dict(pod.get("spec", {}))
    if data.draw(st.booleans()):
        spec["tolerations"] = [{"key": "spot", "operator": "Exists"}]
        spec["nodeSelector"] = {"gpu-type": data.draw(st.sampled_from(["h100", "a10"]))}
    return {**request, "Pod": {**pod, "metadata": metadata, "spec": spec}}


def body_for(verb: str, data: st.DataObject) -> bytes:
    kind = data.draw(st.sampled_from(["mutated", "mutated", "json", "bytes"]))
    if kind == "bytes":
        return data.draw(st.binary(max_size=200))
    if kind == "json":
        return json.dumps(data.draw(json_values)).encode()
    return json.dumps(mutate(queued(data.draw(st.sampled_from(FIXTURES[verb])), data), data)).encode()


GPU_GROUP = {
    "coveredResources": ["nvidia.com/gpu"],
    "flavors": [
        {"name": "h100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 2}]},
        {"name": "spot", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 1}]},
    ],
}
QUEUES = {
    "resourceFlavors": [
        {"metadata": {"name": "h100"}, "spec": {"nodeLabels": {"gpu-type": "h100"}}},
        {
            "metadata": {"name": "spot"},
            "spec": {"nodeLabels": {"gpu-type": "a10"}, "nodeTaints": [{"key": "spot", "effect": "NoSchedule"}]},
        },
    ],
    "clusterQueues": [
        {"metadata": {"name": name}, "spec": {"cohortName": "org", "resourceGroups": [GPU_GROUP]}}
        for name in ("cq", "other")
    ],
    "localQueues": [{"metadata": {"name": "lq", "namespace": "default"}, "spec": {"clusterQueue": "cq"}}],
    "kaiQueues": [
        {"metadata": {"name": "org"}, "spec": {"resources": {"gpu": {"quota": 4, "limit": 6}}}},
        {"metadata": {"name": "qa"}, "spec": {"parentQueue": "org", "resources": {"gpu": {"quota": 2}}}},
    ],
}


@pytest.fixture(scope="module")
def target() -> Iterator[tuple[TestClient, ExtenderService]]:
    """The nodes the captures name (n1..n4), pods bound on them, and DRA objects so claims are judged."""
    dra = [
        device_class_obj(),
        slice_obj("n1-gpus", [gpu_device("gpu-0"), gpu_device("gpu-1")], node="n1"),
        claim_obj("claim-0"),
    ]
    nodes = [node_obj(f"n{i}", gpus=4 if i < 3 else None) for i in range(1, 5)]
    nodes[0]["metadata"]["labels"] = {"gpu-type": "h100"}
    nodes[1]["metadata"]["labels"] = {"gpu-type": "a10"}
    pods = [pod_obj("bound", gpus=1, node="n1", phase="Running")]
    queued_pod = pod_obj("queued", gpus=1, node="n1", phase="Running", priority=-5)
    queued_pod["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "lq"}
    plugins = [p.model_dump() for p in ExtenderConfiguration().plugins] + [{"name": "FlavorFairness", "weight": 2}]
    config = {"dra": {"enabled": True}, "queues": QUEUES, "plugins": plugins}
    service = make_service(nodes, [*pods, queued_pod], config=config, dra=dra)
    with TestClient(create_app(service)) as client:
        yield client, service


def well_formed(verb: str, answer: Any) -> bool:
    if verb == "filter":
        return isinstance(answer, dict) and isinstance(answer.get("Error", ""), str)
    if verb == "prioritize":
        return isinstance(answer, list) and all(isinstance(e["Host"], str) and 0 <= e["Score"] <= 10 for e in answer)
    if verb == "preempt":
        return isinstance(answer, dict) and isinstance(answer.get("NodeNameToMetaVictims"), dict)
    return isinstance(answer, dict) and set(answer) == {"Error"} and isinstance(answer["Error"], str)


FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.mark.parametrize("verb", VERBS)
@FUZZ
@given(data=st.data())
def test_verbs_answer_200_well_formed(target: tuple[TestClient, ExtenderService], verb: str, data: Any) -> None:
    client, service = target
    body = body_for(verb, data)
    response = client.post(f"/{verb}", content=body)
    assert response.status_code == 200
    assert well_formed(verb, response.json()), response.text[:500]
    assert service.metrics.results.labels(verb, "internal-error")._value.get() == 0, body[:500]
    service.cache.check_invariants()


@FUZZ
@given(data=st.data())
def test_explain_answers_200_or_400(target: tuple[TestClient, ExtenderService], data: Any) -> None:
    client, _ = target
    body = body_for("debug/explain", data)
    response = client.post("/debug/explain", content=body)
    assert response.status_code in (200, 400), (response.status_code, body[:500])
    answer = response.json()
    assert ("nodes" in answer) if response.status_code == 200 else answer["error"].startswith("invalid request")
