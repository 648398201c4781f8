"""The reclaimer's workload index (app/pipeline/reclaim_index.py) kept between rounds equals the workloads
built whole, after any sequence of pod events, assumptions, evictions, admission changes, clock steps
and reconfigurations."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.cluster.eviction import SnapshotEvictor
from app.cluster.objects import pod_from_obj
from app.cluster.workloads import WorkloadAdmissions
from app.pipeline.fairness import Fairness
from app.pipeline.reclaim_index import WorkloadIndex
from app.pipeline.reclaimer import Reclaimer
from fairshare.config import KAI_QUEUE_LABEL
from fairshare.reclaim import Workloads
from tests.app.test_admission_order import T0, stamp
from tests.app.test_reclaimer import cohort
from tests.conftest import in_queue, make_service, node_obj, pod_obj

NODES = ("n1", "n2")
PODS = 4
MIN_RUNTIME = 30.0


def kai(reclaim: dict[str, Any]) -> dict[str, Any]:
    queue = {"spec": {"resources": {"gpu": {"quota": 4}}}}
    return {"queues": {"kaiQueues": [{"metadata": {"name": q}, **queue} for q in ("qa", "qb")], "reclaim": reclaim}}


def a_pod(i: int, node: str, group: str, owner: str, admitted: int, terminating: bool, kind: str) -> dict[str, Any]:
    namespace = ("lender", "borrower")[i % 2] if kind == "kueue" else "default"
    obj = pod_obj(f"p{i}", gpus=1 + i % 2, cpu=None, memory=None, node=node, namespace=namespace, uid=f"p{i}")
    obj = in_queue(obj, "lq") if kind == "kueue" else in_queue(obj, ("qa", "qb")[i % 2], KAI_QUEUE_LABEL)
    if node:
        obj["status"]["conditions"] = [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp(T0 + admitted)}
        ]
    if group:
        obj["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] = group
    if owner:
        obj["metadata"]["ownerReferences"] = [{"uid": owner, "controller": True, "kind": "Job", "name": owner}]
    if terminating:
        obj["metadata"]["deletionTimestamp"] = stamp(T0 + 1000)
    return obj


def a_workload(name: str, namespace: str, owner: str, admitted: int | None) -> dict[str, Any]:
    conditions = []
    if admitted is not None:
        conditions = [{"type": "QuotaReserved", "status": "True", "lastTransitionTime": stamp(T0 + admitted)}]
    return {
        "metadata": {"name": name, "namespace": namespace, "ownerReferences": [{"uid": owner}] if owner else []},
        "status": {"conditions": conditions},
    }


pods = st.tuples(
    st.just("pod"),
    st.integers(0, PODS - 1),
    st.sampled_from(("", *NODES)),  # "" pending
    st.sampled_from(("", "", "g1", "g2")),
    st.sampled_from(("", "job-a", "job-b")),
    st.sampled_from((-5, 0, 9, 10, 11, 40)),  # admitted at T0 + this; the clock starts at T0 + 40
    st.booleans(),
)
operations = st.one_of(
    pods,
    pods,
    st.tuples(st.just("delete"), st.integers(0, PODS - 1)),
    st.tuples(st.just("assume"), st.integers(0, PODS - 1), st.sampled_from(NODES)),
    st.tuples(st.just("clock"), st.sampled_from((0.5, 5.0, 29.0, 30.0, 31.0))),
    st.tuples(st.just("evict"), st.integers(0, PODS - 1)),
    st.tuples(
        st.just("admit"),
        st.sampled_from(("job-a", "job-b", "p0", "p1", "p2", "g1", "g2")),
        st.sampled_from((None, 0, 9, 11, 40)),
    ),
    st.tuples(st.just("reconfigure")),
)


def same(incremental: Workloads, whole: Workloads) -> None:
    assert {w.key: w for w in incremental.all} == {w.key: w for w in whole.all}
    for node in NODES:
        assert sorted(w.key for w in incremental.on_node(node)) == sorted(w.key for w in whole.on_node(node))
        for w in whole.all:
            assert incremental.freed_on.get((w.key, node)) == whole.freed_on.get((w.key, node))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(("kueue", "kai")),
    ops=st.lists(operations, min_size=4, max_size=40),
    gone=st.sets(st.sampled_from([f"p{i}" for i in range(PODS)] + ["kueue:lender/g1", "kueue:borrower/g2"])),
    max_touched=st.sampled_from((2, 4096)),  # 2: too many pods touched between rounds, built whole
)
def test_the_index_kept_between_rounds_equals_the_whole_build(
    kind: str, ops: list[Any], gone: set[str], max_touched: int
) -> None:
    reclaim = {"mode": "dry-run", "minRuntimeSeconds": MIN_RUNTIME}
    raw = cohort(reclaim) if kind == "kueue" else kai(reclaim)
    service = make_service([node_obj(n, gpus=8) for n in NODES], [], config=raw)
    fairness = service.fairness
    assert isinstance(fairness, Fairness)
    admissions = fairness.workloads = WorkloadAdmissions()
    clock = [float(T0 + 40)]
    reclaimer = Reclaimer(fairness, SnapshotEvictor(service.cache), wall_clock=lambda: clock[0])
    reclaimer._indexes[kind] = WorkloadIndex(max_touched)
    cache = service.cache
    for op in ops:
        match op:
            case ("pod", i, node, group, owner, admitted, terminating):
                cache.upsert_pod(pod_from_obj(a_pod(i, node, group, owner, admitted, terminating, kind)))
            case ("delete", i):
                cache.delete_pod(f"p{i}")
            case ("assume", i, node):
                pod = cache.pods.get(f"p{i}")
                if pod is not None and not pod.node_name:
                    cache.assume(pod, node)
            case ("clock", step):
                clock[0] += step
            case ("evict", i):
                reclaimer.evicted ^= {f"p{i}"}
            case ("admit", name, at):
                namespace = ("lender", "borrower")[int(name[1]) % 2] if name.startswith("g") else "lender"
                owner = "" if name.startswith("g") else name
                workload = a_workload(name, namespace, owner, at)
                admissions.upsert(workload) if at is not None else admissions.delete(workload)
            case ("reconfigure",):
                fairness.reconfigure(copy.deepcopy(fairness.config))
        index = reclaimer._index(kind, gone)
        same(index, reclaimer.workloads(kind, gone))
    if max_touched > PODS:  # kept, not built again: only the first round and reconfigurations build it whole
        assert reclaimer._indexes[kind].rebuilds <= 1 + sum(op[0] == "reconfigure" for op in ops)
