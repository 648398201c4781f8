"""The console's Groups page (/ui/groups): every gang of gangs_view() with its members' states, the
plan in force or why it waits, the gang decisions, filters, bad input as a message, gangs off; and
gang decisions on the Decisions page."""

from __future__ import annotations

import asyncio
import html
import re
from typing import Any

import pytest

from app.cluster.objects import pod_from_obj
from app.cluster.podgroups import coscheduling_from_obj, podgroup_from_obj
from app.operator import console_groups
from app.operator.console_views import requests_text
from app.service import ExtenderService
from tests.app.operator.conftest import block, by_id, example_service
from tests.conftest import bind_body, filter_body, make_service, node_obj, pod_obj

HOSTNAME = "kubernetes.io/hostname"
PLANNED = "podgroup:ml-train/allreduce"  # 3 x 2 GPUs on one node: planned on dgx-a100-2
TOO_BIG = "podgroup:ml-train/pretrain"  # 2 x 8 GPUs: no node of the example has 8 free
SHORT = "coscheduling:ml-train/sweep"  # 2 of its 3 members exist


def podgroup(name: str, min_count: int, *, topology: str = "", namespace: str = "ml-train") -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    if topology:
        spec["schedulingConstraints"] = {"topology": [{"key": topology}]}
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def member(group: str, index: int, gpus: int, *, namespace: str = "ml-train", label: str = "") -> dict[str, Any]:
    """A member of ``group``: a 1.36 PodGroup's (spec.schedulingGroup), or of the group a label names."""
    pod = pod_obj(f"{group}-{index}", gpus=gpus, namespace=namespace, uid=f"{namespace}-{group}-{index}")
    if label:
        pod["metadata"]["labels"] = {label: group}
    else:
        pod["spec"]["schedulingGroup"] = {"podGroupName": group}
    return pod


def add(service: ExtenderService, *pods: dict[str, Any]) -> None:
    for pod in pods:
        service.cache.upsert_pod(pod_from_obj(pod))  # as the watch would deliver them


def filtered(service: ExtenderService, pod: dict[str, Any]) -> dict[str, Any]:
    answer: dict[str, Any] = service.filter(filter_body(pod, sorted(service.cache.nodes)))
    return answer


def gangs() -> tuple[ExtenderService, dict[str, list[dict[str, Any]]]]:
    """The example cluster with three gangs: one planned (a member bound, one binding, one held),
    one that fits nowhere, one waiting for a member."""
    service = example_service()
    service.cache.groups.upsert(podgroup_from_obj(podgroup("allreduce", 3, topology=HOSTNAME)))
    service.cache.groups.upsert(podgroup_from_obj(podgroup("pretrain", 2)))
    sweep = {"metadata": {"name": "sweep", "namespace": "ml-train"}, "spec": {"minMember": 3}}
    service.cache.groups.upsert(coscheduling_from_obj(sweep))
    pods = {
        PLANNED: [member("allreduce", i, gpus=2) for i in range(3)],
        TOO_BIG: [member("pretrain", i, gpus=8) for i in range(2)],
        SHORT: [member("sweep", i, gpus=1, label="scheduling.x-k8s.io/pod-group") for i in range(2)],
    }
    for group in pods.values():
        add(service, *group)
    for group in pods.values():
        filtered(service, group[0])
    first, second, _ = pods[PLANNED]
    plan = {m["pod"]: m["node"] for m in _entry(service, PLANNED)["members"]}
    node = plan[f"ml-train/{first['metadata']['name']}"]
    assert node == "dgx-a100-2"  # the only node with 6 GPUs free
    assert _bind(service, first, node) == ""
    # A /bind under way: the hold becomes an assumption the watch has not confirmed yet.
    assert service.cache.assume(service.cache.pods[second["metadata"]["uid"]], node) is None
    return service, pods


def _bind(service: ExtenderService, pod: dict[str, Any], node: str) -> str:
    answer: dict[str, Any] = asyncio.run(service.bind(bind_body(pod, node)))
    return str(answer["Error"])


def _entry(service: ExtenderService, key: str) -> dict[str, Any]:
    entry: dict[str, Any] = next(g for g in service.gangs_view()["groups"] if g["group"] == key)
    return entry


def _members(fragment: str) -> dict[str, tuple[str, str]]:
    """pod -> (state, node) of a group's member chips."""
    chips = re.findall(
        r'<li class="member" data-pod="([^"]+)" data-state="(\w+)".*?<span class="node">([^<]*)</span>', fragment
    )
    return {html.unescape(pod): (state, html.unescape(node)) for pod, state, node in chips}


