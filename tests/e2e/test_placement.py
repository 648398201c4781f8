"""Placement, capacity, reasons and reuse through a real kube-scheduler with the shipped profile."""

from __future__ import annotations

import re
from pathlib import Path

from tests.e2e.api import pod_manifest
from tests.e2e.conftest import GPU, Cluster, Group
from tests.e2e.controlplane import extender_config, scheduler_env


def test_one_gpu_pods_pack_onto_one_node(group: Group) -> None:
    """Issue 13 (4): the node kube-scheduler picks is the one the extender ranks best. With the old
    settings (weight 1, 0..10 per node, in-tree LeastAllocated/BalancedAllocation scoring) the in-tree
    scores spread these pods over both nodes."""
    for suffix in ("a", "b"):
        group.node(suffix)
    group.node("cpu", gpus=None)
    names = [f"p{i}" for i in range(8)]
    for name in names:
        group.pod(name, gpus=1)
    placed = group.wait_bound(*names)
    assert len(set(placed.values())) == 1, placed  # one node full, the other kept whole for an 8-GPU pod
    group.pod("whole", gpus=8)
    (node,) = group.wait_bound("whole").values()
    assert node != next(iter(placed.values()))


def test_capacity_is_never_exceeded_and_over_demand_says_why(group: Group) -> None:
    group.node("a", gpus=4)
    group.node("b", gpus=4)
    group.node("cpu", gpus=None)
    names = [f"p{i}" for i in range(10)]
    for name in names:
        group.pod(name, gpus=1)
    bound = group.wait_some_bound(names, 8)
    for name in set(names) - set(bound):
        message = group.wait_unschedulable(name)
        assert "Insufficient nvidia.com/gpu" in message, message
    assert sorted(group.gpus_per_node().values()) == [0, 4, 4]


def test_freed_capacity_is_reused(group: Group) -> None:
    group.node("a", gpus=2)
    names = ("p1", "p2", "p3")
    for name in names:
        group.pod(name, gpus=1)
    bound = group.wait_some_bound(names, 2)
    (held,) = set(names) - set(bound)
    group.wait_unschedulable(held)
    group.delete_pod(bound[0])
    assert group.wait_bound(held) == {held: f"{group.name}-a"}


def test_cpu_pods_keep_off_gpu_nodes(group: Group) -> None:
    group.node("gpu")
    cpu = group.node("cpu", gpus=None)
    for name in ("c1", "c2", "c3"):
        group.pod(name)
    assert set(group.wait_bound("c1", "c2", "c3").values()) == {cpu}


def test_the_effective_profile_lets_the_extender_decide(cluster: Cluster) -> None:
    """One extender priority step (10 x weight) outweighs every in-tree score plugin kube-scheduler
    really runs in the shipped profile (read from the configuration it writes)."""
    effective = cluster.plane.effective_scheduler_config()
    (profile,) = effective["profiles"]
    plugins = profile["plugins"]
    disabled = {p["name"] for p in plugins["score"].get("disabled") or []}
    scoring = {p["name"]: p["weight"] or 1 for p in plugins["multiPoint"]["enabled"] if p["name"] not in disabled}
    scoring.update({p["name"]: p["weight"] or 1 for p in plugins["score"].get("enabled") or []})
    known_scorers = {
        "TaintToleration",
        "NodeAffinity",
        "NodeResourcesFit",
        "PodTopologySpread",
        "InterPodAffinity",
        "NodeResourcesBalancedAllocation",
        "ImageLocality",
        "VolumeBinding",
    }
    in_tree = sum(w for name, w in scoring.items() if name in known_scorers) * 100
    assert "NodeResourcesBalancedAllocation" in disabled
    assert "NodeResourcesFit" in scoring  # scoring MostAllocated: it breaks the extender's ties only
    (extender,) = effective["extenders"]
    assert extender["weight"] * 10 > in_tree, (extender["weight"], scoring)
    fit = next((c["args"] for c in profile["pluginConfig"] if c["name"] == "NodeResourcesFit"), {})
    assert GPU not in (fit.get("ignoredResources") or [])
    assert fit["scoringStrategy"]["type"] == "MostAllocated"
    assert [r["name"] for r in fit["scoringStrategy"]["resources"]] == [GPU]  # GPUs only: cpu stays free


