"""The queues: section in the service: configuration, /debug/queues, and usage fed by the cache."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from fairshare.config import KUEUE_QUEUE_LABEL

GPU = "nvidia.com/gpu"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fairshare.yaml"
A10, H100 = ("a10-spot", GPU), ("h100-reserved", GPU)


def test_extender_configuration_validates_queues_section() -> None:
    from app.config import ConfigError as AppConfigError
    from app.config import parse_config

    section = yaml.safe_load(EXAMPLE.read_text())
    cfg = parse_config({"queues": section}).queue_config()
    assert cfg is not None and set(cfg.tree.cluster_queues) == {"team-a", "team-b"}
    assert parse_config({}).queue_config() is None
    section["clusterQueues"][0]["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = -1
    with pytest.raises(AppConfigError, match=r"queues.clusterQueues\[0\].spec.resourceGroups\[0\].flavors\[0\]"):
        parse_config({"queues": section})


def test_debug_queues_endpoint(client_for: Any) -> None:
    from tests.conftest import make_service

    section = yaml.safe_load(EXAMPLE.read_text())
    client = client_for(make_service(config={"queues": section}))
    view = client.get("/debug/queues").json()
    assert view["enabled"] is True
    team_a = view["nodes"]["cq/team-a"]
    assert team_a["parent"] == "cohort/gpu-org" and team_a["weightedShare"] == 0
    a10 = next(r for r in team_a["resources"] if r["flavor"] == "a10-spot")
    # Hand-derived: team-b lends 12 a10; team-a's borrowingLimit 16 caps nothing -> potentialAvailable 12.
    assert (a10["subtreeQuota"], a10["potentialAvailable"], a10["weight"]) == (0, 12, 1)
    h100 = next(r for r in view["nodes"]["cohort/gpu-org"]["resources"] if r["flavor"] == "h100-reserved")
    assert (h100["subtreeQuota"], h100["weight"]) == (8, 8)
    assert client_for(make_service()).get("/debug/queues").json() == {"enabled": False}


def test_cache_feeds_queue_usage_incrementally(client_for: Any) -> None:
    from app.cluster.objects import pod_from_obj
    from tests.conftest import in_queue, labelled, make_service, pod_obj

    def queued(pod: dict[str, Any]) -> dict[str, Any]:
        return in_queue(pod, "training")

    nodes = [labelled("spot-1", {"gpu-type": "a10", "lifecycle": "spot"}), labelled("h100-1", {"gpu-type": "h100"})]
    pods = [
        queued(pod_obj("a1", gpus=4, node="spot-1", namespace="team-a", uid="a1", phase="Running")),
        queued(pod_obj("a2", gpus=2, node="spot-1", namespace="team-a", uid="a2", phase="Running")),
        pod_obj("no-queue", gpus=2, node="spot-1", namespace="team-a", uid="nq", phase="Running"),
    ]
    service = make_service(nodes, pods, config={"queues": yaml.safe_load(EXAMPLE.read_text())})
    usage = service.queue_usage
    assert usage is not None
    # 6 a10 GPUs in team-a (the unlabelled pod is not subject to quota): 6/76 weighted as before.
    assert usage.usage["team-a"][A10] == 6.0
    assert usage.share_of("team-a").share == pytest.approx(6000 / 76)
    # An event: a2 finishes -> 4 borrowed -> 4/76.
    service.cache.upsert_pod(
        pod_from_obj(queued(pod_obj("a2", gpus=2, node="spot-1", namespace="team-a", uid="a2", phase="Succeeded")))
    )
    assert usage.usage["team-a"][A10] == 4.0
    # A pod on the h100 node within nominal quota adds usage but no borrowing: the share is unchanged.
    service.cache.upsert_pod(
        pod_from_obj(queued(pod_obj("a3", gpus=4, node="h100-1", namespace="team-a", uid="a3", phase="Running")))
    )
    assert usage.usage["team-a"][H100] == 4.0
    assert usage.share_of("team-a").share == pytest.approx(4000 / 76)
    service.cache.delete_pod("a1")
    assert A10 not in usage.usage["team-a"]
    view = client_for(service).get("/debug/queues").json()["nodes"]["cq/team-a"]
    h100 = next(r for r in view["resources"] if r["flavor"] == "h100-reserved")
    assert (h100["usage"], h100["borrowed"]) == (4, 0)


def test_story1_filter_end_to_end(client_for: Any) -> None:
    """Story 1 through /filter and /bind. Hand-derived from examples/fairshare.yaml: team-a may use 8
    h100 (its 4 + team-b's 4) and 12 a10 (team-b lends 12 of 16); quota and flavor rejections carry reasons."""
    from tests.conftest import bind_body, filter_body, in_queue, labelled, make_service, pod_obj

    def queued(pod: dict[str, Any]) -> dict[str, Any]:
        return in_queue(pod, "training")

    nodes = [
        labelled("spot-1", {"gpu-type": "a10", "lifecycle": "spot"}),
        labelled("h100-1", {"gpu-type": "h100"}, gpus=32),  # room on the node; quota is the limit
        labelled("t4-1", {"gpu-type": "t4"}),
    ]
    # team-b already borrows all 4 of team-a's h100 (8 in use).
    running = [pod_obj("b1", gpus=8, node="h100-1", namespace="team-b", uid="b1", phase="Running")]
    running[0]["metadata"]["labels"] = {KUEUE_QUEUE_LABEL: "lq-b"}
    section = yaml.safe_load(EXAMPLE.read_text())
    section["localQueues"].append(
        {"metadata": {"name": "lq-b", "namespace": "team-b"}, "spec": {"clusterQueue": "team-b"}}
    )
    service = make_service(nodes, running, config={"queues": section})
    client = client_for(service)
    names = ["spot-1", "h100-1", "t4-1"]

    # 4 GPUs: spot fits (borrowing); h100 is taken by team-b -> resolvable (reclaim by preemption);
    # t4 is no flavor of team-a -> unresolvable.
    pod = queued(pod_obj("a1", gpus=4, namespace="team-a", uid="a1"))
    result = client.post("/filter", content=filter_body(pod, names)).json()
    assert result["NodeNames"] == ["spot-1"]
    assert "insufficient quota" in result["FailedNodes"]["h100-1"]
    assert "not allowed" in result["FailedAndUnresolvableNodes"]["t4-1"]
    # 9 h100 exceed what team-a could ever use there (its 4 + team-b's 4) -> unresolvable, though the node has room.
    big = queued(pod_obj("a-big", gpus=9, namespace="team-a", uid="a-big"))
    result = client.post("/filter", content=filter_body(big, names)).json()
    assert "ExceedsMaxQuota" in result["FailedAndUnresolvableNodes"]["h100-1"]
    # Binding makes the usage real at once: 4 borrowed a10 -> 4/76 weighted.
    assert client.post("/bind", content=bind_body(pod, "spot-1")).json().get("Error", "") == ""
    assert service.queue_usage is not None and service.queue_usage.usage["team-a"][A10] == 4.0
    # Story 1: team-b's pod finishes; team-a reclaims 4 h100 within nominal quota: allowed, share unchanged.
    from app.cluster.objects import pod_from_obj

    done = pod_obj("b1", gpus=8, node="h100-1", namespace="team-b", uid="b1", phase="Succeeded")
    done["metadata"]["labels"] = {KUEUE_QUEUE_LABEL: "lq-b"}
    service.cache.upsert_pod(pod_from_obj(done))
    before = service.queue_usage.share_of("team-a").share
    h = queued(pod_obj("a2", gpus=4, namespace="team-a", uid="a2"))
    assert "h100-1" in client.post("/filter", content=filter_body(h, names)).json()["NodeNames"]
    client.post("/bind", content=bind_body(h, "h100-1"))
    assert service.queue_usage.share_of("team-a").share == pytest.approx(before) == pytest.approx(4000 / 76)
    # Pods without a queue are not subject to quota.
    free = pod_obj("free", gpus=4, namespace="team-a", uid="free")
    assert "t4-1" in client.post("/filter", content=filter_body(free, names)).json()["NodeNames"]