def test_each_group_shows_what_gangs_view_says(console: Any) -> None:
    service, _ = gangs()
    client = console(service)
    page = client.get("/ui/groups").text
    view = client.get("/debug?nodes=false&decisions=0").json()["gangs"]
    assert view["enabled"] and len(view["groups"]) == 3
    assert re.findall(r'<tbody class="gang" data-group="([^"]+)"', page) == [g["group"] for g in view["groups"]]
    states = {}
    for entry in view["groups"]:
        group = block(page, "tbody", "data-group", entry["group"])
        source, name = entry["group"].split(":", 1)
        assert f'<td class="name">{name}</td>' in group and f">{source}</span>" in group
        assert f'<td class="num min-count">{entry["minCount"]}</td>' in group
        assert f'<td class="topology">{entry["topology"] or "—"}</td>' in group
        shown = _members(group)
        assert shown == {m["pod"]: (m["state"], m["node"] or "—") for m in entry["members"]}
        states[entry["group"]] = re.search(r'data-state="(\w+)"', group).group(1)  # type: ignore[union-attr]
        plan = entry["plan"]
        if plan is None:
            assert entry["reason"] in html.unescape(group)
            continue
        assert f'<span class="domain">{plan["domain"]}</span>' in group
        assert f'<span class="held">{requests_text(plan["held"])}</span>' in group
        expires = re.search(r'<span class="expires">(\d+) s</span>', group)
        assert expires and abs(int(expires.group(1)) - plan["holdExpiresInSeconds"]) <= 1
    assert states == {PLANNED: "planned", TOO_BIG: "unschedulable", SHORT: "waiting"}
    planned = _entry(service, PLANNED)
    assert sorted(m["state"] for m in planned["members"]) == ["binding", "bound", "held"]
    assert planned["plan"]["domain"] == f"{HOSTNAME}=dgx-a100-2"
    assert planned["plan"]["held"]["nvidia.com/gpu"] == 2  # the one member still held
    assert "2 of 3 members exist" in _entry(service, SHORT)["reason"]
    # The totals count the groups' and the members' states.
    assert by_id(page, "total-groups") == "3" and by_id(page, "total-planned") == "1"
    assert by_id(page, "total-waiting") == "2" and by_id(page, "total-held") == "1"
    assert by_id(page, "total-bound") == "2" and by_id(page, "total-pending") == "4"
    # Members are drawn with the Cluster page's cells: bound as allocated, binding as assumed.
    chips = dict(re.findall(r'data-state="(\w+)" title="[^"]*"><i class="cell (\w+)"></i>', page))
    assert chips == {"bound": "allocated", "binding": "assumed", "held": "held", "pending": "pending"}
    assert '/debug?nodes=false&amp;decisions=0"' in page


def test_gang_decisions_newest_first_and_filtered(console: Any) -> None:
    service, pods = gangs()
    client = console(service)
    decisions = service.gangs_view()["decisions"]

    def rows(query: str) -> list[tuple[str, str]]:
        table = block(client.get(f"/ui/groups{query}").text, "table", "id", "gang-decisions")
        return re.findall(r'<tr data-group="([^"]+)" data-outcome="(\w+)">', table)

    assert rows("") == [(d["group"], d["outcome"]) for d in reversed(decisions)]
    assert rows("")[-1] == (PLANNED, "planned") and len(rows("")) == 3
    assert rows("?group=PRETRAIN") == [(TOO_BIG, "unschedulable")]  # a substring, any case
    assert rows("?outcome=waiting") == [(SHORT, "waiting")]
    assert rows("?group=nobody") == []
    assert "no gang decision matches" in client.get("/ui/groups?group=nobody").text
    # The same rejection again, right after, is kept once and counted.
    filtered(service, pods[TOO_BIG][1])
    filtered(service, pods[TOO_BIG][0])
    table = block(client.get("/ui/groups?group=pretrain").text, "table", "id", "gang-decisions")
    assert re.findall(r'<td class="num">(\d+)</td>', table) == ["2", "1"]
    # The group filter applies to the groups too; so does the state filter.
    page = client.get("/ui/groups?group=sweep").text
    assert re.findall(r'<tbody class="gang" data-group="([^"]+)"', page) == [SHORT]
    assert by_id(page, "total-groups") == "1"
    page = client.get("/ui/groups?state=planned").text
    assert re.findall(r'<tbody class="gang" data-group="([^"]+)"', page) == [PLANNED]
    assert "no group matches" in client.get("/ui/groups?state=complete").text


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("state=bogus", "state must be one of planned, waiting, unschedulable, released, complete, new, got"),
        ("outcome=held", "outcome must be one of planned, waiting, unschedulable, released, complete, got"),
        ("state=%3Cscript%3E", "got &#39;&lt;script&gt;&#39;"),
    ],
)
def test_bad_query_parameters_are_a_message_not_a_crash(console: Any, query: str, message: str) -> None:
    answer = console(example_service()).get(f"/ui/groups?{query}")
    assert answer.status_code == 400
    match = re.search(r'id="error"[^>]*>(.*?)</div>', answer.text, re.S)
    assert match and message in match.group(1)
    assert "<script>" not in answer.text


