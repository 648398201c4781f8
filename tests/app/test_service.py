"""Extender verbs over the cache: filter reasons, bind and the assume ledger, preemption, explain."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.cluster.objects import node_from_obj, pod_from_obj
from app.cluster.snapshot import SnapshotBinder
from app.cluster.writes import BindError
from app.http import wire
from app.service import ExtenderService
from scoring.tie_break import choosing
from tests.conftest import bind_body, bind_pod, filter_answer, filter_body, make_service, node_obj, pod_obj


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


@pytest.mark.parametrize("gpus", [0, 1, 2, 4])
def test_best_scored_filter_keeps_the_top_priority_nodes(gpus: int) -> None:
    """``filterReturns: BestScored``: the nodes that pass, narrowed to those /prioritize would give 10
    (the nodes left out are not reported failed); the rejected ones are reported as before."""
    answers = {}
    for mode in ("Feasible", "BestScored"):
        service = _example_cluster_service({"filterReturns": mode})
        cache = service.cache
        body = filter_body(pod_obj("p", gpus=gpus, cpu="8", memory="32Gi"), sorted(cache.nodes))
        answers[mode] = (filter_answer(service, body), service)
    feasible, service = answers["Feasible"]
    best, _ = answers["BestScored"]
    pod = pod_obj("p", gpus=gpus, cpu="8", memory="32Gi")
    priorities = json.loads(wire.encode(service.prioritize(filter_body(pod, feasible["NodeNames"]))))
    assert best["NodeNames"] == [s["Host"] for s in priorities if s["Score"] == 10]
    assert best["FailedAndUnresolvableNodes"] == feasible["FailedAndUnresolvableNodes"]
    assert 0 < len(best["NodeNames"]) < len(feasible["NodeNames"])
    assert best["FailedNodes"] == feasible["FailedNodes"]
    assert best["FailedAndUnresolvableNodes"] == feasible["FailedAndUnresolvableNodes"]


def test_best_scored_filter_passes_a_single_feasible_node_and_nothing_when_none() -> None:
    from app.config import parse_config

    service = make_service(
        [node_obj("g1", gpus=4), node_obj("g2", gpus=1)], config=parse_config({"filterReturns": "BestScored"})
    )
    assert _filter(service, pod_obj("p", gpus=2), ["g1", "g2"])["NodeNames"] == ["g1"]
    answer = _filter(service, pod_obj("q", gpus=8), ["g1", "g2"])
    assert answer["NodeNames"] == []
    assert answer["FailedAndUnresolvableNodes"] == {
        "g1": "Insufficient nvidia.com/gpu",
        "g2": "Insufficient nvidia.com/gpu",
    }


def test_filter_passed_gives_the_filter_answers_names_without_building_reasons(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The simulator's entry: the names ``filter`` passes, the per-node reasons never assembled."""
    nodes = [node_obj("g1", gpus=4), node_obj("g2", gpus=1), node_obj("cpu", gpus=0)]
    service = make_service(nodes)
    names = ["g1", "g2", "cpu"]
    answers = [_filter(service, pod_obj(name, gpus=gpus), names) for name, gpus in (("p", 2), ("q", 8))]
    assert [answer["NodeNames"] or [] for answer in answers] == [["g1"], []]
    assert answers[1]["FailedAndUnresolvableNodes"]  # the wire answer names them

    def no_reasons(*args: Any) -> None:
        raise AssertionError("per-node reasons assembled")

    monkeypatch.setattr(service.resources.nodes, "node_reasons", no_reasons)
    assert service.filter_passed(filter_body(pod_obj("p", gpus=2), names)) == ["g1"]
    assert service.filter_passed(filter_body(pod_obj("q", gpus=8), names)) == []


@pytest.mark.parametrize("returns", ["Feasible", "BestScored"])
def test_filter_failures_when_unschedulable_names_reasons_only_when_no_node_passes(returns: str) -> None:
    """``filterFailures: WhenUnschedulable``: while a node passes, the rejected ones are left out
    (kube-scheduler reads reasons only for a pod that fits nowhere); when none passes, every
    reason is there exactly as with ``Always``."""
    from app.config import parse_config

    nodes = [node_obj("g1", gpus=4), node_obj("g2", gpus=1), node_obj("cpu", gpus=0)]
    answers = {}
    for failures in ("Always", "WhenUnschedulable"):
        config = parse_config({"filterReturns": returns, "filterFailures": failures})
        service = make_service(nodes, config=config)
        fits = _filter(service, pod_obj("p", gpus=2), ["g1", "g2", "cpu"])
        none = _filter(service, pod_obj("q", gpus=8), ["g1", "g2", "cpu"])
        answers[failures] = (fits, none)
    (always_fits, always_none), (lean_fits, lean_none) = answers["Always"], answers["WhenUnschedulable"]
    assert always_fits["FailedAndUnresolvableNodes"] == {
        "g2": "Insufficient nvidia.com/gpu",
        "cpu": "Insufficient nvidia.com/gpu",
    }
    assert lean_fits["NodeNames"] == always_fits["NodeNames"] == ["g1"]
    assert lean_fits["FailedNodes"] == {} and lean_fits["FailedAndUnresolvableNodes"] == {}
    assert lean_none == always_none and len(lean_none["FailedAndUnresolvableNodes"]) == 3


