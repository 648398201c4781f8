"""Gangs through the extender alone: a group is planned when its first member reaches /filter, its
room held, each member given its planned node; or every member rejected with the reason, nothing held."""

from __future__ import annotations

from typing import Any

import pytest

from app.cluster.objects import pod_from_obj
from app.cluster.podgroups import coscheduling_from_obj, podgroup_from_obj
from app.pipeline.claims import DraClaims
from app.service import ExtenderService
from scoring.framework import Status
from tests.conftest import (
    bind_pod,
    claim_obj,
    cluster_queue,
    device_class_obj,
    filter_answer,
    filter_body,
    gpu_device,
    in_queue,
    make_service,
    node_obj,
    pod_obj,
    slice_obj,
    with_claims,
)

GPU = "nvidia.com/gpu"
RACK = "example.com/rack"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def podgroup(name: str, min_count: int, *, topology: str = "", namespace: str = "default") -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    if topology:
        spec["schedulingConstraints"] = {"topology": [{"key": topology}]}
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def member(group: str, index: int, gpus: int = 8, **kwargs: Any) -> dict[str, Any]:
    pod = pod_obj(f"{group}-{index}", gpus=gpus, uid=f"{group}-{index}", **kwargs)
    pod["spec"]["schedulingGroup"] = {"podGroupName": group}
    return pod


def racked(name: str, rack: str, gpus: int = 8) -> dict[str, Any]:
    node = node_obj(name, gpus=gpus)
    node["metadata"]["labels"] = {RACK: rack, "kubernetes.io/hostname": name}
    return node


def service_with(
    nodes: list[dict[str, Any]], groups: list[dict[str, Any]], pods: list[dict[str, Any]], **kw: Any
) -> ExtenderService:
    service = make_service(nodes, pods, **kw)
    for group in groups:
        service.cache.groups.upsert(podgroup_from_obj(group))
    return service


def passed(service: ExtenderService, pod: dict[str, Any], names: list[str]) -> list[str]:
    answer = filter_answer(service, filter_body(pod, names))
    assert answer["Error"] == "", answer
    return list(answer["NodeNames"] or [])


def reasons(service: ExtenderService, pod: dict[str, Any], names: list[str]) -> set[str]:
    answer = filter_answer(service, filter_body(pod, names))
    return set((answer["FailedNodes"] or {}).values()) | set((answer["FailedAndUnresolvableNodes"] or {}).values())


EIGHT = [f"n{i}" for i in range(8)]


def test_two_competing_groups_never_both_end_up_partly_placed() -> None:
    nodes = [node_obj(name, cpu="64", memory="512Gi") for name in EIGHT]
    a = [member("a", i) for i in range(6)]
    b = [member("b", i) for i in range(6)]
    service = service_with(nodes, [podgroup("a", 6), podgroup("b", 6)], [*a, *b])
    given: dict[str, str] = {}
    for pa, pb in zip(a, b, strict=True):  # interleaved, as kube-scheduler's queue may pop them
        (node,) = passed(service, pa, EIGHT)
        given[pa["metadata"]["name"]] = node
        assert passed(service, pb, EIGHT) == []
    assert len(set(given.values())) == 6  # one whole node per member, none twice
    assert reasons(service, b[0], EIGHT) == {  # a's six nodes are full (held), the two others too few
        "Insufficient nvidia.com/gpu",
        "gang default/b: 6 x 8 nvidia.com/gpu; 16 nvidia.com/gpu free on the nodes the members may use",
    }
    # Group a holds its room before any member binds: 48 GPUs counted on six nodes.
    assert sum(service.cache.usage(n).requested.get(GPU, 0) for n in EIGHT) == 48
    for pod in a:
        assert bind_pod(service, pod, given[pod["metadata"]["name"]]) == {"Error": ""}
    assert all(g["plan"] is None for g in service.gangs_view()["groups"])  # complete: nothing held any more
    # Delete group a: group b is planned whole.
    for pod in a:
        service.cache.delete_pod(pod["metadata"]["uid"])
    placed = {pb["metadata"]["name"]: passed(service, pb, EIGHT) for pb in b}
    assert all(len(nodes_) == 1 for nodes_ in placed.values())
    assert len({nodes_[0] for nodes_ in placed.values()}) == 6


