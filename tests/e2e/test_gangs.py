"""Gangs on the real control plane with kube-scheduler's own gang scheduling off (the production
default): a group binds whole or not at all, inside one rack when it asks, through the extender alone."""

from __future__ import annotations

from typing import Any

from tests.e2e.conftest import GPU, Group
from tests.e2e.podgroups import (
    COSCHEDULING,
    PODGROUPS,
    coscheduling_group,
    coscheduling_member,
    podgroup,
    podgroup_member,
)
from tests.e2e.process import wait_for

RACK = "example.com/rack"


def _create(group: Group, manifest: dict[str, Any]) -> None:
    manifest["spec"]["nodeSelector"] = group.selector
    group.api.create(f"/api/v1/namespaces/{group.name}/pods", manifest)


def _bound(group: Group, names: list[str]) -> list[str]:
    nodes = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in group.pods()}
    return [n for n in names if nodes.get(n)]


def _gang_reason(group: Group, name: str, containing: str) -> str:
    """The unschedulable message of a member, once it says ``containing`` (the first rejections of a
    group still forming say it waits for its members)."""

    def reason() -> str | None:
        pod = group.get_pod(name) or {}
        for c in (pod.get("status") or {}).get("conditions") or []:
            if c["type"] == "PodScheduled" and c["status"] == "False" and containing in c.get("message", ""):
                return str(c["message"])
        return None

    return wait_for(f"{name} unschedulable: {containing}", reason, 60)


def _no_node_over_committed(group: Group) -> None:
    assert all(used <= 8 for used in group.gpus_per_node().values()), group.gpus_per_node()


def test_two_interleaved_gangs_one_binds_whole_the_other_none_until_the_first_goes(group: Group) -> None:
    for i in range(8):
        group.node(f"n{i}")
    for name in ("job-a", "job-b"):
        group.api.create(f"{COSCHEDULING}/namespaces/{group.name}/podgroups", coscheduling_group(name, 6))
    a = [f"a{i}" for i in range(6)]
    b = [f"b{i}" for i in range(6)]
    for pa, pb in zip(a, b, strict=True):  # created interleaved
        _create(group, coscheduling_member(pa, "job-a", gpus=8))
        _create(group, coscheduling_member(pb, "job-b", gpus=8))

    def one_whole() -> tuple[list[str], list[str]] | None:
        done_a, done_b = _bound(group, a), _bound(group, b)
        if len(done_a) == 6:
            return a, b
        if len(done_b) == 6:
            return b, a
        return None

    winner, loser = wait_for("one gang bound whole", one_whole, 90)
    message = _gang_reason(group, loser[0], "6 x 8 nvidia.com/gpu")
    assert "16 nvidia.com/gpu free on the nodes the members may use" in message, message
    assert _bound(group, loser) == []  # nothing of the other group: no GPUs held by a partial gang
    assert len({group.get_pod(n)["spec"]["nodeName"] for n in winner}) == 6  # type: ignore[index]
    _no_node_over_committed(group)
    for name in winner:
        group.delete_pod(name)
    wait_for("the other gang bound whole", lambda: len(_bound(group, loser)) == 6, 90)
    _no_node_over_committed(group)


def test_a_required_rack_keeps_a_group_together_in_the_fuller_rack(group: Group) -> None:
    racks = {f"a{i}": "a" for i in range(4)} | {f"b{i}": "b" for i in range(4)}
    nodes = {suffix: group.node(suffix, labels={RACK: rack}) for suffix, rack in racks.items()}
    filler = group.pod("filler", gpus=8)  # rack a becomes the fuller one
    filler_node = group.wait_bound("filler")["filler"]
    assert filler["metadata"]["name"] == "filler"
    full_rack = next(r for s, r in racks.items() if nodes[s] == filler_node)
    other_rack = "b" if full_rack == "a" else "a"
    rack_of = {nodes[s]: r for s, r in racks.items()}

    group.api.create(f"{PODGROUPS}/namespaces/{group.name}/podgroups", podgroup("three", 3, topology=RACK))
    three = [f"t{i}" for i in range(3)]
    for name in three:
        _create(group, podgroup_member(name, "three", gpus=8))
    placed = group.wait_bound(*three, timeout=90)
    assert {rack_of[n] for n in placed.values()} == {full_rack}  # both racks fit three: the fuller one

    group.api.create(f"{PODGROUPS}/namespaces/{group.name}/podgroups", podgroup("four", 4, topology=RACK))
    four = [f"f{i}" for i in range(4)]
    for name in four:
        _create(group, podgroup_member(name, "four", gpus=8))
    placed = group.wait_bound(*four, timeout=90)
    assert {rack_of[n] for n in placed.values()} == {other_rack}  # only the emptier rack has four nodes left
    _no_node_over_committed(group)


def test_a_required_rack_too_small_everywhere_waits_with_the_reason(group: Group) -> None:
    for i in range(2):
        group.node(f"a{i}", labels={RACK: "a"})
        group.node(f"b{i}", labels={RACK: "b"})
    group.api.create(f"{PODGROUPS}/namespaces/{group.name}/podgroups", podgroup("big", 3, topology=RACK))
    for i in range(3):
        _create(group, podgroup_member(f"m{i}", "big", gpus=8))
    message = _gang_reason(group, "m0", "3 x 8 nvidia.com/gpu in one example.com/rack")
    assert "the freest example.com/rack has 16 nvidia.com/gpu free" in message, message
    assert _bound(group, ["m0", "m1", "m2"]) == []


def test_an_extender_killed_while_a_group_is_half_bound_never_over_commits(group: Group) -> None:
    nodes = {}
    for suffix, rack in (("a0", "a"), ("a1", "a"), ("b0", "b"), ("b1", "b"), ("b2", "b")):
        nodes[group.node(suffix, labels={RACK: rack})] = rack
    group.api.create(f"{PODGROUPS}/namespaces/{group.name}/podgroups", podgroup("job", 3, topology=RACK))
    for name in ("m0", "m1"):
        _create(group, podgroup_member(name, "job", gpus=8))
    gated = podgroup_member("m2", "job", gpus=8)  # exists (a member), but kube-scheduler leaves it alone
    gated["spec"]["schedulingGates"] = [{"name": "e2e.kube-gpu-extender.io/hold"}]
    _create(group, gated)
    first = group.wait_bound("m0", "m1", timeout=90)
    assert {nodes[n] for n in first.values()} == {"b"}  # only rack b has three nodes

    group.cluster.plane.procs["extender"].stop(kill=True)  # its holds die with it
    group.cluster.restart_extender()
    group.api.patch(f"/api/v1/namespaces/{group.name}/pods/m2", {"spec": {"schedulingGates": None}})
    rest = group.wait_bound("m2", timeout=90)
    assert nodes[rest["m2"]] == "b"  # the bound members fixed the rack
    assert len({*first.values(), *rest.values()}) == 3
    _no_node_over_committed(group)
    view = group.cluster.extender.get("/debug?nodes=false&decisions=0").json()["gangs"]
    (job,) = [g for g in view["groups"] if g["group"] == f"podgroup:{group.name}/job"]
    assert {m["state"] for m in job["members"]} == {"bound"}
    assert sum(group.gpus_per_node().values()) == 24 and GPU
