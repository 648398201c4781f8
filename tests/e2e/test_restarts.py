"""API-server and extender restarts: nothing the extender counts is lost or counted twice."""

from __future__ import annotations

from tests.e2e.conftest import GPU, Group
from tests.e2e.process import until_equal


def _extender_view(group: Group, node: str) -> tuple[int, int]:
    """(GPUs requested, pods) the extender counts on ``node``."""
    view = group.cluster.extender.get(f"/debug?node={node}").json()
    return int(view["requested"].get(GPU, 0)), int(view["pods"])


def test_extender_restart_recounts_every_bound_pod_once(group: Group) -> None:
    node = group.node("a")
    for name in ("p1", "p2", "p3"):
        group.pod(name, gpus=2)
    group.wait_bound("p1", "p2", "p3")
    assert _extender_view(group, node) == (6, 3)
    group.cluster.restart_extender()
    assert _extender_view(group, node) == (6, 3)  # relisted: not lost, not doubled
    group.pod("p4", gpus=2)
    group.pod("p5", gpus=1)
    group.wait_bound("p4")
    assert "Insufficient nvidia.com/gpu" in group.wait_unschedulable("p5")
    assert group.gpus_per_node() == {node: 8}


def test_api_server_restart_resumes_watches_without_loss(group: Group) -> None:
    node = group.node("a")
    group.pod("before", gpus=3)
    group.wait_bound("before")
    plane = group.cluster.plane
    restarts = group.cluster.extender.metric("kube_gpu_extender_watch_restarts_total")
    plane.restart_apiserver(crash=True)  # watches cut without a goodbye
    # Changes after the restart reach the extender through resumed watches. (kube-scheduler may have
    # lost its lease meanwhile; the harness restarts it as the kubelet would, hence the longer wait.)
    group.pod("after", gpus=4)
    group.wait_bound("after", timeout=90)
    until_equal("the extender's count of both pods", lambda: _extender_view(group, node), (7, 2))
    group.pod("too-many", gpus=2)
    assert "Insufficient nvidia.com/gpu" in group.wait_unschedulable("too-many")
    group.delete_pod("before")  # the freed GPUs go to the waiting pod
    assert group.wait_bound("too-many") == {"too-many": node}
    until_equal("the extender's count after the delete", lambda: _extender_view(group, node), (6, 2))
    assert group.cluster.extender.metric("kube_gpu_extender_watch_restarts_total") > restarts
    # Leave the cluster as found: kube-scheduler's node informer reconnects with backoff too, and the
    # next test's nodes must not arrive before it listens again. A pod bound to a new node proves it.
    group.node("probe", labels={"e2e-probe": "yes"})
    group.pod("probe", gpus=1, node_selector={**group.selector, "e2e-probe": "yes"})
    group.wait_bound("probe", timeout=90)