def test_members_that_do_not_exist_yet_wait_without_holding_anything() -> None:
    pods = [member("a", i) for i in range(3)]
    service = service_with([node_obj(n) for n in EIGHT], [podgroup("a", 4)], pods)
    assert reasons(service, pods[0], EIGHT) == {"gang default/a: 3 of 4 members exist; waiting for the rest"}
    assert sum(service.cache.usage(n).requested.get(GPU, 0) for n in EIGHT) == 0
    (waiting,) = service.gangs_view()["groups"]
    assert (waiting["plan"], waiting["reason"]) == (None, "gang default/a: 3 of 4 members exist; waiting for the rest")
    assert {m["state"] for m in waiting["members"]} == {"pending"}
    fourth = member("a", 3)
    service.cache.upsert_pod(pod_from_obj(fourth))
    assert len(passed(service, pods[0], EIGHT)) == 1


def test_the_view_lists_podgroups_without_pods_and_the_state_of_each_group() -> None:
    gang = [member("a", i) for i in range(2)]
    service = service_with([node_obj(n) for n in EIGHT[:2]], [podgroup("a", 2), podgroup("empty", 3)], gang)
    states = {g["group"]: (g["state"], len(g["members"])) for g in service.gangs_view()["groups"]}
    assert states == {"podgroup:default/a": ("new", 2), "podgroup:default/empty": ("new", 0)}
    passed(service, gang[0], EIGHT[:2])
    service.cache.delete_pod("a-1")  # the group shrinks: released
    (a,) = [g for g in service.gangs_view()["groups"] if g["group"] == "podgroup:default/a"]
    assert (a["state"], a["plan"]) == ("released", None)
    assert a["reason"].startswith("gang default/a: holds released")
    ledger = service.cache.ledger
    assert not ledger  # and nothing held


def test_a_missing_podgroup_makes_the_members_wait() -> None:
    pod = member("ghost", 0)
    service = service_with([node_obj("n0")], [], [pod])
    assert reasons(service, pod, ["n0"]) == {
        "gang default/ghost: PodGroup default/ghost (scheduling.k8s.io/v1alpha2) does not exist (yet)"
    }


def test_a_basic_podgroup_is_no_gang() -> None:
    pod = member("basic", 0)
    group = podgroup("basic", 1)
    group["spec"]["schedulingPolicy"] = {"basic": {}}
    service = service_with([node_obj("n0"), node_obj("n1")], [group], [pod])
    assert passed(service, pod, ["n0", "n1"]) == ["n0", "n1"]


def test_required_rack_keeps_the_group_in_the_fuller_rack() -> None:
    nodes = [racked(f"a{i}", "a") for i in range(4)] + [racked(f"b{i}", "b") for i in range(4)]
    names = [n["metadata"]["name"] for n in nodes]
    busy = pod_obj("busy", gpus=8, node="a0", phase="Running")
    gang = [member("job", i) for i in range(3)]
    service = service_with(nodes, [podgroup("job", 3, topology=RACK)], [busy, *gang])
    chosen = {passed(service, pod, names)[0] for pod in gang}
    assert chosen == {"a1", "a2", "a3"}  # rack a has 24 GPUs free, b 32: both fit, a is the fuller


def test_a_required_rack_too_small_everywhere_is_a_reason_in_numbers() -> None:
    nodes = [racked(f"a{i}", "a") for i in range(4)] + [racked(f"b{i}", "b") for i in range(4)]
    names = [n["metadata"]["name"] for n in nodes]
    gang = [member("job", i) for i in range(5)]
    service = service_with(nodes, [podgroup("job", 5, topology=RACK)], gang)
    assert reasons(service, gang[0], names) == {
        "gang default/job: 5 x 8 nvidia.com/gpu in one example.com/rack; "
        "the freest example.com/rack has 32 nvidia.com/gpu free"
    }


