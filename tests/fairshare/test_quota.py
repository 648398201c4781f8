"""Parsing the Kueue-shaped quota objects: field-path errors and the seed's Story 1 end to end."""

from __future__ import annotations

from typing import Any

import pytest

from fairshare.drs import dominant_resource_share
from fairshare.errors import QueueConfigError
from fairshare.flavor import parse_resource_flavor
from fairshare.quota import build_tree, parse_cluster_queue, parse_cohort, parse_local_queue

GPU = "nvidia.com/gpu"


def team(name: str, h100: int, a10: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "cohortName": "gpu-org",
            "preemption": {"reclaimWithinCohort": "Any"},
            "resourceGroups": [
                {
                    "coveredResources": [GPU],
                    "flavors": [
                        {"name": "h100-reserved", "resources": [{"name": GPU, "nominalQuota": h100}]},
                        {"name": "a10-spot", "resources": [{"name": GPU, "nominalQuota": a10}]},
                    ],
                }
            ],
        },
    }


def test_story1_team_a_borrowing_spot_not_penalised_for_reclaiming_h100() -> None:
    # Team-A: h100 4, a10 0; Team-B: h100 4, a10 16. Weights h100 8, a10 1.
    # Team-A borrows 8 a10: weighted 8*1/(8*8 + 16*1) = 8/80 -> 100 per-mille (unweighted 8/24 -> 333.3).
    # Admitting 4 h100 within its nominal quota adds nothing borrowed: still 100.
    flavors = [
        parse_resource_flavor({"metadata": {"name": "h100-reserved"}, "spec": {"resourceWeights": {GPU: "8"}}}, "f[0]"),
        parse_resource_flavor(
            {"metadata": {"name": "a10-spot"}, "spec": {"fairSharing": {"resourceWeights": {GPU: 1}}}}, "f[1]"
        ),
    ]
    by_name = {f.name: f for f in flavors}
    tree = build_tree(
        [parse_cluster_queue(team("team-a", 4, 0), "cq[0]"), parse_cluster_queue(team("team-b", 4, 16), "cq[1]")], []
    )
    snap = tree.tree_usage({"team-a": {("a10-spot", GPU): 8.0}})
    weights = lambda f, r: by_name[f].weight(r)  # noqa: E731
    before = dominant_resource_share(snap, "cq/team-a", weights)
    after = dominant_resource_share(snap, "cq/team-a", weights, workload={("h100-reserved", GPU): 4.0})
    assert before.share == pytest.approx(100) and after.share == pytest.approx(100)
    assert dominant_resource_share(snap, "cq/team-a").share == pytest.approx(1000 * 8 / 24)
    assert snap.available("cq/team-a", ("h100-reserved", GPU)) == 8  # its own 4 plus team-b's lendable 4


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            {
                "name": "x",
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [{"name": "f", "resources": [{"name": "cpu", "nominalQuota": -1}]}],
                    }
                ],
            },
            "cq[2].resourceGroups[0].flavors[0].resources[0].nominalQuota: must be >= 0",
        ),
        (
            {
                "name": "x",
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [
                            {"name": "f", "resources": [{"name": "cpu", "nominalQuota": 1, "borrowingLimit": 1}]}
                        ],
                    }
                ],
            },
            "cq[2].resourceGroups[0].flavors[0].resources[0].borrowingLimit: must be null without a cohort",
        ),
        (
            {
                "name": "x",
                "resourceGroups": [
                    {"coveredResources": ["cpu"], "flavors": [{"name": "f", "resources": [{"name": "gpu"}]}]}
                ],
            },
            "cq[2].resourceGroups[0].flavors[0].resources[0].name: must be one of coveredResources",
        ),
        ({"name": "x", "fairSharing": {"weight": 1e-12}}, "cq[2].fairSharing.weight: must be 0 or > 1e-9"),
        ({"name": "x", "preemption": {"reclaimWithinCohort": "Sometimes"}}, "cq[2].preemption.reclaimWithinCohort"),
        ({"spec": {}}, "cq[2].metadata.name: required"),
    ],
)
def test_cluster_queue_errors_name_the_field(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(QueueConfigError) as err:
        parse_cluster_queue(raw, "cq[2]")
    assert str(err.value).startswith(message)


def test_cohort_and_local_queue() -> None:
    c = parse_cohort(
        {"metadata": {"name": "child"}, "spec": {"parentName": "root", "fairSharing": {"weight": 2}}}, "c[0]"
    )
    assert (c.parent, c.weight) == ("root", 2.0)
    lq = parse_local_queue({"metadata": {"name": "lq", "namespace": "ns"}, "spec": {"clusterQueue": "team-a"}}, "lq[0]")
    assert (lq.namespace, lq.name, lq.cluster_queue) == ("ns", "lq", "team-a")
    with pytest.raises(QueueConfigError, match=r"lq\[1\]\.spec\.clusterQueue: required"):
        parse_local_queue({"metadata": {"name": "lq", "namespace": "ns"}, "spec": {}}, "lq[1]")
    with pytest.raises(QueueConfigError, match="parentName: cycle"):
        build_tree(
            [],
            [parse_cohort({"name": "a", "parentName": "b"}, "c"), parse_cohort({"name": "b", "parentName": "a"}, "c")],
        )
