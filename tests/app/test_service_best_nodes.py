"""What the verbs pass and answer among the best nodes: filterReturns BestScored, filterFailures
WhenUnschedulable, and the tie-break (most allocated, lowest name, at random), against the
profile's own scores."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.cluster.objects import node_from_obj, pod_from_obj
from app.http import wire
from app.service import ExtenderService
from scoring.tie_break import choosing
from tests.app.test_service import _example_cluster_service, _filter
from tests.conftest import bind_pod, filter_answer, filter_body, make_service, node_obj, pod_obj


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
