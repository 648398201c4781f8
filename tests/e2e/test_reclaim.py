"""The reclaimer on a real control plane: a queue gets back the GPUs it lent to a borrower of the same
priority, which kube-scheduler's own preemption never does (it only evicts lower-priority pods).

Two ClusterQueues of one cohort, 4 GPUs nominal each, one 8-GPU node: the borrower fills all 8, the
lender asks for 2. Expected victims are derived from the API objects the way Kueue orders candidates
(most recently admitted first, i.e. latest PodScheduled time, then UID)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.conftest import lending_cluster_queue
from tests.e2e.conftest import GROUP_LABEL, Group
from tests.e2e.controlplane import extender_config
from tests.e2e.kueue import KUEUE
from tests.e2e.process import wait_for

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
BORROWERS = [f"b{i}" for i in range(8)]
LENDERS = ["l0", "l1"]


def config(group: Group, mode: str) -> dict[str, Any]:
    cfg = extender_config()
    cfg["queues"] = {
        "resourceFlavors": [{"metadata": {"name": "e2e-gpus"}, "spec": {"nodeLabels": {GROUP_LABEL: group.name}}}],
        "clusterQueues": [lending_cluster_queue(q, "e2e-gpus") for q in ("lender", "borrower")],
        "localQueues": [
            {"metadata": {"name": name, "namespace": group.name}, "spec": {"clusterQueue": name}}
            for name in ("lender", "borrower")
        ],
        "reclaim": {"mode": mode, "intervalSeconds": 0.5, "retryAfterSeconds": 1},
    }
    return cfg


@pytest.fixture
def cohort(group: Group) -> Iterator[Group]:
    try:
        yield group
    finally:
        group.cluster.restart_extender()


def fill_with_borrowers(group: Group) -> str:
    node = group.node("a")
    for name in BORROWERS:
        group.pod(name, gpus=1, labels={QUEUE_LABEL: "borrower", "app": "borrower"})
    group.wait_bound(*BORROWERS)
    return node


def most_recently_admitted(group: Group, count: int) -> list[str]:
    """Kueue's candidate order over the API objects: latest PodScheduled=True time first, then UID."""

    def key(pod: dict[str, Any]) -> tuple[float, str]:
        (cond,) = [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled" and c["status"] == "True"]
        return (-datetime.fromisoformat(cond["lastTransitionTime"]).timestamp(), pod["metadata"]["uid"])

    borrowers = sorted((p for p in group.pods() if p["metadata"]["name"] in BORROWERS), key=key)
    return [p["metadata"]["name"] for p in borrowers[:count]]


def reclaim_decisions(group: Group) -> list[dict[str, Any]]:
    decisions = group.cluster.extender.get("/debug/queues").json().get("decisions", [])
    return [d for d in decisions if d["verb"] == "reclaim"]


def victims_reported(group: Group, outcome: str) -> set[str] | None:
    """The victims named for both lender pods with ``outcome``, once both are reported."""
    found = {d["pod"]: d for d in reclaim_decisions(group) if d["outcome"] == outcome}
    if {f"{group.name}/{n}" for n in LENDERS} - set(found):
        return None
    return {v["pod"].split("/", 1)[1] for d in found.values() for v in d["victims"]}


def borrowers_left(group: Group) -> set[str]:
    return {p["metadata"]["name"] for p in group.pods() if p["metadata"]["name"] in BORROWERS}


def test_lender_reclaims_exactly_what_it_needs_dry_run_then_on_across_a_restart(cohort: Group) -> None:
    group = cohort
    group.cluster.restart_extender(config(group, "dry-run"))
    node = fill_with_borrowers(group)
    expected = set(most_recently_admitted(group, 2))
    for name in LENDERS:
        group.pod(name, gpus=1, labels={QUEUE_LABEL: "lender"})
    # kube-scheduler's own NodeResourcesFit rejects them (the node is full), so the extender's filter
    # never sees them; equal priority, so no preemption either: only the reclaimer can help.
    assert "No preemption victims" in group.wait_unschedulable("l0")

    reported = wait_for("the dry-run decisions", lambda: victims_reported(group, "dry-run"), timeout=30)
    assert reported == expected
    assert borrowers_left(group) == set(BORROWERS)  # dry-run evicts nothing

    group.cluster.restart_extender(config(group, "on"))  # a restart in the middle: the same choice
    wait_for("the victims evicted", lambda: borrowers_left(group) == set(BORROWERS) - expected or None, timeout=30)
    group.wait_bound(*LENDERS, timeout=60)
    assert borrowers_left(group) == set(BORROWERS) - expected  # exactly enough, and exactly those
    assert group.gpus_per_node() == {node: 8}  # no over-commit
    assert victims_reported(group, "evicted") == expected
    extender = group.cluster.extender
    assert extender.metric("kube_gpu_extender_reclaim_evictions_total", outcome="evicted", queue="borrower") == 2
    events = group.api.items(f"/api/v1/namespaces/{group.name}/events")
    reclaimed = {e["involvedObject"]["name"] for e in events if e["reason"] == "Reclaimed"}
    reclaiming = {e["involvedObject"]["name"] for e in events if e["reason"] == "Reclaiming"}
    assert reclaimed == expected and reclaiming == set(LENDERS)
    assert all("ClusterQueue borrower" in e["message"] for e in events if e["reason"] == "Reclaimed")


def make_running(group: Group, name: str) -> None:
    """What a kubelet would report: Running and Ready (the Eviction API ignores budgets for Pending pods)."""
    now = datetime.now().astimezone().strftime("%Y-%m-%dT%H:%M:%SZ")
    status = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}]}
    group.api.patch(f"/api/v1/namespaces/{group.name}/pods/{name}/status", {"status": status}, kind="strategic-merge")