def test_tie_break_keeps_the_best_nodes_with_the_most_allocated_gpus() -> None:
    """``tieBreak``: nodes the profile scores alike (no score plugins here: all of them) keep 10 only
    where the GPUs would be most allocated after the pod; BestScored passes only those, and explain
    shows the same. A pod that asks for no GPU is left to kube-scheduler's pick."""
    from app.config import parse_config

    nodes = [node_obj("empty"), node_obj("used"), node_obj("fuller", gpus=16)]
    pods = [pod_obj("a", gpus=1, node="used"), pod_obj("b", gpus=2, node="fuller")]
    config = {"plugins": [], "filterReturns": "BestScored", "tieBreak": {"mostAllocated": ["nvidia.com/gpu"]}}
    service = make_service(nodes, pods, parse_config(config))
    names = ["empty", "used", "fuller"]
    pod = pod_obj("p", gpus=1)
    # after the pod: 1/8 = 12, 2/8 = 25, 3/16 = 18
    priorities = json.loads(wire.encode(service.prioritize(filter_body(pod, names))))
    assert {s["Host"]: s["Score"] for s in priorities} == {"empty": 9, "used": 10, "fuller": 9}
    assert _filter(service, pod, names)["NodeNames"] == ["used"]
    explained = {n["name"]: n for n in service.explain(filter_body(pod, names))["nodes"]}
    assert {n: (e["score"], e["tieKey"]) for n, e in explained.items()} == {
        "empty": (9, 12),
        "used": (10, 25),
        "fuller": (9, 18),
    }
    cpu_pod = pod_obj("c")
    assert _filter(service, cpu_pod, names)["NodeNames"] == names
    assert "tieKey" not in service.explain(filter_body(cpu_pod, names))["nodes"][0]


def test_tie_break_by_lowest_name_after_most_allocated() -> None:
    """``tieBreak.lowestName``: of the nodes left at 10, only the smallest name keeps it, for every pod
    (after mostAllocated for a GPU pod); BestScored passes only that node, and explain shows the same."""
    from app.config import parse_config

    nodes = [node_obj("n3"), node_obj("n2"), node_obj("n1", gpus=16), node_obj("n0")]
    pods = [pod_obj("a", gpus=1, node="n3"), pod_obj("b", gpus=1, node="n2")]
    tie_break = {"mostAllocated": ["nvidia.com/gpu"], "lowestName": True}
    service = make_service(
        nodes, pods, parse_config({"plugins": [], "filterReturns": "BestScored", "tieBreak": tie_break})
    )
    names = ["n3", "n2", "n1", "n0"]
    gpu_pod = pod_obj("p", gpus=1)
    # most allocated after the pod: n3 and n2 (2/8); of those, n2
    priorities = json.loads(wire.encode(service.prioritize(filter_body(gpu_pod, names))))
    assert {s["Host"]: s["Score"] for s in priorities} == {"n3": 9, "n2": 10, "n1": 9, "n0": 9}
    assert _filter(service, gpu_pod, names)["NodeNames"] == ["n2"]
    explained = {n["name"]: n["score"] for n in service.explain(filter_body(gpu_pod, names))["nodes"]}
    assert explained == {"n3": 9, "n2": 10, "n1": 9, "n0": 9}
    assert _filter(service, pod_obj("c"), names)["NodeNames"] == ["n0"]  # a CPU pod: the smallest name


def _random_tie_service(nodes: list[dict[str, Any]]) -> ExtenderService:
    from app.config import parse_config

    pods = [pod_obj("a", gpus=1, node="n3"), pod_obj("b", gpus=1, node="n2")]
    tie_break = {"mostAllocated": ["nvidia.com/gpu"], "random": True}
    config = parse_config({"plugins": [], "filterReturns": "BestScored", "tieBreak": tie_break})
    return make_service(nodes, pods, config)


