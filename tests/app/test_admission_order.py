"""Preemption candidates are ordered by when the cluster admitted each pod, as the API objects record
it (PodScheduled=True's lastTransitionTime, or the Kueue Workload's QuotaReserved time), ties by UID:
the same cluster gives the same victims before and after an extender restart, whatever order the
pods reach the new process in."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from app.cluster import workloads as workloads_module
from app.cluster.objects import pod_from_obj
from app.cluster.workloads import WorkloadAdmissions
from tests.app.test_fairness import COHORT_9
from tests.conftest import in_queue, make_service, node_obj, pod_obj

T0 = 1_760_000_000  # an arbitrary whole second


def stamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def worker(uid: str, bound_at: float) -> dict[str, Any]:
    """A 2-GPU pod of cq-p1 on n1, equal priority, bound at ``bound_at`` as its object records it."""
    pod = in_queue(pod_obj(uid, gpus=2, cpu=None, memory=None, node="n1", namespace="p1", uid=uid), "lq")
    pod["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp(bound_at)},
    ]
    return pod


# Bound in the order d, b, a, c: the two most recently admitted are c (T0+30) and a (T0+20).
WORKERS = [worker("a", T0 + 20), worker("b", T0 + 10), worker("c", T0 + 30), worker("d", T0)]


def preempt_victims(service: Any) -> list[str]:
    """Incoming 5 GPUs in cq-p2 (the reference's worked example: two victims of cq-p1's four)."""
    pod = in_queue(pod_obj("in", gpus=5, cpu=None, memory=None, namespace="p2", uid="in"), "lq")
    body = {
        "Pod": pod,
        "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": u} for u in "abcd"], "NumPDBViolations": 0}},
    }
    answer = service.preempt(json.dumps(body).encode())["NodeNameToMetaVictims"]
    return [v["UID"] for v in answer["n1"]["Pods"]]


def test_pod_admission_time_is_read_from_the_object() -> None:
    assert pod_from_obj(worker("x", T0 + 5)).admitted_at == T0 + 5
    unbound = pod_obj("u", gpus=1)
    assert pod_from_obj(unbound).admitted_at == 0.0  # not admitted yet
    created_bound = pod_obj("n", gpus=1, node="n1")
    created_bound["metadata"]["creationTimestamp"] = stamp(T0 + 7)  # spec.nodeName at creation: no scheduler
    assert pod_from_obj(created_bound).admitted_at == T0 + 7


def test_a_restart_between_two_identical_preempt_calls_gives_the_same_victims() -> None:
    """The first process saw the pods arrive one by one in one order; the restarted one lists them in
    another. Both take c and a: the most recently admitted first (Kueue's candidate order)."""
    config = {"queues": COHORT_9}
    first = make_service([node_obj("n1", gpus=9)], [], config=config)
    for obj in sorted(WORKERS, key=lambda p: p["metadata"]["uid"]):  # a, b, c, d: not the binding order
        first.cache.upsert_pod(pod_from_obj(obj))
    before = preempt_victims(first)
    assert sorted(before) == ["a", "c"]

    for seed in range(5):  # the "restarted" service: a fresh process that lists the same pods in any order
        shuffled = list(WORKERS)
        random.Random(seed).shuffle(shuffled)
        restarted = make_service([node_obj("n1", gpus=9)], shuffled, config=config)
        assert preempt_victims(restarted) == before


def test_equal_admission_times_are_ordered_by_uid() -> None:
    """PodScheduled has whole seconds: pods bound in the same second tie, and the UID decides (Kueue's
    last tie-break, ascending), not the order the process happened to see them in."""
    tied = [worker(uid, T0) for uid in "dcba"]
    service = make_service([node_obj("n1", gpus=9)], tied, config={"queues": COHORT_9})
    assert sorted(preempt_victims(service)) == ["a", "b"]


def test_a_watched_workloads_quota_reservation_time_wins_over_the_pods() -> None:
    """With Kueue's Workloads watched, a pod's admission is its Workload's QuotaReserved time: b's Workload
    (owned by b's Job) reserved quota last, so b and c (the next most recent pod time) are taken."""
    pods = [worker("a", T0 + 20), worker("b", T0 + 10), worker("c", T0 + 30), worker("d", T0)]
    pods[1]["metadata"]["ownerReferences"] = [{"kind": "Job", "name": "job-b", "uid": "job-b", "controller": True}]
    service = make_service([node_obj("n1", gpus=9)], pods, config={"queues": COHORT_9})
    assert service.fairness is not None
    workloads = WorkloadAdmissions()
    workloads.replace(
        [
            {
                "metadata": {"name": "job-b-1234", "namespace": "p1", "ownerReferences": [{"uid": "job-b"}]},
                "status": {
                    "conditions": [
                        {"type": "QuotaReserved", "status": "True", "lastTransitionTime": stamp(T0 + 100)},
                        {"type": "Admitted", "status": "True", "lastTransitionTime": stamp(T0 + 101)},
                    ]
                },
            }
        ]
    )
    service.fairness.workloads = workloads
    assert sorted(preempt_victims(service)) == ["b", "c"]
    workloads.delete({"metadata": {"name": "job-b-1234", "namespace": "p1"}})  # back to the pods' own times
    assert sorted(preempt_victims(service)) == ["a", "c"]


def test_a_new_workload_of_the_same_owner_keeps_its_time_when_the_old_one_goes() -> None:
    """Kueue may create a Job's new Workload before it deletes the old one: the owner's admission time
    is the new one's afterwards, and every change moves the version caches key on."""

    def workload(name: str, at: float) -> dict[str, Any]:
        condition = {"type": "QuotaReserved", "status": "True", "lastTransitionTime": stamp(at)}
        meta = {"name": name, "namespace": "p1", "ownerReferences": [{"uid": "job-b"}]}
        return {"metadata": meta, "status": {"conditions": [condition]}}

    pod = replace(pod_from_obj(worker("b", T0)), owner_uid="job-b")
    workloads = WorkloadAdmissions()
    versions = [workloads.version]
    workloads.upsert(workload("job-b-old", T0 + 10))
    workloads.upsert(workload("job-b-new", T0 + 20))
    versions.append(workloads.version)
    workloads.delete(workload("job-b-old", T0 + 10))
    versions.append(workloads.version)
    assert workloads.admitted_at(pod) == pytest.approx(T0 + 20)
    workloads.delete(workload("job-b-new", T0 + 20))
    assert workloads.admitted_at(pod) is None
    assert versions == sorted(set(versions)) and workloads.version > versions[-1]


def test_a_status_update_that_moves_no_admission_time_changes_nothing() -> None:
    """Kueue updates a Workload's status often: an update with the same admission time and owners keeps
    the version (the reclaimer keeps its workload index), and an update of a Job's old Workload does
    not take the owner back from its new one; a new time or owner counts."""

    def workload(name: str, at: float, owner: str = "job-b", **status: Any) -> dict[str, Any]:
        condition = {"type": "QuotaReserved", "status": "True", "lastTransitionTime": stamp(at)}
        meta = {"name": name, "namespace": "p1", "ownerReferences": [{"uid": owner}]}
        return {"metadata": meta, "status": {"conditions": [condition], **status}}

    pod = replace(pod_from_obj(worker("b", T0)), owner_uid="job-b")
    workloads = WorkloadAdmissions()
    workloads.upsert(workload("job-b-old", T0 + 10))
    workloads.upsert(workload("job-b-new", T0 + 20))
    version = workloads.version
    workloads.upsert(workload("job-b-new", T0 + 20, requeueState={"count": 1}))
    workloads.upsert(workload("job-b-old", T0 + 10, reclaimablePods=[{"name": "main", "count": 1}]))
    assert workloads.version == version
    assert workloads.admitted_at(pod) == pytest.approx(T0 + 20)  # still the new Workload's time
    workloads.upsert(workload("job-b-new", T0 + 30))
    assert workloads.version > version and workloads.admitted_at(pod) == pytest.approx(T0 + 30)
    version = workloads.version
    workloads.upsert(workload("job-b-new", T0 + 30, owner="job-c"))
    assert workloads.version > version
    assert workloads.admitted_at(replace(pod, owner_uid="job-c")) == pytest.approx(T0 + 30)


def test_changes_since_names_what_moved_and_says_when_it_no_longer_knows(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the reclaimer's index asks after each round: the owners and Workload keys whose admission
    time moved since the version it saw; None once the log has dropped changes it needs, and after a
    relist (which may change anything)."""
    monkeypatch.setattr(workloads_module, "LOG_LENGTH", 3)

    def workload(name: str, at: float, owner: str) -> dict[str, Any]:
        condition = {"type": "QuotaReserved", "status": "True", "lastTransitionTime": stamp(at)}
        return {
            "metadata": {"name": name, "namespace": "p1", "ownerReferences": [{"uid": owner}]},
            "status": {"conditions": [condition]},
        }

    admissions = WorkloadAdmissions()
    start = admissions.version
    admissions.upsert(workload("a", T0, "job-a"))
    seen = admissions.version
    admissions.upsert(workload("b", T0, "job-b"))
    admissions.upsert(workload("b", T0, "job-b"))  # no change: nothing logged
    assert admissions.changes_since(seen) == {"p1/b", "job-b"}
    assert admissions.changes_since(start) == {"p1/a", "job-a", "p1/b", "job-b"}
    assert admissions.changes_since(admissions.version) == set()
    admissions.delete(workload("a", T0, "job-a"))
    assert admissions.changes_since(seen) == {"p1/b", "job-b", "p1/a", "job-a"}
    admissions.upsert(workload("c", T0, "job-c"))  # a fourth change: the first is dropped
    assert admissions.changes_since(start) is None
    assert admissions.changes_since(seen) == {"p1/b", "job-b", "p1/a", "job-a", "p1/c", "job-c"}
    latest = admissions.version
    admissions.replace([workload("c", T0, "job-c")])
    assert admissions.changes_since(latest) is None and admissions.changes_since(admissions.version) == set()


def test_lookups_are_what_admitted_at_reads() -> None:
    pod = replace(pod_from_obj(worker("b", T0)), owner_uid="job-b")
    assert WorkloadAdmissions.lookups(pod) == (pod.uid, "job-b")
    assert WorkloadAdmissions.lookups(replace(pod, owner_uid=""), "grp") == (pod.uid, f"{pod.namespace}/grp")
