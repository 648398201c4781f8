"""Extender verbs over the cache: filter reasons, bind and the assume ledger, preemption, explain (the best
nodes, BestScored and the tie-break: test_service_best_nodes.py)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from app.cluster.snapshot import SnapshotBinder
from app.cluster.writes import BindError
from app.http import wire
from app.service import ExtenderService
from tests.conftest import bind_body, filter_answer, filter_body, make_service, node_obj, pod_obj


def _filter(service: Any, pod: dict[str, Any], names: list[str]) -> dict[str, Any]:
    return filter_answer(service, filter_body(pod, names))


def _bind(service: Any, pod: dict[str, Any], node: str) -> dict[str, Any]:
    return asyncio.run(service.bind(bind_body(pod, node)))


def test_filter_counts_bound_pods_and_separates_resolvable() -> None:
    bound = [pod_obj("a", gpus=3, node="g1", phase="Running"), pod_obj("done", gpus=4, node="g2", phase="Succeeded")]
    service = make_service([node_obj("g1", gpus=4), node_obj("g2", gpus=4), node_obj("small", gpus=1)], bound)
    answer = _filter(service, pod_obj("p", gpus=2), ["g1", "g2", "small"])
    assert answer["NodeNames"] == ["g2"]  # the Succeeded pod frees its GPUs
    assert answer["FailedNodes"] == {"g1": "Insufficient nvidia.com/gpu"}  # preemption could free g1
    assert answer["FailedAndUnresolvableNodes"] == {"small": "Insufficient nvidia.com/gpu"}  # never fits


def test_filter_non_cache_mode_uses_request_nodes_for_unknown_nodes() -> None:
    service = make_service([node_obj("g1", gpus=1)])
    items = [
        node_obj("g1", gpus=1),
        node_obj("fresh", gpus=2),
        {"metadata": {"name": "bad"}, "status": {"allocatable": {"nvidia.com/gpu": "x"}}},
    ]
    body = json.dumps({"Pod": pod_obj("p", gpus=2), "Nodes": {"metadata": {}, "items": items}, "NodeNames": None})
    answer = filter_answer(service, body.encode())
    assert answer["NodeNames"] is None
    assert [raw["metadata"]["name"] for raw in answer["Nodes"]["items"]] == ["fresh"]
    assert answer["FailedAndUnresolvableNodes"] == {
        "g1": "Insufficient nvidia.com/gpu",
        "bad": "node(s) with invalid allocatable",
    }


def test_bind_assumes_so_the_next_filter_sees_it() -> None:
    service = make_service([node_obj("g1", gpus=4)])
    first, second = pod_obj("first", gpus=3), pod_obj("second", gpus=2)
    assert _filter(service, first, ["g1"])["NodeNames"] == ["g1"]
    assert _filter(service, second, ["g1"])["NodeNames"] == ["g1"]
    assert _bind(service, first, "g1") == {"Error": ""}
    assert _filter(service, second, ["g1"])["FailedNodes"] == {"g1": "Insufficient nvidia.com/gpu"}
    error = _bind(service, second, "g1")["Error"]
    assert error == "node g1 no longer fits pod default/second: Insufficient nvidia.com/gpu"
    service.cache.check_invariants()


def test_bind_is_idempotent_and_refuses_other_nodes() -> None:
    service = make_service([node_obj("g1", gpus=4), node_obj("g2", gpus=4)])
    pod = pod_obj("p", gpus=1)
    _filter(service, pod, ["g1", "g2"])
    assert _bind(service, pod, "g1") == {"Error": ""}
    assert _bind(service, pod, "g1") == {"Error": ""}  # kube-scheduler retry after a lost reply
    assert _bind(service, pod, "g2")["Error"] == "pod default/p is already bound to node g1"
    assert service.cache.usage("g1").requested["nvidia.com/gpu"] == 1
    assert "nvidia.com/gpu" not in service.cache.usage("g2").requested


def test_bind_to_unknown_node() -> None:
    service = make_service([node_obj("g1")])
    pod = pod_obj("p", gpus=1)
    _filter(service, pod, ["g1"])
    assert _bind(service, pod, "ghost")["Error"] == "node ghost is unknown to the extender"
    assert not service.cache.ledger


def test_bind_with_mismatched_name() -> None:
    service = make_service([node_obj("g1")])
    pod = pod_obj("p", gpus=1)
    _filter(service, pod, ["g1"])
    other = dict(pod, metadata=dict(pod["metadata"], name="other"))
    assert "belongs to default/p" in _bind(service, other, "g1")["Error"]


class _FailingBinder:
    def __init__(self, error: BindError) -> None:
        self.error = error

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        raise self.error


@pytest.mark.parametrize(
    ("error", "kept", "message"),
    [
        (BindError("409 conflict", kind="conflict"), False, "failed: 409 conflict"),
        (BindError("timed out", kind="unreachable", definite=False), True, "failed: timed out"),
        (BindError("already there", kind="conflict", bound_to="g1"), True, ""),
    ],
)
def test_bind_failures_release_or_keep_the_assumption(error: BindError, kept: bool, message: str) -> None:
    service = make_service([node_obj("g1", gpus=4)])
    service.binder = _FailingBinder(error)
    pod = pod_obj("p", gpus=2)
    _filter(service, pod, ["g1"])
    answer = _bind(service, pod, "g1")
    assert (message in answer["Error"]) if message else answer == {"Error": ""}
    assert (pod["metadata"]["uid"] in service.cache.ledger) is kept
    assert service.cache.usage("g1").requested.get("nvidia.com/gpu", 0) == (2 if kept else 0)


def test_retried_pod_does_not_compete_with_its_own_assumption() -> None:
    service = make_service([node_obj("g1", gpus=2)])
    service.binder = _FailingBinder(BindError("timed out", definite=False))
    pod = pod_obj("p", gpus=2)
    _filter(service, pod, ["g1"])
    _bind(service, pod, "g1")
    assert service.cache.usage("g1").requested["nvidia.com/gpu"] == 2
    # kube-scheduler retries the pod: it must still fit where its own assumption sits.
    assert _filter(service, pod, ["g1"])["NodeNames"] == ["g1"]
    service.binder = SnapshotBinder(service.cache)
    assert _bind(service, pod, "g1") == {"Error": ""}
    assert service.cache.usage("g1").requested["nvidia.com/gpu"] == 2  # replaced, never doubled


def test_concurrent_binds_never_overcommit() -> None:
    """Many binds in flight at once against one node: exactly capacity-many succeed."""

    class SlowBinder:
        def __init__(self) -> None:
            self.bound: list[str] = []

        async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
            await asyncio.sleep(0)  # yield so every bind is in flight together
            self.bound.append(name)

    service = make_service([node_obj("g1", gpus=8)])
    service.binder = binder = SlowBinder()
    pods = [pod_obj(f"p{i}", gpus=1 + i % 3) for i in range(40)]
    for pod in pods:
        assert _filter(service, pod, ["g1"])["NodeNames"] == ["g1"]  # all fit an empty node on their own

    async def run() -> list[dict[str, Any]]:
        return await asyncio.gather(*(service.bind(bind_body(pod, "g1")) for pod in pods))

    results = asyncio.run(run())
    granted = [pod for pod, result in zip(pods, results, strict=True) if result == {"Error": ""}]
    gpus = sum(int(p["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"]) for p in granted)
    # Each bind assumes before its first await, in arrival order: 1+2+3+1 = 7, p4 (2) and p5 (3) no
    # longer fit, p6 (1) makes 8, and nothing fits after that.
    assert gpus == 8
    assert sorted(binder.bound) == sorted(p["metadata"]["name"] for p in granted)
    assert service.cache.usage("g1").requested["nvidia.com/gpu"] == gpus
    service.cache.check_invariants()


def test_preempt_keeps_victims_only_when_they_make_room() -> None:
    victims = {
        "v1": pod_obj("v1", gpus=2, node="g1", phase="Running", priority=10),
        "v2": pod_obj("v2", gpus=2, node="g1", phase="Running", priority=5),
        "v3": pod_obj("v3", gpus=0, node="g2", phase="Running"),
        "v4": pod_obj("v4", gpus=4, node="g3", phase="Running"),
    }
    fill = pod_obj("fill", gpus=4, node="g2", phase="Running")
    service = make_service([node_obj(n, gpus=4) for n in ("g1", "g2", "g3", "g4")], [*victims.values(), fill])

    def uid(name: str) -> dict[str, str]:
        return {"UID": victims[name]["metadata"]["uid"]}

    body = {
        "Pod": pod_obj("hi", gpus=3, priority=100),
        "NodeNameToMetaVictims": {
            "g1": {"Pods": [uid("v1"), uid("v2")], "NumPDBViolations": 1},  # frees 4 -> fits
            "g2": {"Pods": [uid("v3")], "NumPDBViolations": 0},  # frees no GPU -> dropped
            "g3": {"Pods": [uid("v4")], "NumPDBViolations": 0},  # frees 4 -> fits
            "g4": {"Pods": [], "NumPDBViolations": 0},  # placeholder, already fits -> kept empty
            "ghost": {"Pods": [], "NumPDBViolations": 0},
        },
        "NodeNameToVictims": None,
    }
    answer = service.preempt(json.dumps(body).encode())
    assert answer == {
        "NodeNameToMetaVictims": {
            "g1": {"Pods": [uid("v1"), uid("v2")], "NumPDBViolations": 1},
            "g3": {"Pods": [uid("v4")], "NumPDBViolations": 0},
            "g4": {"Pods": [], "NumPDBViolations": 0},
        }
    }


def test_preempt_non_cache_mode_answers_meta_victims() -> None:
    victim = pod_obj("v", gpus=4, node="g1", phase="Running")
    service = make_service([node_obj("g1", gpus=4)], [victim])
    body = {"Pod": pod_obj("hi", gpus=4), "NodeNameToVictims": {"g1": {"Pods": [victim], "NumPDBViolations": 0}}}
    answer = service.preempt(json.dumps(body).encode())
    assert answer == {
        "NodeNameToMetaVictims": {"g1": {"Pods": [{"UID": victim["metadata"]["uid"]}], "NumPDBViolations": 0}}
    }


def test_explain_reports_verdicts_and_raw_scores() -> None:
    service = make_service(
        [node_obj("g1", cpu="10", memory="10Gi", gpus=4), node_obj("c1", cpu="10", memory="10Gi", gpus=None)]
    )
    explained = service.explain(filter_body(pod_obj("p", gpus=1, cpu="5", memory="5Gi"), ["g1", "c1"]))
    g1, c1 = explained["nodes"]
    assert g1["filter"] == {"passed": True, "reason": "", "code": "Success"}
    # FitPlus on g1: gpu Most 1/4 -> 25 (w2), cpu Least 5/10 -> 50, memory Least 50 -> (50+50+50)//4 = 37.
    # SRA sits out: the pod asks for the scarce resource; shown with the 100 it would give, not counted.
    # g1 is the only node that passes, so the best candidate: priority 10 (the Candidates scale).
    assert g1["scores"] == {"NodeResourcesFitPlus": 37, "ScarceResourceAvoidance": 100}
    assert g1["satOut"] == ["ScarceResourceAvoidance"]
    assert (g1["nodeScore"], g1["score"]) == (37, 10)
    assert g1["managed"] == {"nvidia.com/gpu": {"allocatable": 4, "requested": 0, "pod": 1}}
    assert c1["filter"] == {
        "passed": False,
        "reason": "Insufficient nvidia.com/gpu",
        "code": "UnschedulableAndUnresolvable",
    }


def _example_cluster_service(config: dict[str, Any] | None = None) -> ExtenderService:
    """A service over examples/cluster.yaml, synced."""
    from pathlib import Path

    from app.cluster.cache import ClusterCache
    from app.cluster.snapshot import SnapshotBinder, load_snapshot
    from app.config import parse_config

    cache = ClusterCache()
    load_snapshot(Path(__file__).resolve().parents[2] / "examples" / "cluster.yaml", cache)
    for source in ("nodes", "pods"):
        cache.source(source).synced = True
    return ExtenderService(parse_config(config or {}), cache, SnapshotBinder(cache))


@pytest.mark.parametrize("tie_break", [None, {"mostAllocated": ["nvidia.com/gpu"]}])
@pytest.mark.parametrize("gpus", [0, 1, 2, 4, 8, 9])
def test_batch_answers_match_explain_on_the_example_cluster(gpus: int, tie_break: dict[str, Any] | None) -> None:
    """/filter and /prioritize (batched) agree with /debug/explain (one node at a time)."""
    service = _example_cluster_service({"tieBreak": tie_break})
    cache = service.cache
    names = [*sorted(cache.nodes), "ghost"]
    body = filter_body(pod_obj("p", gpus=gpus, cpu="8", memory="32Gi"), names)
    explained = {n["name"]: n for n in service.explain(body)["nodes"]}
    answer = filter_answer(service, body)
    assert answer["NodeNames"] == [n for n in names if explained[n]["filter"]["passed"]]
    for reasons, code in (
        (answer["FailedNodes"], "Unschedulable"),
        (answer["FailedAndUnresolvableNodes"], "UnschedulableAndUnresolvable"),
    ):
        assert reasons == {n: e["filter"]["reason"] for n, e in explained.items() if e["filter"]["code"] == code}
    # kube-scheduler sends prioritize the nodes that passed filter (plus a ghost: unknown nodes get 0).
    passed = [*answer["NodeNames"], "ghost"]
    scores = json.loads(
        wire.encode(service.prioritize(filter_body(pod_obj("p", gpus=gpus, cpu="8", memory="32Gi"), passed)))
    )
    expected = {n: explained[n].get("score") or 0 for n in passed}
    assert {s["Host"]: s["Score"] for s in scores} == {n: score for n, score in expected.items() if score}


def test_one_structured_log_line_per_decision(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from app.operator.logs import JsonFormatter

    service = make_service([node_obj("g1", gpus=1)])
    with caplog.at_level(logging.DEBUG, logger="kube_gpu_extender.decisions"):
        _filter(service, pod_obj("p", gpus=2), ["g1"])
    (record,) = [r for r in caplog.records if r.name == "kube_gpu_extender.decisions"]
    line = json.loads(JsonFormatter().format(record))
    assert line["level"] == "debug" and line["msg"] == "decision"
    assert line["decision"]["verb"] == "filter" and line["decision"]["pod"] == "default/p"
    assert line["decision"]["failed"] == {"Insufficient nvidia.com/gpu": 1}


def test_a_closed_service_and_its_cache_are_freed_by_reference_counting() -> None:
    """Nothing refers back into a closed service (the cache's subscribers and listeners, the metrics'
    collector, the bind verb's record): it and its cache go with their last reference."""
    import gc
    import weakref

    service = make_service([node_obj("n1", gpus=8)], [pod_obj("p", gpus=1)])
    assert service.filter(filter_body(pod_obj("q", gpus=1), ["n1"]))["NodeNames"] == ["n1"]
    cache = weakref.ref(service.cache)
    gc.collect()
    gc.disable()
    try:
        service.close()
        del service
        assert cache() is None
    finally:
        gc.enable()