def test_tie_break_at_random_passes_one_of_the_tied_nodes() -> None:
    """``tieBreak.random``: of the nodes left at 10 after mostAllocated, BestScored passes one, drawn
    per request (so kube-scheduler neither scores nor calls /prioritize); over many requests each
    tied node is drawn and no other. /prioritize gives the drawn node 10 and the others at most 9."""
    nodes = [node_obj("n3"), node_obj("n2"), node_obj("n1", gpus=16), node_obj("n0"), node_obj("n4")]
    service = _random_tie_service([*nodes, node_obj("n5")])
    service.cache.upsert_pod(pod_from_obj(pod_obj("c", gpus=1, node="n5")))
    names = ["n3", "n2", "n1", "n0", "n5"]
    gpu_pod = pod_obj("p", gpus=1)
    drawn = set()
    for _ in range(60):  # each of 3 tied nodes is missed by 60 draws with probability (2/3)^60
        passed = _filter(service, gpu_pod, names)["NodeNames"]
        assert len(passed) == 1
        drawn.update(passed)
    assert drawn == {"n3", "n2", "n5"}  # the most allocated after the pod (2 of 8), n1 and n0 never
    priorities = json.loads(wire.encode(service.prioritize(filter_body(gpu_pod, names))))
    assert sorted(s["Score"] for s in priorities) == [9, 9, 9, 9, 10]
    assert {s["Host"] for s in priorities if s["Score"] == 10} <= {"n3", "n2", "n5"}
    assert len(_filter(service, pod_obj("cpu-only"), names)["NodeNames"]) == 1  # every pod, after mostAllocated


def test_tie_break_at_random_follows_the_given_rule() -> None:
    """A pick by name chooses over the tied names in candidate order (the simulator hands its own)."""
    service = _random_tie_service([node_obj("n3"), node_obj("n2"), node_obj("n0")])
    seen: list[list[str]] = []
    service.resources.random_ties.pick = choosing(lambda names: seen.append(names) or names[-1])
    assert _filter(service, pod_obj("p", gpus=1), ["n3", "n0", "n2"])["NodeNames"] == ["n2"]
    assert seen == [["n3", "n2"]]


def test_tie_break_at_random_keeps_filling_the_node_of_a_pick_still_in_flight() -> None:
    """A pod drawn onto an empty node whose /bind has not come yet: the next pods that tie draw among
    the nodes holding such picks (as kube-scheduler's MostAllocated, which counts its assumed pods,
    would have them), until the pick is bound or TTL_SECONDS old."""
    from app.pipeline.random_ties import TTL_SECONDS

    now = [100.0]
    service = _random_tie_service([node_obj(f"e{i}") for i in range(4)])
    service.cache.clock = lambda: now[0]
    names = [f"e{i}" for i in range(4)]
    first = pod_obj("first", gpus=1)
    (picked,) = _filter(service, first, names)["NodeNames"]
    for i in range(20):  # not bound yet: every later pod is drawn onto the same node
        assert _filter(service, pod_obj(f"next{i}", gpus=1), names)["NodeNames"] == [picked]
    now[0] += TTL_SECONDS + 1  # kube-scheduler never bound them: the picks stop counting
    drawn = set()
    for i in range(40):
        now[0] += TTL_SECONDS + 1
        drawn.update(_filter(service, pod_obj(f"late{i}", gpus=1), names)["NodeNames"])
    assert len(drawn) > 1
    now[0] += TTL_SECONDS + 1  # the late picks gone: only the first pod's new pick is in flight
    (picked,) = _filter(service, first, names)["NodeNames"]
    assert service.resources.random_ties._inflight("other") == {picked}
    assert bind_pod(service, first, picked)["Error"] == ""  # bound: counted, so no longer in flight
    assert service.resources.random_ties._inflight("other") == set()


def test_tie_break_at_random_leaves_soft_preferences_to_kube_scheduler() -> None:
    """A pod with soft preferences, or tied nodes of which one has a PreferNoSchedule taint: every tied
    node passes, and kube-scheduler's score plugins choose among them."""
    tainted = node_obj("n2")
    tainted["spec"] = {"taints": [{"key": "spot", "effect": "PreferNoSchedule"}]}
    names = ["n3", "n2", "n0"]
    service = _random_tie_service([node_obj("n3"), tainted, node_obj("n0")])
    assert _filter(service, pod_obj("p", gpus=1), names)["NodeNames"] == ["n3", "n2"]
    service.cache.upsert_node(node_from_obj(node_obj("n2")))  # the taint removed
    assert len(_filter(service, pod_obj("p", gpus=1), names)["NodeNames"]) == 1
    spread = pod_obj("s", gpus=1)
    spread["spec"]["affinity"] = {
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "podAffinityTerm": {}}]}
    }
    assert _filter(service, spread, names)["NodeNames"] == ["n3", "n2"]


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"priorityScale": "Absolute", "tieBreak": {"mostAllocated": ["nvidia.com/gpu"]}}, "tieBreak: needs"),
        ({"tieBreak": {"mostAllocated": ["memory"]}}, "tieBreak.mostAllocated[0]: 'memory' is not a device"),
        ({"tieBreak": {"most": ["nvidia.com/gpu"]}}, "tieBreak: unknown field(s) ['most']"),
    ],
)
def test_tie_break_is_validated(config: dict[str, Any], message: str) -> None:
    from app.config import ConfigError, parse_config

    with pytest.raises(ConfigError) as error:
        parse_config(config)
    assert message in str(error.value)