def test_members_rejected_while_waiting_are_retried_once_the_group_is_whole_but_does_not_fit() -> None:
    """The first member waits for the rest; when the last arrives and the group does not fit, the
    requeuer is woken (cache.freed) so kube-scheduler retries the first one and shows the new reason."""
    nodes = [racked(f"a{i}", "a") for i in range(2)] + [racked(f"b{i}", "b") for i in range(2)]
    names = [n["metadata"]["name"] for n in nodes]
    gang = [member("big", i) for i in range(3)]
    service = service_with(nodes, [podgroup("big", 3, topology=RACK)], gang[:1])
    assert reasons(service, gang[0], names) == {"gang default/big: 1 of 3 members exist; waiting for the rest"}
    before = service.cache.freed.version
    assert reasons(service, gang[0], names) == {"gang default/big: 1 of 3 members exist; waiting for the rest"}
    assert service.cache.freed.version == before  # still waiting: nothing to retry
    for pod in gang[1:]:
        service.cache.upsert_pod(pod_from_obj(pod))
    too_small = "gang default/big: 3 x 8 nvidia.com/gpu in one example.com/rack; the freest example.com/rack has 16"
    assert all(r.startswith(too_small) for r in reasons(service, gang[1], names))
    after = service.cache.freed.version
    assert after != before
    reasons(service, gang[2], names)
    assert service.cache.freed.version == after  # once, not on every rejection


def test_kueue_topology_annotations_and_pod_group_size() -> None:
    nodes = [racked(f"a{i}", "a") for i in range(2)] + [racked(f"b{i}", "b") for i in range(3)]
    names = [n["metadata"]["name"] for n in nodes]
    gang = []
    for i in range(3):
        pod = pod_obj(f"w{i}", gpus=8, uid=f"w{i}")
        pod["metadata"]["labels"] = {"kueue.x-k8s.io/pod-group-name": "train"}
        pod["metadata"]["annotations"] = {
            "kueue.x-k8s.io/pod-group-total-count": "3",
            "kueue.x-k8s.io/podset-required-topology": RACK,
        }
        gang.append(pod)
    service = service_with(nodes, [], gang)
    assert {passed(service, pod, names)[0] for pod in gang} == {"b0", "b1", "b2"}


def test_a_coscheduling_podgroup_names_its_timeout() -> None:
    clock = Clock()
    pods = []
    for i in range(2):
        pod = pod_obj(f"c{i}", gpus=8, uid=f"c{i}")
        pod["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": "cs"}
        pods.append(pod)
    service = make_service([node_obj(n) for n in EIGHT[:3]], pods)
    service.cache.clock = clock
    service.cache.groups.upsert(
        coscheduling_from_obj(
            {
                "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                "kind": "PodGroup",
                "metadata": {"name": "cs", "namespace": "default"},
                "spec": {"minMember": 2, "scheduleTimeoutSeconds": 30},
            }
        )
    )
    assert len(passed(service, pods[0], EIGHT[:3])) == 1
    (group,) = service.gangs_view()["groups"]
    assert group["plan"]["holdExpiresInSeconds"] == 30.0


def test_holds_run_out_and_the_room_goes_back() -> None:
    clock = Clock()
    gang = [member("a", i) for i in range(2)]
    service = service_with([node_obj(n) for n in EIGHT[:2]], [podgroup("a", 2)], gang)
    service.cache.clock = clock
    service.cache.dra.clock = clock
    (first,) = passed(service, gang[0], EIGHT[:2])
    assert service.cache.usage(first).requested.get(GPU) == 8
    clock.now += service.config.gangs.holdSeconds + 1
    assert [a.pod.key for a in service.cache.expire()] == ["default/a-0", "default/a-1"]
    assert all(service.cache.usage(n).requested.get(GPU, 0) == 0 for n in EIGHT[:2])
    # The next member filtered plans the group again.
    assert len(passed(service, gang[1], EIGHT[:2])) == 1
    assert [d["outcome"] for d in service.gangs_view()["decisions"]][-2:] == ["released", "planned"]