def test_kube_scheduler_runs_with_the_shipped_go_runtime_settings(group: Group) -> None:
    """deploy/deployment.yaml's GOGC and GOMEMLIMIT reach the real kube-scheduler, which starts with
    them (Go refuses to start on an invalid value) and schedules."""
    environ = Path(f"/proc/{group.cluster.plane.procs['kube-scheduler'].pid}/environ").read_bytes()
    settings = dict(item.split(b"=", 1) for item in environ.split(b"\0") if b"=" in item)
    shipped = scheduler_env()
    assert set(shipped) == {"GOGC", "GOMEMLIMIT"}
    assert {name: settings.get(name.encode()) for name in shipped} == {n: v.encode() for n, v in shipped.items()}
    group.node("a")
    group.pod("p", gpus=1)
    assert group.wait_bound("p") == {"p": f"{group.name}-a"}


def test_with_every_passing_node_returned_kube_scheduler_takes_the_extenders_best(group: Group) -> None:
    """``filterReturns: Feasible``: /filter lets both nodes through, so kube-scheduler reads the scores
    /prioritize answers (10 for one node; the other's 0 is left out of the answer, which kube-scheduler
    counts as 0, so this also checks that it reads a missing host so). Its own MostAllocated on GPUs would
    take the L4 node, which already runs a GPU pod; the extender (GpuModelBalance: keep the models
    equally free) ranks the idle A100 node first, and kube-scheduler follows it."""
    config = extender_config()
    config["filterReturns"] = "Feasible"
    group.cluster.restart_extender(config)
    model = "nvidia.com/gpu.product"
    try:
        a100 = group.node("a100", labels={model: "A100", "e2e-slot": "a100"})
        l4 = group.node("l4", labels={model: "L4", "e2e-slot": "l4"})
        group.pod("hog", gpus=2, node_selector={**group.selector, "e2e-slot": "l4"})
        assert group.wait_bound("hog") == {"hog": l4}
        group.pod("next", gpus=1)
        assert group.wait_bound("next") == {"next": a100}
        metrics = group.cluster.extender.get("/metrics").text
        calls = re.search(
            r'^kube_gpu_extender_request_duration_seconds_count\{verb="prioritize"\} (\S+)$', metrics, re.M
        )
        assert calls is not None and float(calls[1]) >= 1, "kube-scheduler never called /prioritize"
    finally:
        group.cluster.restart_extender()


def _verbs(group: Group, pod: str) -> list[str]:
    """The verbs the extender answered for one pod of the group, in order (from /debug's decisions)."""
    decisions = group.cluster.extender.get("/debug?nodes=false&decisions=50").json()["decisions"]
    return [d["verb"] for d in decisions if d["pod"] == f"{group.name}/{pod}"]


def test_a_tie_costs_one_round_trip_unless_the_pod_has_soft_preferences(group: Group) -> None:
    """Three empty CPU-only nodes score the same for a small CPU pod. The shipped tieBreak.random passes
    one of them, and kube-scheduler binds the pod there without scoring or calling /prioritize. A pod
    with a preferred anti-affinity to it keeps the tie: every tied node passes, kube-scheduler asks
    /prioritize and its own InterPodAffinity score sends the pod away from the first one."""
    for suffix in ("a", "b", "c"):  # the hostname label kubelet would set: the anti-affinity's topology
        group.node(suffix, gpus=None, labels={"kubernetes.io/hostname": f"{group.name}-{suffix}"})
    group.pod("tied", labels={"app": "spread"})
    (first_node,) = group.wait_bound("tied").values()
    assert _verbs(group, "tied") == ["filter", "bind"]
    manifest = pod_manifest("prefers", node_selector=group.selector, labels={"app": "spread"})
    term = {"labelSelector": {"matchLabels": {"app": "spread"}}, "topologyKey": "kubernetes.io/hostname"}
    preferred = [{"weight": 100, "podAffinityTerm": term}]
    manifest["spec"]["affinity"] = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": preferred}}
    group.api.create(f"/api/v1/namespaces/{group.name}/pods", manifest)
    (node,) = group.wait_bound("prefers").values()
    assert _verbs(group, "prefers") == ["filter", "prioritize", "bind"]
    assert node != first_node
