"""Queues (Kueue-style ClusterQueue over a ResourceFlavor) enforced through a real kube-scheduler."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import cluster_queue
from tests.e2e.conftest import GROUP_LABEL, Group
from tests.e2e.controlplane import extender_config

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


@pytest.fixture
def queued(group: Group) -> Iterator[Group]:
    """The extender restarted with the shipped config plus one ClusterQueue (2 GPUs) on this group's nodes."""
    config = extender_config()
    config["plugins"].append({"name": "FlavorFairness", "weight": 1})
    config["queues"] = {
        "resourceFlavors": [{"metadata": {"name": "e2e-gpus"}, "spec": {"nodeLabels": {GROUP_LABEL: group.name}}}],
        "clusterQueues": [cluster_queue("team", "e2e-gpus", 2)],
        "localQueues": [{"metadata": {"name": "work", "namespace": group.name}, "spec": {"clusterQueue": "team"}}],
    }
    group.cluster.restart_extender(config)
    try:
        yield group
    finally:
        group.cluster.restart_extender()


def test_cluster_queue_quota_holds_pods_until_usage_frees(queued: Group) -> None:
    queued.node("a")
    labels = {QUEUE_LABEL: "work"}
    names = ("q1", "q2", "q3")
    for name in names:
        queued.pod(name, gpus=1, labels=labels)
    # Which two get the quota depends on the order kube-scheduler's binds arrive in, not on creation.
    bound = queued.wait_some_bound(names, 2)
    (held,) = set(names) - set(bound)
    message = queued.wait_unschedulable(held)
    assert "quota" in message.lower(), message
    assert sum(queued.gpus_per_node().values()) == 2  # the node has 8 free: only the queue holds it back
    queues = queued.cluster.extender.get("/debug/queues").json()
    assert queues["nodes"]["cq/team"]["resources"][0]["usage"] == 2.0
    # Unqueued pods are not limited.
    queued.pod("free", gpus=4)
    queued.wait_bound("free")
    queued.delete_pod(bound[0])
    queued.wait_bound(held)


def test_a_label_naming_a_missing_local_queue_is_rejected(queued: Group) -> None:
    queued.node("a")
    queued.pod("lost", gpus=1, labels={QUEUE_LABEL: "no-such-queue"})
    assert "no-such-queue" in queued.wait_unschedulable("lost")