def test_a_member_bound_renews_the_holds_of_the_rest() -> None:
    clock = Clock()
    gang = [member("a", i) for i in range(2)]
    service = service_with([node_obj(n) for n in EIGHT[:2]], [podgroup("a", 2)], gang)
    service.cache.clock = clock
    (node,) = passed(service, gang[0], EIGHT[:2])
    clock.now += 200
    assert bind_pod(service, gang[0], node) == {"Error": ""}
    (group,) = service.gangs_view()["groups"]
    assert group["plan"]["holdExpiresInSeconds"] == service.config.gangs.holdSeconds
    assert [m["state"] for m in group["members"]] == ["bound", "held"]


def test_a_deleted_member_releases_the_groups_holds() -> None:
    gang = [member("a", i) for i in range(3)]
    service = service_with([node_obj(n) for n in EIGHT[:3]], [podgroup("a", 3)], gang)
    assert len(passed(service, gang[0], EIGHT[:3])) == 1
    service.cache.delete_pod("a-2")
    assert all(g["plan"] is None for g in service.gangs_view()["groups"])
    assert sum(service.cache.usage(n).requested.get(GPU, 0) for n in EIGHT[:3]) == 0
    assert service.gangs_view()["decisions"][-1]["outcome"] == "released"


def test_members_bound_on_full_nodes_still_fix_the_rack() -> None:
    """The nodes bound members fill are no candidates of the rest, yet their labels decide the domain."""
    nodes = [racked("a0", "a"), racked("a1", "a"), racked("b0", "b"), racked("b1", "b"), racked("b2", "b")]
    names = [n["metadata"]["name"] for n in nodes]
    bound = [member("job", i, node=f"b{i}", phase="Running") for i in range(2)]
    rest = member("job", 2)
    service = service_with(nodes, [podgroup("job", 3, topology=RACK)], [*bound, rest])
    assert passed(service, rest, [n for n in names if n not in ("b0", "b1")]) == ["b2"]


def test_a_planned_node_kube_scheduler_no_longer_offers_is_planned_again() -> None:
    gang = [member("a", i) for i in range(2)]
    service = service_with([node_obj(n) for n in EIGHT[:3]], [podgroup("a", 2)], gang)
    passed(service, gang[0], EIGHT[:3])
    (group,) = service.gangs_view()["groups"]
    node_of_second = next(m["node"] for m in group["members"] if m["pod"] == "default/a-1")
    offered = [n for n in EIGHT[:3] if n != node_of_second]
    (again,) = passed(service, gang[1], offered)
    assert again in offered


def test_other_pods_do_not_take_a_groups_held_room() -> None:
    gang = [member("a", i) for i in range(2)]
    loner = pod_obj("loner", gpus=8, uid="loner")
    service = service_with([node_obj(n) for n in EIGHT[:3]], [podgroup("a", 2)], [*gang, loner])
    passed(service, gang[0], EIGHT[:3])
    (free,) = passed(service, loner, EIGHT[:3])
    held = {m["node"] for m in service.gangs_view()["groups"][0]["members"]}
    assert free not in held


def test_explain_shows_the_group_plan() -> None:
    gang = [member("a", i) for i in range(2)]
    service = service_with([node_obj(n) for n in EIGHT[:3]], [podgroup("a", 2)], gang)
    dry = service.explain(filter_body(gang[0], EIGHT[:3]))["nodes"]
    assert all(node["gang"]["planned"] is False for node in dry)
    assert sum(node["gang"]["node"] for node in dry) == 1
    passed(service, gang[0], EIGHT[:3])
    planned = service.explain(filter_body(gang[1], EIGHT[:3]))["nodes"]
    assert all(node["gang"]["planned"] for node in planned)
    assert sum(node["gang"]["node"] for node in planned) == 1


