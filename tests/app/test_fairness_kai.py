"""KAI queues in the verbs (app/pipeline/fairness.py over fairshare/): over-quota and fair share in
filter, limits, the queue tree, bind then watch, and the victims reclaim allows in preempt. Every
expected number is worked by hand in a comment from the reference (fair-sharing.md)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.cluster.objects import pod_from_obj
from app.config import ConfigError, parse_config
from fairshare.config import KAI_QUEUE_LABEL
from tests.conftest import (
    bind_body,
    filter_body,
    in_queue,
    make_service,
    node_obj,
    pod_obj,
)


def kai_config(qa: dict[str, Any], qb: dict[str, Any] | None = None, **fair_sharing: Any) -> dict[str, Any]:
    return {
        "queues": {
            "kaiQueues": [
                {"metadata": {"name": "qa"}, "spec": {"resources": {"gpu": qa}}},
                {"metadata": {"name": "qb"}, "spec": {"resources": {"gpu": qb or {"quota": 4}}}},
            ],
            "fairSharing": fair_sharing,
        }
    }


def kai_pods(qb_pending: int) -> list[dict[str, Any]]:
    pods = [in_queue(pod_obj("a-run", gpus=4, node="n", uid="a-run", phase="Running"), "qa", KAI_QUEUE_LABEL)]
    if qb_pending:
        pods.append(in_queue(pod_obj("b-wait", gpus=qb_pending, uid="b-wait"), "qb", KAI_QUEUE_LABEL))
    return pods


def kai_filter(service: Any, client_for: Any, gpus: int = 2) -> dict[str, Any]:
    pod = in_queue(pod_obj("a-new", gpus=gpus, uid="a-new"), "qa", KAI_QUEUE_LABEL)
    result: dict[str, Any] = client_for(service).post("/filter", content=filter_body(pod, ["n"])).json()
    return result


def test_kai_over_quota_goes_to_the_queue_that_asks(client_for: Any) -> None:
    """8 GPUs; qa (deserved 4) runs 4 and asks 2 more, qb (deserved 4) asks nothing: phase 1 gives 4/0,
    the 4 left go over quota to qa up to its request -> fair share 6: 4 + 2 <= 6 passes."""
    service = make_service([node_obj("n", gpus=8)], kai_pods(0), config=kai_config({"quota": 4}))
    assert kai_filter(service, client_for)["NodeNames"] == ["n"]


def test_kai_fair_share_blocks_when_another_queue_waits(client_for: Any) -> None:
    """qb has a pending 4-GPU pod: requests qa 6, qb 4; deserved 4 + 4 = 8 leaves nothing over quota ->
    fair shares 4/4. qa at 4 + 2 > 4 and no capacity is idle (8 - 4 allocated - qb's unmet 4 = 0):
    resolvable (reclaim may help). The view shows the division."""
    service = make_service([node_obj("n", gpus=8)], kai_pods(4), config=kai_config({"quota": 4}))
    result = kai_filter(service, client_for)
    assert result["NodeNames"] == []
    assert "over its fair share of gpu" in result["FailedNodes"]["n"]
    view = client_for(service).get("/debug/queues").json()["kai"]
    assert view["totals"]["gpu"] == 8
    assert view["queues"]["qa"]["resources"]["gpu"]["fairShare"] == 4
    assert view["queues"]["qb"]["resources"]["gpu"]["pending"] == 4


def test_kai_idle_capacity_may_be_used_above_fair_share(client_for: Any) -> None:
    """qa has overQuotaWeight 0, so its fair share stays at deserved 4; nobody else wants the other 4
    GPUs (qb requests nothing), so they are idle and qa may take 2 of them."""
    config = kai_config({"quota": 4, "overQuotaWeight": 0})
    service = make_service([node_obj("n", gpus=8)], kai_pods(0), config=config)
    assert kai_filter(service, client_for)["NodeNames"] == ["n"]
    # With qb waiting for 4, those GPUs are no longer idle.
    service = make_service([node_obj("n", gpus=8)], kai_pods(4), config=config)
    result = kai_filter(service, client_for)
    assert result["NodeNames"] == [] and "over its fair share of gpu" in result["FailedNodes"]["n"]


def test_kai_limit_is_unresolvable(client_for: Any) -> None:
    service = make_service([node_obj("n", gpus=8)], kai_pods(0), config=kai_config({"quota": 4, "limit": 5}))
    result = kai_filter(service, client_for)
    assert result["FailedAndUnresolvableNodes"]["n"].startswith(
        "OverLimit: KAI queue qa gpu allocated 4 + request 2 > limit 5"
    )


def test_kai_bind_then_watch_keeps_one_count(client_for: Any) -> None:
    """A pending pod counts once as pending, then once as allocated after bind and after the watch."""
    service = make_service([node_obj("n", gpus=8)], kai_pods(0), config=kai_config({"quota": 4}))
    client = client_for(service)
    pod = in_queue(pod_obj("a-new", gpus=2, uid="a-new"), "qa", KAI_QUEUE_LABEL)
    service.cache.upsert_pod(pod_from_obj(pod))
    kai = service.fairness.kai
    assert (kai.allocated["qa"]["gpu"], kai.pending["qa"]["gpu"]) == (4, 2)
    assert client.post("/bind", content=bind_body(pod, "n")).json()["Error"] == ""
    assert (kai.allocated["qa"]["gpu"], kai.pending.get("qa", {})) == (6, {})
    pod["spec"]["nodeName"] = "n"
    service.cache.upsert_pod(pod_from_obj(pod))
    assert (kai.allocated["qa"]["gpu"], kai.pending.get("qa", {})) == (6, {})


@pytest.mark.parametrize(
    ("queues", "message"),
    [
        ([{"metadata": {"name": "a"}}, {"metadata": {"name": "a"}}], r"kaiQueues\[1\].metadata.name: duplicate a"),
        ([{"metadata": {"name": "a"}, "spec": {"parentQueue": "x"}}], r"kaiQueues\[0\].spec.parentQueue: unknown"),
        (
            [
                {"metadata": {"name": "a"}, "spec": {"parentQueue": "b"}},
                {"metadata": {"name": "b"}, "spec": {"parentQueue": "a"}},
            ],
            r"kaiQueues\[0\].spec.parentQueue: cycle through a",
        ),
    ],
)
def test_kai_queue_tree_is_validated(queues: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config({"queues": {"kaiQueues": queues}})


def test_kai_parent_limit_applies_to_its_children(client_for: Any) -> None:
    """org (limit 6) over qa and qb: qa runs 4, so a 2-GPU qb pod fits (6) but a 3-GPU one is over
    org's limit (4 + 3 > 6) though qb itself is unlimited."""
    config = {
        "queues": {
            "kaiQueues": [
                {"metadata": {"name": "org"}, "spec": {"resources": {"gpu": {"quota": 8, "limit": 6}}}},
                {"metadata": {"name": "qa"}, "spec": {"parentQueue": "org", "resources": {"gpu": {"quota": 4}}}},
                {"metadata": {"name": "qb"}, "spec": {"parentQueue": "org", "resources": {"gpu": {"quota": 4}}}},
            ]
        }
    }
    service = make_service([node_obj("n", gpus=8)], kai_pods(0), config=config)
    client = client_for(service)
    ok = in_queue(pod_obj("b2", gpus=2, uid="b2"), "qb", KAI_QUEUE_LABEL)
    assert client.post("/filter", content=filter_body(ok, ["n"])).json()["NodeNames"] == ["n"]
    big = in_queue(pod_obj("b3", gpus=3, uid="b3"), "qb", KAI_QUEUE_LABEL)
    reason = client.post("/filter", content=filter_body(big, ["n"])).json()["FailedAndUnresolvableNodes"]["n"]
    assert reason == "OverLimit: KAI queue org gpu allocated 4 + request 3 > limit 6"
    parent = in_queue(pod_obj("p", gpus=1, uid="p"), "org", KAI_QUEUE_LABEL)
    reason = client.post("/filter", content=filter_body(parent, ["n"])).json()["FailedAndUnresolvableNodes"]["n"]
    assert reason == "KAI queue org is a parent queue; only leaf queues hold pods"


def test_kai_preempt_keeps_only_victims_the_reclaim_rules_allow() -> None:
    """8 GPUs; qa (deserved 4) runs a0 = 4 and a1 = 2, qb (deserved 4) runs b0 = 2 and asks 2 more:
    requests 6 / 4 over 8 -> fair shares 4 / 4. qb may reclaim (2 + 2 <= 4). Offered [a0, a1]: a0
    leaves qa at 6 > its allocatable share 4 (MaintainFairShare) -> allowed; then a1 would leave qa at
    2 <= 4 -> refused. a0 alone frees 4 >= 2 on the node. Offered [a1] with qa at 4 only -> dropped."""

    def service_with(qa_pods: list[tuple[str, int]]) -> Any:
        pods = [
            in_queue(pod_obj(n, gpus=g, cpu=None, memory=None, node="n", uid=n, phase="Running"), "qa", KAI_QUEUE_LABEL)
            for n, g in qa_pods
        ]
        pods.append(
            in_queue(
                pod_obj("b0", gpus=2, cpu=None, memory=None, node="n", uid="b0", phase="Running"), "qb", KAI_QUEUE_LABEL
            )
        )
        return make_service([node_obj("n", gpus=8)], pods, config=kai_config({"quota": 4}))

    def preempt_kai(service: Any, victims: list[str]) -> dict[str, Any]:
        pod = in_queue(pod_obj("b1", gpus=2, cpu=None, memory=None, uid="b1", priority=10), "qb", KAI_QUEUE_LABEL)
        body = {
            "Pod": pod,
            "NodeNameToMetaVictims": {"n": {"Pods": [{"UID": u} for u in victims], "NumPDBViolations": 0}},
        }
        answer: dict[str, Any] = service.preempt(json.dumps(body).encode())["NodeNameToMetaVictims"]
        return answer

    service = service_with([("a0", 4), ("a1", 2)])
    assert preempt_kai(service, ["a0", "a1"]) == {"n": {"Pods": [{"UID": "a0"}], "NumPDBViolations": 0}}
    assert [v["reason"] for v in service.fairness.decisions[-1]["victims"]] == ["MaintainFairShare"]
    service = service_with([("a0", 4), ("a1", 2)])
    assert preempt_kai(service, ["b0"]) == {"n": {"Pods": [{"UID": "b0"}], "NumPDBViolations": 0}}  # own queue
    service = service_with([("a1", 4)])
    assert preempt_kai(service, ["a1"]) == {}
    assert "KAI reclaim rules allow none" in service.fairness.decisions[-1]["reason"]
