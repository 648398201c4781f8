"""The pipeline framework: which participants an extension point calls, in what order, and how a
bind gives back what was reserved when it fails."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from app.cluster.writes import BindError
from app.pipeline.fit import ResourceFit
from app.pipeline.framework import BindCycle, FilterCycle, Participant, Pipeline, Refusal, VictimChoice
from app.service import ExtenderService
from scoring.framework import Code, PodInfo, Status
from tests.conftest import bind_body, filter_answer, filter_body, make_service, node_obj, pod_obj


class Recorder(Participant):
    """Implements every extension point; logs each call as (name, point)."""

    def __init__(self, name: str, log: list[tuple[str, str]], *, applies: bool = True) -> None:
        self.name = name  # type: ignore[misc]
        self.log = log
        self._applies = applies
        self.refuse: dict[str, Refusal] = {}  # point -> refusal to return

    def applies(self, pod: PodInfo) -> bool:
        return self._applies

    def filter(self, cycle: FilterCycle) -> None:
        self.log.append((self.name, "filter"))
        for position in cycle.passing():
            if cycle.names[position] == f"reject-{self.name}":
                cycle.verdicts.set(position, Status(Code.UNSCHEDULABLE, f"{self.name} says no"))

    def admit(self, pod: PodInfo, node: str) -> Refusal | None:
        self.log.append((self.name, "admit"))
        return self.refuse.get("admit")

    def reserve(self, cycle: BindCycle) -> Refusal | None:
        self.log.append((self.name, "reserve"))
        return self.refuse.get("reserve")

    async def unreserve(self, cycle: BindCycle) -> None:
        self.log.append((self.name, "unreserve"))

    async def pre_bind(self, cycle: BindCycle) -> Refusal | None:
        self.log.append((self.name, "pre_bind"))
        return self.refuse.get("pre_bind")

    def post_bind(self, cycle: BindCycle) -> None:
        self.log.append((self.name, "post_bind"))

    def select_victims(self, pod: PodInfo, node: str, victims: Sequence[str]) -> VictimChoice | None:
        self.log.append((self.name, "select_victims"))
        return None

    def explain(self, pod: PodInfo, names: Sequence[str]) -> Mapping[str, Any]:
        return {name: {"by": self.name} for name in names}


class FilterOnly(Participant):
    name = "filter-only"

    def filter(self, cycle: FilterCycle) -> None:
        return None


def with_participants(*extra: Participant) -> tuple[ExtenderService, dict[str, Any]]:
    service = make_service(nodes=[node_obj("n1"), node_obj("n2"), node_obj("reject-a"), node_obj("reject-b")])
    fit = service.pipeline.get(ResourceFit)
    assert fit is not None
    service.pipeline = Pipeline([fit, *extra])
    return service, pod_obj("p", gpus=1)


def test_points_call_only_the_participants_that_implement_them() -> None:
    log: list[tuple[str, str]] = []
    pipeline = Pipeline([Recorder("a", log), FilterOnly()])
    assert [p.name for p in pipeline.at("filter")] == ["a", "filter-only"]
    assert [p.name for p in pipeline.at("reserve")] == ["a"]
    assert [p.name for p in pipeline.at("metrics")] == []


def test_participants_need_distinct_names() -> None:
    with pytest.raises(ValueError, match="distinct names"):
        Pipeline([FilterOnly(), FilterOnly()])


def test_filter_runs_participants_in_order_and_the_first_failure_wins() -> None:
    log: list[tuple[str, str]] = []
    service, pod = with_participants(Recorder("a", log), Recorder("b", log))
    answer = filter_answer(service, filter_body(pod, ["n1", "reject-a", "reject-b"]))
    assert answer["NodeNames"] == ["n1"]
    assert answer["FailedNodes"] == {"reject-a": "a says no", "reject-b": "b says no"}
    assert log == [("a", "filter"), ("b", "filter")]


def test_a_participant_that_does_not_apply_to_the_pod_is_not_asked() -> None:
    log: list[tuple[str, str]] = []
    service, pod = with_participants(Recorder("a", log, applies=False))
    answer = filter_answer(service, filter_body(pod, ["n1", "reject-a"]))
    assert answer["NodeNames"] == ["n1", "reject-a"]
    assert log == []


def bind(service: ExtenderService, pod: dict[str, Any], node: str) -> dict[str, Any]:
    filter_answer(service, filter_body(pod, [node]))  # the service learns the pod from filter, as in production
    return asyncio.run(service.bind(bind_body(pod, node)))


def test_a_bind_runs_admit_reserve_pre_bind_then_post_bind() -> None:
    log: list[tuple[str, str]] = []
    service, pod = with_participants(Recorder("a", log), Recorder("b", log))
    assert bind(service, pod, "n1") == {"Error": ""}
    points = [entry for entry in log if entry[1] != "filter"]
    assert points == [
        ("a", "admit"),
        ("b", "admit"),
        ("a", "reserve"),
        ("b", "reserve"),
        ("a", "pre_bind"),
        ("b", "pre_bind"),
        ("a", "post_bind"),
        ("b", "post_bind"),
    ]
    assert service.cache.counted(pod["metadata"]["uid"]) is not None


def test_a_refused_reserve_gives_back_what_was_reserved_before_it_last_first() -> None:
    log: list[tuple[str, str]] = []
    a, b, c = Recorder("a", log), Recorder("b", log), Recorder("c", log)
    c.refuse["reserve"] = Refusal("no-fit", "c cannot hold it")
    service, pod = with_participants(a, b, c)
    assert bind(service, pod, "n1") == {"Error": "c cannot hold it"}
    assert [entry for entry in log if entry[1] in {"reserve", "unreserve"}] == [
        ("a", "reserve"),
        ("b", "reserve"),
        ("c", "reserve"),
        ("b", "unreserve"),
        ("a", "unreserve"),
    ]
    assert service.cache.counted(pod["metadata"]["uid"]) is None  # the resource fit's assumption went too
    assert service.metrics.bind_errors.labels("no-fit")._value.get() == 1


def test_a_refused_admission_reserves_nothing() -> None:
    log: list[tuple[str, str]] = []
    a = Recorder("a", log)
    a.refuse["admit"] = Refusal("quota", "no quota")
    service, pod = with_participants(a)
    assert bind(service, pod, "n1") == {"Error": "no quota"}
    assert [entry for entry in log if entry[1] != "filter"] == [("a", "admit")]
    assert service.cache.counted(pod["metadata"]["uid"]) is None


@pytest.mark.parametrize("definite", [True, False])
def test_a_failed_pre_bind_unreserves_only_when_it_failed_for_certain(definite: bool) -> None:
    log: list[tuple[str, str]] = []
    a = Recorder("a", log)
    a.refuse["pre_bind"] = Refusal("claim-write", "write failed", definite=definite)
    service, pod = with_participants(a)
    assert bind(service, pod, "n1") == {"Error": "write failed"}
    assert (("a", "unreserve") in log) is definite
    assert (service.cache.counted(pod["metadata"]["uid"]) is None) is definite
    assert ("a", "post_bind") not in log


@pytest.mark.parametrize("definite", [True, False])
def test_a_failed_binding_unreserves_every_participant_when_it_failed_for_certain(definite: bool) -> None:
    log: list[tuple[str, str]] = []
    service, pod = with_participants(Recorder("a", log), Recorder("b", log))

    class Refusing:
        async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
            raise BindError("conflict", kind="api", definite=definite)

    service.binder = Refusing()
    answer = bind(service, pod, "n1")
    assert answer["Error"].endswith("failed: conflict")
    unreserved = [entry for entry in log if entry[1] == "unreserve"]
    assert unreserved == ([("b", "unreserve"), ("a", "unreserve")] if definite else [])


def test_explain_shows_each_participant_under_its_name() -> None:
    log: list[tuple[str, str]] = []
    service, pod = with_participants(Recorder("a", log))
    nodes = service.explain(filter_body(pod, ["n1", "ghost"]))["nodes"]
    assert [(n["name"], n["a"], "filter" in n) for n in nodes] == [
        ("n1", {"by": "a"}, True),
        ("ghost", {"by": "a"}, True),
    ]


def test_a_merged_verdict_counts_only_where_every_earlier_one_passed() -> None:
    """The first participant's verdicts are taken as they are; a later one's failures count only on
    nodes still passing (the first failure wins, as in kube-scheduler's filter)."""
    from app.cluster.objects import pod_from_obj
    from app.http.wire import Candidates
    from scoring.verdicts import BatchVerdicts

    def verdicts(*failing: tuple[int, str]) -> BatchVerdicts:
        out = BatchVerdicts.passing(3)
        for position, reason in failing:
            out.set(position, Status(Code.UNSCHEDULABLE, reason))
        return out

    pod = pod_from_obj(pod_obj("p", gpus=1))
    cycle = FilterCycle(pod, Candidates(["a", "b", "c"]), None, BatchVerdicts.passing(3))
    first = verdicts((0, "fit: a is full"))
    cycle.merge(first)
    assert cycle.verdicts is first
    cycle.merge(verdicts((0, "later: a"), (1, "later: b")))
    assert cycle.passing() == [2]
    assert [cycle.verdicts.status(i).reason for i in (0, 1)] == ["fit: a is full", "later: b"]
