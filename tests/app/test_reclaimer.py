"""The reclaim loop over the cache (app/pipeline/reclaimer.py): what it evicts, reports, and refuses to do.
Snapshot mode: an eviction removes the pod from the cache, as the watch would."""

from __future__ import annotations

import asyncio
import copy
import re
from typing import Any

import pytest

from app.cluster.eviction import EvictionOutcome, SnapshotEvictor
from app.cluster.objects import node_from_obj
from app.config import ConfigError, parse_config
from app.operator.metrics import Metrics
from app.pipeline.reclaimer import Reclaimer
from fairshare.flavor import PodPlacement
from tests.app.test_admission_order import T0, stamp
from tests.conftest import in_queue, lending_cluster_queue, make_service, node_obj, pod_obj

GPU = "nvidia.com/gpu"


def cohort(reclaim: dict[str, Any] | None = None) -> dict[str, Any]:
    """lender and borrower, 4 GPUs nominal each, one cohort; the borrower may take all 8."""

    section: dict[str, Any] = {
        "resourceFlavors": [{"metadata": {"name": "default"}}],
        "clusterQueues": [lending_cluster_queue(q, "default") for q in ("lender", "borrower")],
        "localQueues": [
            {"metadata": {"name": "lq", "namespace": ns}, "spec": {"clusterQueue": ns}} for ns in ("lender", "borrower")
        ],
    }
    if reclaim is not None:
        section["reclaim"] = reclaim
    return {"queues": section}


