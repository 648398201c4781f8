"""Per-ClusterQueue usage accounting (fairshare/usage.py) and the /debug/queues view of it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fairshare.config import QueueConfig, parse_queue_config
from fairshare.usage import QueueUsage, queues_view

GPU = "nvidia.com/gpu"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fairshare.yaml"


def config() -> QueueConfig:
    return parse_queue_config(yaml.safe_load(EXAMPLE.read_text()))


A10, H100 = ("a10-spot", GPU), ("h100-reserved", GPU)


def test_incremental_usage_matches_recompute() -> None:
    usage = QueueUsage(config())
    usage.account("p1", "team-a", {A10: 4.0})
    usage.account("p2", "team-a", {A10: 2.0})
    usage.account("p3", "team-b", {H100: 1.0})
    usage.account("p2", "team-a", {A10: 2.0})  # the same event twice counts once
    assert usage.usage["team-a"] == {A10: 6.0}
    # Same numbers as tests/fairshare/test_example.py: 6 borrowed a10 -> 6/76 weighted, 6/20 unweighted.
    assert usage.share_of("team-a").share == pytest.approx(6000 / 76)
    assert usage.shares(weighted=False)["cq/team-a"].share == pytest.approx(300)
    usage.account("p1", None, None)  # pod deleted or terminal
    usage.account("p2", "team-a", None)
    assert usage.usage["team-a"] == {}
    assert usage.share_of("team-a").share == 0


def test_queues_view_with_usage() -> None:
    usage = QueueUsage(config())
    usage.account("p1", "team-a", {A10: 6.0})
    view = queues_view(usage.config, usage)["nodes"]["cq/team-a"]
    # 6 borrowed a10: weighted 6/76 per-mille, unweighted 6/20 (as in tests/fairshare/test_example.py).
    assert view["weightedShare"] == pytest.approx(6000 / 76) and view["unweightedShare"] == pytest.approx(300)
    assert view["dominantResource"] == GPU and view["borrowing"] is True
