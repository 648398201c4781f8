"""Preemption through /preempt with the shipped profile (issue 13 (3): it never fired when
NodeResourcesFit ignored nvidia.com/gpu)."""

from __future__ import annotations

from tests.e2e.conftest import Group
from tests.e2e.process import wait_for


def test_high_priority_gpu_pod_preempts_low_priority_gpu_pods(group: Group) -> None:
    node = group.node("a")
    low = [f"low{i}" for i in range(8)]
    for name in low:
        group.pod(name, gpus=1, priority_class="e2e-low")
    group.wait_bound(*low)
    preempts_before = group.cluster.extender.metric("kube_gpu_extender_results_total", verb="preempt")
    group.pod("high", gpus=8, priority_class="e2e-high")
    assert group.wait_bound("high", timeout=60) == {"high": node}
    wait_for("the victims gone", lambda: not [p for p in group.pods() if p["metadata"]["name"] in low])
    assert group.cluster.extender.metric("kube_gpu_extender_results_total", verb="preempt") > preempts_before
    assert group.gpus_per_node() == {node: 8}


def test_equal_priority_does_not_preempt(group: Group) -> None:
    group.node("a", gpus=2)
    group.pod("first", gpus=2, priority_class="e2e-low")
    group.wait_bound("first")
    group.pod("second", gpus=1, priority_class="e2e-low")
    assert "Insufficient nvidia.com/gpu" in group.wait_unschedulable("second")
    assert group.get_pod("first") is not None
