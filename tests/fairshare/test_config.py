"""The queues: section as typed objects (fairshare/config.py) and which flavor a node gives a pod."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fairshare.assignment import assign_flavors
from fairshare.config import KUEUE_QUEUE_LABEL, QueueConfig, parse_queue_config
from fairshare.errors import QueueConfigError

GPU = "nvidia.com/gpu"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fairshare.yaml"


def config() -> QueueConfig:
    return parse_queue_config(yaml.safe_load(EXAMPLE.read_text()))


def flavor_of(cfg: QueueConfig, node_labels: dict[str, str]) -> str | None:
    """The flavor team-a's GPUs take on a node with these labels (pod flavor rules left out)."""
    return assign_flavors(cfg, "team-a", (GPU,), node_labels, None).flavors.get(GPU)


def test_queue_and_flavor_resolution() -> None:
    cfg = config()
    assert cfg.cluster_queue_for("team-a", {KUEUE_QUEUE_LABEL: "training"}) == "team-a"
    assert cfg.cluster_queue_for("team-b", {KUEUE_QUEUE_LABEL: "training"}) is None  # LocalQueues are namespaced
    assert cfg.cluster_queue_for("team-a", {}) is None
    assert flavor_of(cfg, {"gpu-type": "a10", "lifecycle": "spot"}) == "a10-spot"
    assert flavor_of(cfg, {"gpu-type": "h100"}) == "h100-reserved"
    assert flavor_of(cfg, {"gpu-type": "t4"}) is None


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"fairSharing": {"preemptionStrategies": ["Nope"]}}, "queues.fairSharing.preemptionStrategies"),
        ({"fairSharing": {"priorityBasedFairShare": "yes"}}, "queues.fairSharing.priorityBasedFairShare"),
        (
            {"localQueues": [{"metadata": {"name": "x", "namespace": "n"}, "spec": {"clusterQueue": "ghost"}}]},
            r"queues.localQueues\[0\].spec.clusterQueue: unknown ClusterQueue ghost",
        ),
        ({"resourceFlavors": []}, r"queues.clusterQueues\[0\].spec.resourceGroups\[0\].flavors\[0\].name: unknown"),
    ],
)
def test_errors_name_the_field(patch: dict[str, object], message: str) -> None:
    raw = yaml.safe_load(EXAMPLE.read_text()) | patch
    with pytest.raises(QueueConfigError, match=message):
        parse_queue_config(raw)
