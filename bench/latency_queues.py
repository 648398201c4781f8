"""``bench.latency --queues``: the cluster, configuration and pods of the queue target (50
ClusterQueues in 5 cohorts over 4 weighted flavors, FlavorFairness in the profile)."""

from __future__ import annotations

from typing import Any

from app.config import ExtenderConfiguration
from fairshare.config import KUEUE_QUEUE_LABEL

__all__ = ["QUEUES_ADDED_TARGET_MS", "label_for_queues", "queue_config", "queued"]

GPU = "nvidia.com/gpu"
# The shape. Weights are KEP-8902 fairSharing.resourceWeights of nvidia.com/gpu.
FLAVOR_LABEL = "gpu-type"
FLAVOR_WEIGHTS = {"h100": 8, "a100": 4, "l4": 2, "a10": 1}
CLUSTER_QUEUES, COHORTS = 50, 5
NOMINAL_GPUS = 40  # per queue and flavor: bound pods use 25 on average at 5,000 nodes; the rest is borrowed
QUEUE_NAMESPACES = ("ml-serve", "ml-train", "shop")  # of the bound GPU pods and the pending pods
QUEUES_ADDED_TARGET_MS = 5.0  # p99 added over a run without queues


def label_for_queues(index: int, node: dict[str, Any], pods: list[dict[str, Any]]) -> None:
    """Flavors round robin over the nodes (allocatable unchanged); bound GPU pods spread over the queues."""
    node["metadata"]["labels"][FLAVOR_LABEL] = list(FLAVOR_WEIGHTS)[index % len(FLAVOR_WEIGHTS)]
    for offset, pod in enumerate(pods):
        if any(GPU in c["resources"]["requests"] for c in pod["spec"]["containers"]):
            pod["metadata"]["labels"][KUEUE_QUEUE_LABEL] = f"lq-{(index + offset) % CLUSTER_QUEUES}"


def queue_config() -> dict[str, Any]:
    """The bundled defaults plus FlavorFairness and a ``queues:`` section (docs/concepts/queues.md)."""
    config = ExtenderConfiguration().model_dump(mode="json", exclude_none=True)
    config["plugins"].append({"name": "FlavorFairness", "weight": 1})
    flavors = [
        {
            "metadata": {"name": name},
            "spec": {"nodeLabels": {FLAVOR_LABEL: name}, "fairSharing": {"resourceWeights": {GPU: weight}}},
        }
        for name, weight in FLAVOR_WEIGHTS.items()
    ]
    quotas = [{"name": name, "resources": [{"name": GPU, "nominalQuota": NOMINAL_GPUS}]} for name in FLAVOR_WEIGHTS]
    cluster_queues = [
        {
            "metadata": {"name": f"cq-{i}"},
            "spec": {
                "cohortName": f"cohort-{i % COHORTS}",
                "resourceGroups": [{"coveredResources": [GPU], "flavors": quotas}],
            },
        }
        for i in range(CLUSTER_QUEUES)
    ]
    local_queues = [
        {"metadata": {"name": f"lq-{i}", "namespace": namespace}, "spec": {"clusterQueue": f"cq-{i}"}}
        for namespace in QUEUE_NAMESPACES
        for i in range(CLUSTER_QUEUES)
    ]
    config["queues"] = {
        "resourceFlavors": flavors,
        "cohorts": [{"metadata": {"name": f"cohort-{j}"}} for j in range(COHORTS)],
        "clusterQueues": cluster_queues,
        "localQueues": local_queues,
    }
    return config


def queued(pod: dict[str, Any]) -> dict[str, Any]:
    """The pending pod in LocalQueue lq-0 of its namespace (ClusterQueue cq-0)."""
    pod["metadata"]["labels"][KUEUE_QUEUE_LABEL] = "lq-0"
    return pod