def test_a_disruption_budget_that_forbids_the_eviction_is_respected(cohort: Group) -> None:
    group = cohort
    group.cluster.restart_extender(config(group, "on"))
    fill_with_borrowers(group)
    for name in BORROWERS:
        make_running(group, name)
    (victim,) = most_recently_admitted(group, 1)
    pdbs = f"/apis/policy/v1/namespaces/{group.name}/poddisruptionbudgets"
    group.api.create(
        pdbs,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "borrowers"},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "borrower"}}},
        },
    )
    # The disruption controller's verdict, written by hand (no controller runs here): no disruption allowed.
    status = {
        "observedGeneration": 1,
        "disruptionsAllowed": 0,
        "currentHealthy": 8,
        "desiredHealthy": 8,
        "expectedPods": 8,
    }
    group.api.patch(f"{pdbs}/borrowers/status", {"status": status})
    group.pod("l0", gpus=1, labels={QUEUE_LABEL: "lender"})

    def blocked() -> bool | None:
        return (
            any(
                d["outcome"] == "blocked" and d["victims"][0]["pod"].endswith(f"/{victim}")
                for d in reclaim_decisions(group)
            )
            or None
        )

    wait_for("the eviction refused by the budget", blocked, timeout=30)
    assert borrowers_left(group) == set(BORROWERS)  # never forced
    assert group.cluster.extender.metric("kube_gpu_extender_reclaim_evictions_total", outcome="blocked") >= 1

    group.api.delete(f"{pdbs}/borrowers")
    wait_for(
        "the victim evicted once the budget is gone", lambda: borrowers_left(group) == set(BORROWERS) - {victim} or None
    )
    group.wait_bound("l0", timeout=60)


def _workload(pod: dict[str, Any]) -> dict[str, Any]:
    """The Workload Kueue's plain-pod integration would create for ``pod`` (owned by it)."""
    meta = pod["metadata"]
    owner = {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": f"pod-{meta['name']}", "ownerReferences": [owner]},
        "spec": {"queueName": "borrower"},
    }


def _quota_reserved(at: datetime) -> dict[str, Any]:
    stamp = at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    condition = {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "lastTransitionTime": stamp}
    return {"status": {"conditions": [condition]}}


@pytest.fixture
def watched_cohort(group: Group, kueue_crds: None) -> Iterator[Group]:
    """The same cohort as Kueue objects the extender watches (``queues.watchKueue``), reclaim in dry-run."""
    api, name = group.api, group.name
    flavor = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": name}}
    api.create(f"{KUEUE}/resourceflavors", {**flavor, "spec": {"nodeLabels": group.selector}})
    for queue in ("lender", "borrower"):
        spec = lending_cluster_queue(f"{name}-{queue}", name)
        spec["spec"]["cohortName"] = name
        api.create(f"{KUEUE}/clusterqueues", {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", **spec})
        local = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": queue}}
        api.create(f"{KUEUE}/namespaces/{name}/localqueues", {**local, "spec": {"clusterQueue": f"{name}-{queue}"}})
    cfg = extender_config()
    cfg["queues"] = {"watchKueue": True, "reclaim": {"mode": "dry-run", "intervalSeconds": 0.5}}
    group.cluster.restart_extender(cfg)
    try:
        yield group
    finally:
        group.cluster.restart_extender()
        for queue in ("lender", "borrower"):
            api.delete(f"{KUEUE}/clusterqueues/{name}-{queue}", grace=None)
        api.delete(f"{KUEUE}/resourceflavors/{name}", grace=None)


def test_watched_admission_times_order_the_victims_and_a_new_admission_reorders_them(watched_cohort: Group) -> None:
    """Kueue orders candidates by their Workload's admission time, not by the pod's binding. The
    borrowers' Workloads say b0 was admitted last (the reverse of their binding order), so b0 is the
    victim; Kueue then admits b3's Workload anew, and the next round names b3. The reclaimer's index
    takes that one admission change without building its workloads whole again."""
    group = watched_cohort
    fill_with_borrowers(group)
    pods = {p["metadata"]["name"]: p for p in group.pods()}
    workloads = f"{KUEUE}/namespaces/{group.name}/workloads"
    base = datetime.now(UTC) - timedelta(hours=1)
    for i, name in enumerate(BORROWERS):
        group.api.create(workloads, _workload(pods[name]))
        group.api.patch(f"{workloads}/pod-{name}/status", _quota_reserved(base - timedelta(minutes=i)))
    group.pod("l0", gpus=1, labels={QUEUE_LABEL: "lender"})

    def victim() -> str | None:
        decisions = [d for d in reclaim_decisions(group) if d["pod"] == f"{group.name}/l0"]
        return decisions[-1]["victims"][0]["pod"].split("/", 1)[1] if decisions else None

    assert wait_for("the first decision", victim, timeout=30) == "b0"

    def whole_builds() -> int:
        index = group.cluster.extender.get("/debug/queues").json()["reclaim"]["workloadIndex"]
        return int(index["kueue"]["wholeBuilds"])

    builds = whole_builds()
    group.api.patch(f"{workloads}/pod-b3/status", _quota_reserved(base + timedelta(minutes=5)))
    wait_for("b3 named after its new admission", lambda: victim() == "b3" or None, timeout=30)
    assert whole_builds() == builds
    assert set(borrowers_left(group)) == set(BORROWERS)  # dry-run evicts nothing
