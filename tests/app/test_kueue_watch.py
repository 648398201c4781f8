"""The read-only watch of Kueue's queue objects (app/cluster/kueue_watch.py), wired by build_cluster_runtime.

The HTTP tests run the real runtime against the fake API server over 127.0.0.1 (a kubeconfig pointing
at it), with the real reflectors; the objects are written the way the API server returns Kueue
v1beta2 objects: defaulted spec fields, status, managedFields, finalizers.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from app.cluster.kueue_watch import KUEUE_NOT_SERVED, KUEUE_SOURCES, KueueSource
from app.config import parse_config
from app.http.server import create_app
from app.pipeline.fairness import Fairness
from app.runtime import Runtime, build_cluster_runtime, build_snapshot_runtime
from fairshare.config import KUEUE_QUEUE_LABEL, parse_queue_config
from fairshare.quota import LocalQueue
from tests.app.apiharness import eventually
from tests.conftest import cluster_queue, node_obj, pod_obj
from tests.fakeapi import FakeAPIServer

GPU = "nvidia.com/gpu"
GIB = 1024**3
KUEUE = "kueue.x-k8s.io/v1beta2"


def _meta(name: str, namespace: str | None = None) -> dict[str, Any]:
    """Server-side metadata noise a real object carries (the fake adds uid/resourceVersion/creationTimestamp)."""
    meta: dict[str, Any] = {
        "name": name,
        "generation": 1,
        "finalizers": ["kueue.x-k8s.io/resource-in-use"],
        "annotations": {"kubectl.kubernetes.io/last-applied-configuration": '{"apiVersion":"kueue.x-k8s.io/v1beta2"}'},
        "managedFields": [
            {
                "apiVersion": KUEUE,
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {".": {}}},
                "manager": "kubectl-client-side-apply",
                "operation": "Update",
                "time": "2026-08-01T10:00:00Z",
            }
        ],
    }
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


def flavor_obj(name: str, gpu_type: str) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE,
        "kind": "ResourceFlavor",
        "metadata": _meta(name),
        "spec": {
            "nodeLabels": {"gpu-type": gpu_type},
            "nodeTaints": [
                {"key": "gpu", "value": "true", "effect": "NoSchedule", "timeAdded": "2026-08-01T10:00:00Z"}
            ],
            "tolerations": [
                {"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule", "tolerationSeconds": 30}
            ],
        },
    }


def cohort_obj(name: str, weight: str = "1") -> dict[str, Any]:
    return {
        "apiVersion": KUEUE,
        "kind": "Cohort",
        "metadata": _meta(name),
        "spec": {"fairSharing": {"weight": weight}},
        "status": {"fairSharing": {"weightedShare": 0}},
    }


def cluster_queue_obj(name: str, gpus: str, flavor: str = "a10", cohort: str = "gpus") -> dict[str, Any]:
    return {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": _meta(name),
        "spec": {
            "cohortName": cohort,
            "namespaceSelector": {},
            "queueingStrategy": "BestEffortFIFO",
            "stopPolicy": "None",
            "flavorFungibility": {"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "TryNextFlavor"},
            "preemption": {
                "borrowWithinCohort": {"policy": "Never"},
                "reclaimWithinCohort": "Any",
                "withinClusterQueue": "LowerPriority",
            },
            "fairSharing": {"weight": "1"},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory", GPU],
                    "flavors": [
                        {
                            "name": flavor,
                            "resources": [
                                {"name": "cpu", "nominalQuota": "32"},
                                {"name": "memory", "nominalQuota": "128Gi"},
                                {"name": GPU, "nominalQuota": gpus, "borrowingLimit": "4"},
                            ],
                        }
                    ],
                }
            ],
        },
        "status": {
            "conditions": [
                {
                    "type": "Active",
                    "status": "True",
                    "reason": "Ready",
                    "message": "Can admit new workloads",
                    "lastTransitionTime": "2026-08-01T10:00:00Z",
                    "observedGeneration": 1,
                }
            ],
            "flavorsReservation": [{"name": flavor, "resources": [{"name": GPU, "total": "0", "borrowed": "0"}]}],
            "flavorsUsage": [{"name": flavor, "resources": [{"name": GPU, "total": "0", "borrowed": "0"}]}],
            "pendingWorkloads": 0,
            "reservingWorkloads": 0,
            "admittedWorkloads": 0,
            "fairSharing": {"weightedShare": 0},
        },
    }


def local_queue_obj(namespace: str, name: str, cluster_queue: str) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE,
        "kind": "LocalQueue",
        "metadata": _meta(name, namespace),
        "spec": {"clusterQueue": cluster_queue, "stopPolicy": "None"},
        "status": {"conditions": [], "pendingWorkloads": 0, "reservingWorkloads": 0, "admittedWorkloads": 0},
    }


def with_gpu_quota(cq: dict[str, Any], quota: str) -> dict[str, Any]:
    out = copy.deepcopy(cq)
    out["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]["nominalQuota"] = quota
    return out


# The config file: its own lists (which the watch replaces) and a fairSharing block (which stays).
FILE_QUEUES: dict[str, Any] = {
    "watchKueue": True,
    "fairSharing": {"preemptionStrategies": ["LessThanInitialShare"]},
    "resourceFlavors": [{"metadata": {"name": "from-file"}}],
    "clusterQueues": [cluster_queue("file-queue", "from-file", 1)],
}


# ---------------------------------------------------------------------------- without HTTP


def source(objects: dict[str, list[dict[str, Any]]] | None = None) -> KueueSource:
    src = KueueSource(FILE_QUEUES, Fairness(parse_queue_config(FILE_QUEUES)))
    for section, items in (objects or {}).items():
        src.replace(section, items)
    return src


def all_lists() -> dict[str, list[dict[str, Any]]]:
    return {
        "resourceFlavors": [flavor_obj("a10", "a10")],
        "cohorts": [cohort_obj("gpus")],
        "clusterQueues": [cluster_queue_obj("team-a", "4"), cluster_queue_obj("team-b", "2")],
        "localQueues": [local_queue_obj("team-a", "training", "team-a")],
    }


def test_real_v1beta2_objects_parse_and_replace_the_file_lists() -> None:
    src = source(all_lists())
    cfg = src.usage.config
    assert src.view()["lastError"] == "" and src.applied_generation == src.generation
    assert set(cfg.flavors) == {"a10"}  # the file's from-file flavor and file-queue are gone
    assert set(cfg.tree.cluster_queues) == {"team-a", "team-b"}
    assert cfg.preemption_strategies == ("LessThanInitialShare",)  # the file's fairSharing stays
    assert cfg.watch_kueue
    a10 = cfg.flavors["a10"]
    assert dict(a10.node_labels) == {"gpu-type": "a10"} and a10.node_taints[0].key == "gpu"
    team_a = cfg.tree.cluster_queues["team-a"]
    assert (team_a.cohort, team_a.reclaim_within_cohort, team_a.within_cluster_queue) == (
        "gpus",
        "Any",
        "LowerPriority",
    )
    quotas = team_a.resource_groups[0].flavors[0].resources
    assert (quotas["memory"].nominal_quota, quotas[GPU].nominal_quota, quotas[GPU].borrowing_limit) == (
        128 * GIB,
        4.0,
        4.0,
    )
    assert dict(cfg.local_queues) == {("team-a", "training"): LocalQueue("team-a", "training", "team-a")}
    # Cohort gpus holds 4 + 2 GPUs of its two queues (by hand: no lendingLimit, so all of each is lent up).
    assert cfg.tree.nodes["cohort/gpus"].subtree_quota[("a10", GPU)] == 6.0


def test_nothing_applies_before_every_kind_was_listed() -> None:
    lists = all_lists()
    src = source({k: v for k, v in lists.items() if k != "localQueues"})
    assert src.applied_generation == 0 and set(src.usage.config.tree.cluster_queues) == {"file-queue"}
    assert src.view()["inForce"] == "file"
    assert src.view()["notListedYet"] == ["LocalQueue"] and not src.view()["synced"]
    src.replace("localQueues", [])
    assert set(src.usage.config.tree.cluster_queues) == {"team-a", "team-b"}
    assert src.view()["notListedYet"] == [] and src.view()["inForce"] == "kueue"


def test_status_and_metadata_updates_cost_no_rebuild() -> None:
    src = source(all_lists())
    generation, applies = src.generation, src.applies
    busy = cluster_queue_obj("team-a", "4")
    busy["status"]["admittedWorkloads"] = 3
    busy["metadata"]["resourceVersion"] = "999"
    busy["metadata"]["managedFields"].append({"manager": "kueue", "operation": "Update", "subresource": "status"})
    src.upsert("clusterQueues", busy)
    src.replace("cohorts", [cohort_obj("gpus")])  # a relist finding the same objects
    assert (src.generation, src.applies) == (generation, applies)
    src.upsert("clusterQueues", with_gpu_quota(busy, "5"))
    assert (src.generation, src.applies) == (generation + 1, applies + 1)


def test_errors_name_the_object_and_keep_the_last_good_config() -> None:
    src = source(all_lists())
    good = src.usage.config
    src.upsert("clusterQueues", with_gpu_quota(cluster_queue_obj("team-b", "2"), "-1"))
    assert src.usage.config is good
    # team-b is the second ClusterQueue in name order: the parser's clusterQueues[1] names it.
    assert src.last_error == (
        "ClusterQueue team-b: spec.resourceGroups[0].flavors[0].resources[2].nominalQuota: must be >= 0"
    )
    src.upsert("clusterQueues", cluster_queue_obj("team-b", "2"))
    assert src.last_error == "" and src.usage.config is not good and src.view()["failures"] == 1
    assert src.applied_generation == src.generation


def test_dangling_references_make_queues_inactive_not_the_section_invalid() -> None:
    """As Kueue does: a LocalQueue naming a missing ClusterQueue, or a ClusterQueue naming a missing
    ResourceFlavor, is inactive (its pods are rejected with the reason); every other queue keeps working."""
    src = source(all_lists())
    src.upsert("localQueues", local_queue_obj("ml", "adhoc", "ghost"))
    src.upsert("clusterQueues", cluster_queue_obj("team-c", "2", flavor="h100"))
    assert src.last_error == "" and src.applied_generation == src.generation
    config = src.usage.config
    assert set(config.tree.cluster_queues) == {"team-a", "team-b"}
    assert dict(config.inactive) == {
        "ghost": "ClusterQueue ghost does not exist",
        "team-c": "ClusterQueue team-c is inactive: ResourceFlavor h100 does not exist",
    }
    assert config.cluster_queue_for("ml", {KUEUE_QUEUE_LABEL: "adhoc"}) is None
    assert config.why_not_admitting("ml", {KUEUE_QUEUE_LABEL: "adhoc"}) == "ClusterQueue ghost does not exist"


def test_malformed_spec_is_named() -> None:
    src = source(all_lists())
    good = src.usage.config
    odd = cluster_queue_obj("team-a", "4")
    odd["spec"] = ["not", "an", "object"]
    src.upsert("clusterQueues", odd)
    assert src.usage.config is good and src.last_error == "ClusterQueue team-a: spec: must be an object"


def test_a_parser_bug_is_an_error_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    src = source(all_lists())
    good = src.usage.config

    def broken(raw: Any, strict: bool = True) -> Any:
        raise TypeError("unhashable type: 'list'")

    monkeypatch.setattr("app.cluster.kueue_watch.parse_queue_config", broken)
    src.upsert("clusterQueues", with_gpu_quota(cluster_queue_obj("team-a", "4"), "5"))
    assert src.usage.config is good and src.last_error == "unexpected TypeError: unhashable type: 'list'"


# ---------------------------------------------------------------------------- over HTTP


def kubeconfig(tmp_path: Path, url: str) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": url}}],
                "users": [{"name": "test", "user": {}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "test"}}],
                "current-context": "fake",
            }
        )
    )
    return str(path)


def cluster_runtime(fake: FakeAPIServer, tmp_path: Path, queues: dict[str, Any]) -> Runtime:
    config = parse_config({"queues": queues, "dra": {"enabled": False}})
    runtime = build_cluster_runtime(config, kubeconfig(tmp_path, fake.url))
    for reflector in runtime.reflectors:  # fast retries; the runtime's own start() would also freeze the GC
        reflector.initial_backoff, reflector.max_backoff = 0.02, 0.2
    return runtime


def run(runtime: Runtime, body: Callable[[httpx.AsyncClient], Awaitable[None]]) -> None:
    async def main() -> None:
        tasks = [asyncio.create_task(r.run()) for r in runtime.reflectors]
        transport = httpx.ASGITransport(app=create_app(runtime.service))
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://x") as http:
                await body(http)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            assert runtime.client is not None
            await runtime.client.close()

    asyncio.run(main())


def test_watch_lists_modifies_rejects_and_deletes(fake: FakeAPIServer, tmp_path: Path) -> None:
    fake.add({**node_obj("g1", gpus=8), "metadata": {"name": "g1", "labels": {"gpu-type": "a10"}}})
    pod = pod_obj("job-0", gpus=2, node="g1", namespace="team-a", phase="Running")
    pod["metadata"]["labels"] = {KUEUE_QUEUE_LABEL: "training"}
    fake.add(pod)
    fake.add(flavor_obj("a10", "a10"))
    fake.add(cohort_obj("gpus", weight="2"))
    team_a = fake.add(cluster_queue_obj("team-a", "4"))
    fake.add(cluster_queue_obj("team-b", "2"))
    fake.add(local_queue_obj("team-a", "training", "team-a"))
    runtime = cluster_runtime(fake, tmp_path, FILE_QUEUES)
    assert runtime.kueue_source is not None
    src, service = runtime.kueue_source, runtime.service

    def usage() -> Any:
        assert service.queue_usage is not None
        return service.queue_usage

    def gpu_quota(key: str) -> float:
        return float(usage().config.tree.nodes[key].subtree_quota[("a10", GPU)])

    async def body(http: httpx.AsyncClient) -> None:
        await eventually(lambda: service.not_ready_reason() == "", "the Kueue kinds and Workloads listed")
        assert (await http.get("/readyz")).status_code == 200
        cfg = usage().config
        assert set(cfg.tree.cluster_queues) == {"team-a", "team-b"} and set(cfg.flavors) == {"a10"}
        assert cfg.tree.cohorts["gpus"].weight == 2.0
        assert cfg.cluster_queue_for("team-a", {KUEUE_QUEUE_LABEL: "training"}) == "team-a"
        # The pod's requests (pod_obj: cpu 1, memory 1Gi, 2 GPUs) on an a10 node, in the ClusterQueue's units.
        assert usage().usage["team-a"] == {("a10", "cpu"): 1.0, ("a10", "memory"): float(GIB), ("a10", GPU): 2.0}
        await asyncio.to_thread(fake.wait_for_watchers, 7)  # nodes, pods, the four Kueue kinds, Workloads

        fake.update(with_gpu_quota(team_a, "6"))  # MODIFIED
        await eventually(lambda: gpu_quota("cq/team-a") == 6.0, "new nominalQuota in the tree")
        assert gpu_quota("cohort/gpus") == 8.0  # 6 + team-b's 2, by hand

        fake.update(with_gpu_quota(team_a, "-1"))  # invalid: the last good tree stays
        await eventually(lambda: src.last_error != "", "the error surfaced")
        assert src.last_error == (
            "ClusterQueue team-a: spec.resourceGroups[0].flavors[0].resources[2].nominalQuota: must be >= 0"
        )
        assert gpu_quota("cq/team-a") == 6.0 and usage().usage["team-a"][("a10", GPU)] == 2.0
        view = src.view()
        assert view["appliedGeneration"] < view["generation"] and view["objects"]["ClusterQueue"] == 2
        assert service.not_ready_reason() == ""  # a bad object is not a broken watch

        fake.update(with_gpu_quota(team_a, "5"))
        await eventually(lambda: src.last_error == "" and gpu_quota("cq/team-a") == 5.0, "valid again")

        fake.delete("LocalQueue", "training", "team-a")  # DELETED: the pod no longer maps to a ClusterQueue
        await eventually(lambda: not usage().config.local_queues, "LocalQueue removed")
        assert usage().usage.get("team-a", {}) == {}
        fake.delete("Cohort", "gpus")  # still there implicitly, with default weight: both ClusterQueues name it
        await eventually(lambda: usage().config.tree.cohorts["gpus"].weight == 1.0, "Cohort object removed")
        assert src.view()["objects"]["Cohort"] == 0 and src.last_error == ""
        shown = (await http.get("/debug/queues")).json()
        assert shown["source"]["inForce"] == "kueue" and shown["source"]["objects"]["LocalQueue"] == 0
        assert "cq/team-a" in shown["nodes"]

    run(runtime, body)


def test_kueue_not_installed_is_a_clear_readiness_reason(tmp_path: Path) -> None:
    with FakeAPIServer(kueue=False) as fake:
        fake.add(node_obj("g1"))
        runtime = cluster_runtime(fake, tmp_path, {"watchKueue": True})
        assert runtime.kueue_source is not None
        first = KUEUE_SOURCES[0]

        async def body(http: httpx.AsyncClient) -> None:
            # Nodes and pods sync; the first Kueue source's failed list then names the cause.
            await eventually(lambda: KUEUE_NOT_SERVED in runtime.service.not_ready_reason(), "Kueue list failed")
            response = await http.get("/readyz")
            assert response.status_code == 503
            reason = response.json()["reason"]
            assert reason.startswith(f"{first} not synced yet: {KUEUE_NOT_SERVED} (404 ")
            assert KUEUE_NOT_SERVED == (
                "kueue.x-k8s.io/v1beta2 not served: install Kueue CRDs or set queues.watchKueue: false"
            )
            assert runtime.kueue_source is not None and runtime.kueue_source.view()["notListedYet"]

        run(runtime, body)


def test_switch_off_or_snapshot_mode_watches_nothing(
    fake: FakeAPIServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    runtime = cluster_runtime(fake, tmp_path, {**FILE_QUEUES, "watchKueue": False})
    assert runtime.kueue_source is None
    assert not [r for r in runtime.reflectors if r.resource.name in KUEUE_SOURCES]
    asyncio.run(runtime.stop())  # closes the client; nothing was started

    snapshot = tmp_path / "cluster.yaml"
    snapshot.write_text(yaml.safe_dump({"kind": "List", "items": [node_obj("g1")]}))
    with caplog.at_level(logging.WARNING, logger="kube_gpu_extender"):
        runtime = build_snapshot_runtime(parse_config({"queues": FILE_QUEUES}), str(snapshot))
    assert runtime.kueue_source is None and not runtime.reflectors
    assert [r.message for r in caplog.records if "watchKueue" in r.message] == [
        "queues.watchKueue applies only in cluster mode; using the queues: lists of the config file"
    ]
    assert runtime.service.queue_usage is not None
    assert set(runtime.service.queue_usage.config.tree.cluster_queues) == {"file-queue"}
