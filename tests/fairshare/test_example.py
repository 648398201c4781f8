"""The documented Story 1 example parses and behaves as the seed's Story 1 says."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fairshare.drs import dominant_resource_share
from fairshare.flavor import parse_resource_flavor
from fairshare.quota import build_tree, parse_cluster_queue, parse_cohort, parse_local_queue

GPU = "nvidia.com/gpu"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fairshare.yaml"


def test_story1_example() -> None:
    raw = yaml.safe_load(EXAMPLE.read_text())
    flavors = {
        f.name: f
        for f in (parse_resource_flavor(r, f"resourceFlavors[{i}]") for i, r in enumerate(raw["resourceFlavors"]))
    }
    cqs = [parse_cluster_queue(r, f"clusterQueues[{i}]") for i, r in enumerate(raw["clusterQueues"])]
    cohorts = [parse_cohort(r, f"cohorts[{i}]") for i, r in enumerate(raw["cohorts"])]
    lqs = [parse_local_queue(r, f"localQueues[{i}]") for i, r in enumerate(raw["localQueues"])]
    assert (lqs[0].namespace, lqs[0].cluster_queue) == ("team-a", "team-a")
    tree = build_tree(cqs, cohorts)
    h100, a10 = ("h100-reserved", GPU), ("a10-spot", GPU)
    # team-b lends 12 of its 16 a10 (localQuota 4): cohort a10 = 12, h100 = 8.
    # team-a borrows 6 a10: weighted 6*1 / (8*8 + 12*1) = 6/76 -> 78.9; unweighted 6/20 -> 300.
    snap = tree.tree_usage({"team-a": {a10: 6.0}})

    def w(flavor: str, resource: str) -> float:
        return flavors[flavor].weight(resource)

    before = dominant_resource_share(snap, "cq/team-a", w)
    assert before.share == pytest.approx(6000 / 76)
    assert dominant_resource_share(snap, "cq/team-a").share == pytest.approx(300)
    # Reclaiming its 4 nominal h100 is within quota: no penalty.
    assert dominant_resource_share(snap, "cq/team-a", w, workload={h100: 4.0}).share == pytest.approx(6000 / 76)
    # Borrowing one team-b h100 instead costs 8 weighted units: (6 + 8) / 76.
    assert dominant_resource_share(snap, "cq/team-a", w, workload={h100: 5.0}).share == pytest.approx(14000 / 76)