def test_dra_members_on_one_node_never_get_the_same_device() -> None:
    devices = [gpu_device(f"g{i}") for i in range(2)]
    dra = [device_class_obj(), slice_obj("s", devices, node="d1"), claim_obj("c0"), claim_obj("c1")]
    gang = [with_claims(member("a", i, gpus=0), f"c{i}") for i in range(2)]
    service = service_with([node_obj("d1", gpus=None)], [podgroup("a", 2)], gang, dra=dra)
    assert passed(service, gang[0], ["d1"]) == ["d1"]
    assert passed(service, gang[1], ["d1"]) == ["d1"]
    held = {tuple(entry["devices"]) for entry in service.cache.dra.inflight_view()}
    assert held == {("gpu.example.com/d1/g0",), ("gpu.example.com/d1/g1",)}
    for pod in gang:
        assert bind_pod(service, pod, "d1") == {"Error": ""}
    claims = service.cache.dra.claims
    allocated = {claims[f"default/c{i}"].allocation.devices[0].id for i in range(2)}  # type: ignore[union-attr]
    assert len(allocated) == 2


def test_dra_members_sharing_a_gpu_never_plan_more_than_its_capacity() -> None:
    """Two members asking 30Gi of a shareable 40Gi GPU cannot both share it: the plan counts the
    shares it gave before, so they go to two nodes."""
    shareable = {
        "name": "gpu-0",
        "allowMultipleAllocations": True,
        "capacity": {"memory": {"value": "40Gi"}},
    }
    dra = [device_class_obj()]
    dra += [slice_obj(f"s{n}", [dict(shareable)], node=n) for n in ("d1", "d2")]
    for i in range(2):
        claim = claim_obj(f"c{i}", selector="device.allowMultipleAllocations")
        claim["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {"requests": {"memory": "30Gi"}}
        dra.append(claim)
    gang = [with_claims(member("a", i, gpus=0), f"c{i}") for i in range(2)]
    nodes = [node_obj("d1", gpus=None), node_obj("d2", gpus=None)]
    service = service_with(nodes, [podgroup("a", 2)], gang, dra=dra)
    placed = {passed(service, pod, ["d1", "d2"])[0] for pod in gang}
    assert placed == {"d1", "d2"}
    for pod in gang:
        node = next(
            m["node"]
            for g in service.gangs_view()["groups"]
            for m in g["members"]
            if m["uid"] == pod["metadata"]["uid"]
        )
        assert bind_pod(service, pod, node) == {"Error": ""}


def test_a_nodes_dra_capacity_is_counted_again_once_its_devices_change() -> None:
    """The planner keeps how many members of a kind a node's devices take while the node's DRA state
    is the same; a device taken since must not be counted from that memo."""
    dra = [device_class_obj()]
    dra += [slice_obj(f"s{n}", [gpu_device("g0"), gpu_device("g1")], node=n) for n in ("d1", "d2")]
    dra += [claim_obj(f"c{i}") for i in range(3)]
    gang = [with_claims(member("a", i, gpus=0), f"c{i}") for i in range(2)]
    loner = with_claims(pod_obj("loner", uid="loner"), "c2")
    nodes = [node_obj("d1", gpus=None), node_obj("d2", gpus=None)]
    service = service_with(nodes, [podgroup("a", 2)], gang, dra=dra)
    dry = service.explain(filter_body(gang[0], ["d1", "d2"]))["nodes"][0]["gang"]["placements"]
    assert set(dry.values()) == {"d1"}  # both on d1: it takes two
    # One of d1's devices taken by a bind in flight (no pod counted there: only its DRA state moves).
    participant = service.pipeline.get(DraClaims)
    assert participant is not None
    assert not isinstance(participant.dra.reserve(pod_from_obj(loner), "d1"), Status)
    placed = {passed(service, pod, ["d1", "d2"])[0] for pod in gang}
    assert placed == {"d2"}  # d1 takes one member now: both go to d2


def test_a_third_dra_member_that_finds_no_device_makes_the_group_wait() -> None:
    dra = [device_class_obj(), slice_obj("s", [gpu_device("g0"), gpu_device("g1")], node="d1")]
    dra += [claim_obj(f"c{i}") for i in range(3)]
    gang = [with_claims(member("a", i, gpus=0), f"c{i}") for i in range(3)]
    service = service_with([node_obj("d1", gpus=None)], [podgroup("a", 3)], gang, dra=dra)
    assert passed(service, gang[0], ["d1"]) == []
    assert service.cache.dra.inflight == {}


def test_the_queue_counts_the_whole_group() -> None:
    config = {
        "queues": {
            "resourceFlavors": [{"metadata": {"name": "any"}}],
            "clusterQueues": [cluster_queue("team", "any", 16)],
            "localQueues": [{"metadata": {"name": "q", "namespace": "default"}, "spec": {"clusterQueue": "team"}}],
        }
    }
    small = [in_queue(member("s", i), "q") for i in range(2)]
    large = [in_queue(member("l", i), "q") for i in range(3)]
    service = service_with(
        [node_obj(n) for n in EIGHT], [podgroup("s", 2), podgroup("l", 3)], [*small, *large], config=config
    )
    assert reasons(service, large[0], EIGHT) == {
        "gang default/l: 3 x 8 nvidia.com/gpu: ExceedsMaxQuota: nvidia.com/gpu 24 in flavor any "
        "exceeds what team could ever use (16)"
    }
    assert len(passed(service, small[0], EIGHT)) == 1
    fairness = service.fairness
    assert fairness is not None
    (usage,) = fairness.view()["nodes"]["cq/team"]["resources"]
    assert usage["usage"] == 16.0  # both members count from the plan on, before either is bound


@pytest.mark.parametrize("victims_of_b", [1, 2])
def test_preemption_never_evicts_half_a_gang(victims_of_b: int) -> None:
    running = [member("b", i, node=f"n{i}", phase="Running") for i in range(2)]
    service = service_with([node_obj(n) for n in EIGHT[:2]], [podgroup("b", 2)], running)
    preemptor = pod_obj("hi", gpus=8, uid="hi", priority=100)
    victims = [p["metadata"]["uid"] for p in running[:victims_of_b]]
    body = {"Pod": preemptor, "NodeNameToMetaVictims": {"n0": {"Pods": [{"UID": u} for u in victims]}}}
    import json

    answer = service.preempt(json.dumps(body).encode())
    if victims_of_b == 1:
        assert answer["NodeNameToMetaVictims"] == {}
        assert "belongs to gang default/b" in service.decisions[-1]["dropped"]["n0"]
    else:  # the whole gang: allowed
        assert set(answer["NodeNameToMetaVictims"]) == {"n0"}


def test_a_gang_member_preempts_only_if_the_whole_group_then_fits() -> None:
    low = [pod_obj(f"low{i}", gpus=8, uid=f"low{i}", node=f"n{i}", phase="Running") for i in range(2)]
    gang = [member("g", i, priority=100) for i in range(2)]
    service = service_with([node_obj(n) for n in EIGHT[:2]], [podgroup("g", 2)], [*low, *gang])
    import json

    body = {"Pod": gang[0], "NodeNameToMetaVictims": {"n0": {"Pods": [{"UID": "low0"}]}}}
    assert service.preempt(json.dumps(body).encode())["NodeNameToMetaVictims"] == {}
    dropped = service.decisions[-1]["dropped"]["n0"]
    assert dropped.startswith("evicting them would not let the whole gang run: gang default/g: 2 x 8")
    # One node free already: evicting the other node's pod lets both members run.
    service.cache.delete_pod("low1")
    assert set(service.preempt(json.dumps(body).encode())["NodeNameToMetaVictims"]) == {"n0"}