def test_filter_failures_is_validated() -> None:
    from app.config import ConfigError, parse_config

    with pytest.raises(ConfigError, match="filterFailures"):
        parse_config({"filterFailures": "Sometimes"})


def test_failed_node_maps_are_reused_only_for_exactly_the_same_failures() -> None:
    """Pods of one shape over the same candidates get the FailedNodes bytes built for the first; once a
    node's state changes what fails, the map is built again and names it."""
    names = [f"g{i}" for i in range(70)]
    service = make_service([node_obj(n, gpus=4 if i % 2 else 1) for i, n in enumerate(names)])
    first = service.filter(filter_body(pod_obj("a", gpus=2), names))
    second = service.filter(filter_body(pod_obj("b", gpus=2), names))
    assert second["FailedAndUnresolvableNodes"] is first["FailedAndUnresolvableNodes"]
    service.cache.upsert_pod(pod_from_obj(pod_obj("x", gpus=3, node="g1", phase="Running")))  # 1 GPU left on g1
    third = filter_answer(service, filter_body(pod_obj("c", gpus=2), names))
    too_small = {n: "Insufficient nvidia.com/gpu" for i, n in enumerate(names) if i % 2 == 0}
    assert third["FailedAndUnresolvableNodes"] == too_small
    assert third["FailedNodes"] == {"g1": "Insufficient nvidia.com/gpu"}  # evicting x would make room
    assert third["NodeNames"] == [n for n in names if n not in too_small and n != "g1"]


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from([None, 1, 2, 4, 8]), st.integers(0, 8), st.sampled_from(["4", "32"])),
        min_size=1,
        max_size=12,
    ),
    st.integers(0, 4),
    st.integers(0, 40),
)
def test_best_scored_answer_is_the_top_of_prioritize_over_the_feasible_nodes(
    nodes: list[tuple[int | None, int, str]], gpus: int, unknown: int
) -> None:
    """With the shipped plugins, cpu and memory managed too (as the simulator has them), however many
    candidates fail (short of GPUs or cpu, or unknown names, so that the nodes that pass are now
    most, now few of the candidates), /filter keeps exactly the nodes /prioritize would give 10
    among those a Feasible filter passes. (A node short of cpu can score highest: ScarceResourceAvoidance
    likes a CPU-only node for a CPU pod.)"""
    from tests.e2e.controlplane import extender_config

    objs = [node_obj(f"n{i}", cpu=cpu, gpus=total) for i, (total, _, cpu) in enumerate(nodes)]
    running = [
        pod_obj(f"r{i}", gpus=min(used, total or 0), node=f"n{i}")
        for i, (total, used, _) in enumerate(nodes)
        if used and total
    ]
    names = [f"n{i}" for i in range(len(nodes))] + [f"gone-{i}" for i in range(unknown)]
    pod = pod_obj("p", gpus=gpus, cpu="8")
    answers = {}
    for mode in ("Feasible", "BestScored"):
        config = {**extender_config(), "filterReturns": mode, "managedResources": ["nvidia.com/gpu", "cpu", "memory"]}
        service = make_service(objs, running, config)
        service.resources.random_ties.pick = choosing(min)  # tieBreak.random: the same pick in both services
        answers[mode] = (_filter(service, pod, names), service)
    (feasible, service), (best, _) = answers["Feasible"], answers["BestScored"]
    if len(feasible["NodeNames"]) <= 1:
        assert best["NodeNames"] == feasible["NodeNames"]
        return
    priorities = json.loads(wire.encode(service.prioritize(filter_body(pod, feasible["NodeNames"]))))
    assert best["NodeNames"] == [s["Host"] for s in priorities if s["Score"] == 10]
    assert best["FailedAndUnresolvableNodes"] == feasible["FailedAndUnresolvableNodes"]