def borrower_pods(count: int = 8, group: dict[int, str] | None = None) -> list[dict[str, Any]]:
    """``count`` one-GPU pods of the borrower on n1, bound one second apart (b0 first)."""
    pods = []
    for i in range(count):
        pod = in_queue(
            pod_obj(f"b{i}", gpus=1, cpu=None, memory=None, node="n1", namespace="borrower", uid=f"b{i}"), "lq"
        )
        pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp(T0 + i)}]
        if group and i in group:
            pod["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] = group[i]
        pods.append(pod)
    return pods


def lender_pods(count: int, gpus: int = 1) -> list[dict[str, Any]]:
    return [
        in_queue(pod_obj(f"l{i}", gpus=gpus, cpu=None, memory=None, namespace="lender", uid=f"l{i}"), "lq")
        for i in range(count)
    ]


class Recorder(SnapshotEvictor):
    """The snapshot evictor, refusing (429) the pods in ``protected``, as a PodDisruptionBudget would."""

    def __init__(self, cache: Any, protected: set[str] | None = None) -> None:
        super().__init__(cache)
        self.protected = protected or set()

    async def evict(self, namespace: str, name: str, uid: str, *, dry_run: bool) -> tuple[EvictionOutcome, str]:
        if uid in self.protected:
            return EvictionOutcome.BLOCKED, "Cannot evict pod as it would violate the pod's disruption budget."
        return await super().evict(namespace, name, uid, dry_run=dry_run)


def reclaimer(pods: list[dict[str, Any]], mode: str = "on", **reclaim: Any) -> tuple[Reclaimer, Recorder, Metrics]:
    service = make_service([node_obj("n1", gpus=8)], pods, config=cohort({"mode": mode, **reclaim}))
    assert service.fairness is not None
    evictor = Recorder(service.cache)
    metrics = Metrics()
    clock = [T0 + 3600.0]
    r = Reclaimer(
        service.fairness,
        evictor,
        on_eviction=lambda q, o: metrics.reclaim_evictions.labels(q, o).inc(),
        wall_clock=lambda: clock[0],
    )
    return r, evictor, metrics


def run(r: Reclaimer) -> list[Any]:
    return asyncio.run(r.round())


def reclaim_decisions(r: Reclaimer) -> list[dict[str, Any]]:
    return [d for d in r.fairness.decisions if d["verb"] == "reclaim"]


def test_lender_gets_back_exactly_what_it_asks_most_recently_admitted_first() -> None:
    """The borrower holds all 8 GPUs (4 of them lent); the lender asks for 2 x 1 GPU within its nominal
    quota: InCohortReclamation of the two most recently bound borrower pods (b7, b6), one per lender
    pod, each with an Event on the victim and on the beneficiary."""
    r, evictor, metrics = reclaimer(borrower_pods() + lender_pods(2))
    plans = run(r)
    assert [(p.pod.name, [w.key for w, _ in p.choice.victims]) for p in plans] == [("l0", ["b7"]), ("l1", ["b6"])]
    assert evictor.evictions == ["b7", "b6"]
    assert {v["reason"] for d in reclaim_decisions(r) for v in d["victims"]} == {"InCohortReclamation"}
    reasons = sorted((e.reason, e.name) for e in evictor.events)
    assert reasons == [("Reclaimed", "b6"), ("Reclaimed", "b7"), ("Reclaiming", "l0"), ("Reclaiming", "l1")]
    victim_event = next(e for e in evictor.events if e.name == "b7")
    assert "ClusterQueue borrower" in victim_event.message and "ClusterQueue lender" in victim_event.message
    assert (
        metrics.registry.get_sample_value(
            "kube_gpu_extender_reclaim_evictions_total", {"queue": "borrower", "outcome": "evicted"}
        )
        == 2.0
    )
    assert run(r) == []  # the lender's pods now fit: nothing more is evicted
    assert evictor.evictions == ["b7", "b6"]


def test_dry_run_reports_the_same_choice_and_evicts_nothing() -> None:
    r, evictor, metrics = reclaimer(borrower_pods() + lender_pods(2), mode="dry-run")
    run(r)
    assert evictor.evictions == []
    decisions = reclaim_decisions(r)
    assert [(d["pod"], [v["pod"] for v in d["victims"]], d["outcome"]) for d in decisions] == [
        ("lender/l0", ["borrower/b7"], "dry-run"),
        ("lender/l1", ["borrower/b6"], "dry-run"),
    ]
    run(r)  # the same decision again: not recorded twice, and not counted twice
    assert len(reclaim_decisions(r)) == 2
    dry_runs = {"queue": "borrower", "outcome": "dry-run"}
    assert metrics.registry.get_sample_value("kube_gpu_extender_reclaim_evictions_total", dry_runs) == 2.0


def test_off_does_nothing() -> None:
    r, evictor, _ = reclaimer(borrower_pods() + lender_pods(2), mode="off")
    assert run(r) == [] and evictor.evictions == [] and reclaim_decisions(r) == []


def test_a_borrower_within_its_nominal_quota_is_not_reclaimed_from() -> None:
    """The borrower runs 4 (its own nominal) and the lender 4: nothing is borrowed, nothing is reclaimed
    for a fifth lender pod (the lender would borrow: the borrower is no candidate)."""
    lender_running = [
        in_queue(pod_obj(f"r{i}", gpus=1, cpu=None, memory=None, node="n1", namespace="lender", uid=f"r{i}"), "lq")
        for i in range(4)
    ]
    r, evictor, _ = reclaimer(borrower_pods(4) + lender_running + lender_pods(1))
    assert run(r) == [] and evictor.evictions == []


def test_a_refused_eviction_is_retried_later_never_forced() -> None:
    r, evictor, metrics = reclaimer(borrower_pods() + lender_pods(1), retryAfterSeconds=0)
    evictor.protected = {"b7"}
    run(r)
    assert evictor.evictions == []
    assert reclaim_decisions(r)[-1]["outcome"] == "blocked"
    assert (
        metrics.registry.get_sample_value(
            "kube_gpu_extender_reclaim_evictions_total", {"queue": "borrower", "outcome": "blocked"}
        )
        == 1.0
    )
    run(r)  # still refused: still nothing evicted, the same victim chosen (the choice does not drift)
    assert evictor.evictions == []
    evictor.protected = set()  # the budget allows it now
    run(r)
    assert evictor.evictions == ["b7"]
    run(r)  # what was kept per pod for the retries is forgotten once its time has passed
    assert r.retry_at == {}


def test_a_pod_group_is_evicted_whole_or_not_at_all() -> None:
    """b6 and b7 form one Kueue pod group (one workload of 2 GPUs), the most recently admitted: one
    lender pod of 1 GPU takes the whole group. With b6 protected by a budget, neither is evicted."""
    pods = borrower_pods(group={6: "g", 7: "g"}) + lender_pods(1)
    r, evictor, _ = reclaimer(copy.deepcopy(pods))
    run(r)
    assert sorted(evictor.evictions) == ["b6", "b7"]

    r, evictor, _ = reclaimer(copy.deepcopy(pods))
    evictor.protected = {"b6"}
    run(r)
    assert evictor.evictions == []


def test_rate_limit_and_minimum_runtime() -> None:
    r, evictor, _ = reclaimer(borrower_pods() + lender_pods(2), evictionsPerMinute=1)
    run(r)
    assert evictor.evictions == ["b7"]  # the second decision waits for the next minute
    assert reclaim_decisions(r)[-1]["outcome"] == "rate-limited"

    # Bound 3600 s before "now" minus the pod's index: b0..b7 ran 3593..3600 s; a 3597 s minimum leaves b0..b3.
    r, evictor, _ = reclaimer(borrower_pods() + lender_pods(1), minRuntimeSeconds=3597)
    run(r)
    assert evictor.evictions == ["b3"]


@pytest.mark.parametrize(
    ("reclaim", "message"),
    [
        ({"mode": "yes"}, "queues.reclaim.mode: must be one of off, dry-run, on"),
        ({"evictionsPerMinute": 0}, "queues.reclaim.evictionsPerMinute: must be >= 1"),
        ({"evictionsPerMinute": 1.5}, "queues.reclaim.evictionsPerMinute: must be an integer"),
        ({"minRuntimeSeconds": -1}, "queues.reclaim.minRuntimeSeconds: must be >= 0"),
        ({"leaderLease": "nolease"}, "queues.reclaim.leaderLease: must be"),
        ({"evict": True}, "queues.reclaim: unknown field(s) ['evict']"),
    ],
)
def test_reclaim_config_errors_name_the_field(reclaim: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_config(cohort(reclaim))


def test_default_mode_is_off() -> None:
    config = parse_config(cohort())
    assert config.queue_config() is not None
    assert config.queue_config().reclaim.mode == "off"  # type: ignore[union-attr]


def test_debug_queues_shows_the_reclaimer(client_for: Any) -> None:
    service = make_service(
        [node_obj("n1", gpus=8)], borrower_pods() + lender_pods(1), config=cohort({"mode": "dry-run"})
    )
    assert service.fairness is not None
    r = Reclaimer(service.fairness, SnapshotEvictor(service.cache))
    run(r)
    view = client_for(service).get("/debug/queues").json()
    assert view["reclaim"]["mode"] == "dry-run" and view["reclaim"]["leading"] is True
    assert view["reclaim"]["workloadIndex"] == {"kueue": {"workloads": 8, "wholeBuilds": 1}}
    (decision,) = [d for d in view["decisions"] if d["verb"] == "reclaim"]
    assert decision["victims"][0]["pod"] == "borrower/b7" and decision["shares"]["borrower"] > 0


def test_pods_no_eviction_can_help_do_not_keep_the_others_from_being_judged() -> None:
    """Sixteen higher-priority lender pods ask for more than any node has: no eviction helps them.
    The next round judges the seventeenth, which asks for one GPU, first, and gets its victim."""
    hopeless = lender_pods(16, gpus=9)
    for pod in hopeless:
        pod["spec"]["priority"] = 100
    helped = in_queue(pod_obj("late", gpus=1, cpu=None, memory=None, namespace="lender", uid="late"), "lq")
    r, evictor, _ = reclaimer([*borrower_pods(), *hopeless, helped])
    assert run(r) == [] and evictor.evictions == []  # only the 16 hopeless ones were judged
    (plan,) = run(r)
    assert plan.pod.name == "late" and evictor.evictions == ["b7"]


def test_the_nodes_a_placement_allows_follow_cordons_and_labels() -> None:
    """Which nodes a pending pod may go to is kept between rounds, until a node changes: cordoned,
    or relabelled away from the pod's nodeSelector, n1 offers no room, and no victims are chosen."""
    r, _evictor, _metrics = reclaimer(borrower_pods() + lender_pods(1), mode="dry-run")
    cache = r.fairness.cache
    assert cache is not None
    r.fairness.remember_placement("l0", PodPlacement(node_selector={"zone": "a"}))

    def victims_with(**node: Any) -> list[list[str]]:
        obj = node_obj("n1", gpus=8)
        obj["metadata"]["labels"] = {"zone": node.get("zone", "a")}
        obj["spec"] = {"unschedulable": node.get("cordoned", False)}
        cache.upsert_node(node_from_obj(obj))
        return [[w.key for w, _ in plan.choice.victims] for plan in r.decide()]

    assert victims_with() == [["b7"]]
    assert victims_with(cordoned=True) == []
    assert victims_with() == [["b7"]]
    assert victims_with(zone="b") == []
    assert victims_with(zone="a") == [["b7"]]
