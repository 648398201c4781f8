"""A pod the extender held is retried when capacity frees where kube-scheduler cannot see it.

Kueue's queue objects are watched by the extender only (``queues.watchKueue``): raising a
ClusterQueue's quota is no event for kube-scheduler, which would leave the held pod in its
unschedulable pool until the 5-minute flush. The extender's requeuer writes its condition into the
pod's status instead, and kube-scheduler retries the pod at once. The CRDs here are minimal
(schemaless) stand-ins for Kueue's; no Kueue controller runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from app.cluster.requeue import CONDITION_TYPE
from tests.e2e.conftest import GPU, Group
from tests.e2e.controlplane import extender_config
from tests.e2e.kueue import KUEUE

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def _cluster_queue(name: str, flavor: str, gpus: int) -> dict[str, Any]:
    resources = [{"name": GPU, "nominalQuota": gpus}]
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "resourceGroups": [{"coveredResources": [GPU], "flavors": [{"name": flavor, "resources": resources}]}]
        },
    }


@pytest.fixture
def watched(group: Group, kueue_crds: None) -> Iterator[Group]:
    """Kueue objects for this group (a flavor on its nodes, a 1-GPU ClusterQueue, LocalQueue "work"),
    and the extender restarted with the shipped config watching them."""
    api, name = group.api, group.name
    flavor = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": name}}
    api.create(f"{KUEUE}/resourceflavors", {**flavor, "spec": {"nodeLabels": group.selector}})
    api.create(f"{KUEUE}/clusterqueues", _cluster_queue(name, name, 1))
    local = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "work"}}
    api.create(f"{KUEUE}/namespaces/{name}/localqueues", {**local, "spec": {"clusterQueue": name}})
    config = extender_config()
    config["plugins"].append({"name": "FlavorFairness", "weight": 1})
    config["queues"] = {"watchKueue": True}
    group.cluster.restart_extender(config)
    try:
        yield group
    finally:
        group.cluster.restart_extender()
        api.delete(f"{KUEUE}/clusterqueues/{name}", grace=None)
        api.delete(f"{KUEUE}/resourceflavors/{name}", grace=None)


def test_raising_a_watched_quota_gets_the_held_pod_retried_and_bound(watched: Group) -> None:
    watched.node("a")
    labels = {QUEUE_LABEL: "work"}
    watched.pod("first", gpus=1, labels=labels)
    watched.wait_bound("first")
    watched.pod("held", gpus=1, labels=labels)
    assert "quota" in watched.wait_unschedulable("held").lower()
    # Only the extender sees this: kube-scheduler does not watch Kueue's objects.
    raised = _cluster_queue(watched.name, watched.name, 2)
    watched.api.patch(f"{KUEUE}/clusterqueues/{watched.name}", {"spec": raised["spec"]})
    watched.wait_bound("held", timeout=30.0)  # without the requeuer: kube-scheduler's 5-minute flush
    pod = watched.get_pod("held") or {}
    conditions = {c["type"]: c for c in (pod.get("status") or {}).get("conditions") or []}
    assert conditions[CONDITION_TYPE]["status"] == "True", conditions
    assert conditions["PodScheduled"]["status"] == "True", conditions  # merged by type: kube-scheduler's stays
    requests = [
        d
        for d in watched.cluster.extender.get("/debug").json()["decisions"]
        if d["verb"] == "requeue" and d["pod"] == f"{watched.name}/held"
    ]
    assert requests and requests[0]["outcome"] == "requested", requests