def test_complete_and_released_groups() -> None:
    nodes = [node_obj("a", gpus=8), node_obj("b", gpus=8)]
    pods = [member("g", i, gpus=4, namespace="default") for i in range(2)]
    service = make_service(nodes, pods)
    service.cache.groups.upsert(podgroup_from_obj(podgroup("g", 2, namespace="default")))
    page = console_groups.groups_page(service, console_groups.GroupsQuery())
    assert [(g.key, g.state) for g in page["groups"]] == [("podgroup:default/g", "new")]
    filtered(service, pods[0])
    planned = {m["pod"]: m["node"] for m in _entry(service, "podgroup:default/g")["members"]}
    for pod in pods:
        assert _bind(service, pod, planned[f"default/{pod['metadata']['name']}"]) == ""
    (row,) = console_groups.groups_page(service, console_groups.GroupsQuery())["groups"]
    assert (row.state, row.counts) == ("complete", {"bound": 2})
    # A plan given back (its PodGroup changed): released, with the reason.
    others = [member("h", i, gpus=4, namespace="default") for i in range(2)]
    add(service, *others)
    service.cache.groups.upsert(podgroup_from_obj(podgroup("h", 2, namespace="default")))
    filtered(service, others[0])
    service.cache.groups.upsert(podgroup_from_obj(podgroup("h", 2, namespace="default", topology=HOSTNAME)))
    rows = console_groups.groups_page(service, console_groups.GroupsQuery(state="released"))["groups"]
    assert [(r.key, r.state) for r in rows] == [("podgroup:default/h", "released")]
    assert "holds released: the group changed" in rows[0].reason


def test_kueue_groups_and_many_members(console: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(console_groups, "MAX_MEMBERS", 3)
    service = make_service([node_obj("n", gpus=8)])
    for index in range(5):
        pod = member("train", index, gpus=1, namespace="default", label="kueue.x-k8s.io/pod-group-name")
        pod["metadata"]["annotations"] = {"kueue.x-k8s.io/pod-group-total-count": "5"}
        add(service, pod)
    # A Kueue pod group without its total count is no gang.
    add(
        service,
        *(member("other", i, gpus=1, namespace="default", label="kueue.x-k8s.io/pod-group-name") for i in (0, 1)),
    )
    page = console(service).get("/ui/groups").text
    group = block(page, "tbody", "data-group", "kueue:default/train")
    assert 'title="Kueue pod group (pod labels and annotations)">kueue</span>' in group
    assert len(_members(group)) == 3 and "+2 more" in group
    assert "5 members in the cache, 5 pending" in group
    assert by_id(page, "total-groups") == "1"


def test_the_groups_page_notices_what_it_leaves_out(console: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(console_groups, "MAX_GROUPS", 2)
    service, _ = gangs()
    page = console(service).get("/ui/groups").text
    assert len(re.findall(r'<tbody class="gang"', page)) == 2
    assert "2 of 3 groups shown" in page and by_id(page, "total-groups") == "3"


def test_gangs_off_and_no_gang(console: Any) -> None:
    off = console(make_service([node_obj("n")], config={"gangs": {"enabled": False}})).get("/ui/groups")
    assert off.status_code == 200 and "Gang scheduling is off" in by_id(off.text.replace("<code>", ""), "gangs-off")
    empty = console(example_service()).get("/ui/groups").text
    assert "no pod of a gang in the cache" in empty and "no gang decision yet" in empty


def test_hostile_names_are_text(console: Any) -> None:
    service = make_service([node_obj("n", gpus=8)])
    hostile = member("x", 0, gpus=1, namespace="ns-\"'><img src=x onerror=alert(2)>")
    hostile["metadata"]["name"] = "<script>alert(1)</script>"
    add(service, hostile)
    filtered(service, hostile)  # its PodGroup does not exist: waiting, the reason names it
    page = console(service).get("/ui/groups?group=x").text
    assert "<script>alert" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "does not exist (yet)" in page


def test_the_decisions_page_lists_gang_decisions(console: Any) -> None:
    service, _ = gangs()
    client = console(service)
    page = client.get("/ui/decisions").text
    groups = re.findall(r'<tr data-verb="gang" data-group="([^"]+)">', page)
    assert sorted(groups) == sorted(d["group"] for d in service.gangs_view()["decisions"])
    assert f'href="/ui/groups?group={PLANNED.replace(":", "%3A")}"' in page
    only = client.get("/ui/decisions?pod=pretrain").text
    assert re.findall(r'<tr data-verb="gang" data-group="([^"]+)">', only) == [TOO_BIG]
    assert re.findall(r'data-pod="([^"]+)"', only) == ["ml-train/pretrain-0"]  # its member's filter
    by_node = client.get("/ui/decisions?node=dgx-a100-2").text
    assert 'data-verb="gang"' not in by_node and 'data-pod="ml-train/allreduce-0"' in by_node
