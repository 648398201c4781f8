"""Protocol tests for the fake API server, driven with plain httpx."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from tests.fakeapi.server import FakeAPIServer

Obj = dict[str, Any]
TIMEOUT = 5.0


@pytest.fixture
def api() -> Iterator[FakeAPIServer]:
    with FakeAPIServer() as server:
        yield server


@pytest.fixture
def http(api: FakeAPIServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=api.url, timeout=TIMEOUT) as client:
        yield client


def node(name: str) -> Obj:
    return {"kind": "Node", "metadata": {"name": name}, "spec": {}}


def pod(name: str, *, node_name: str = "", phase: str = "Pending", uid: str | None = None) -> Obj:
    meta: Obj = {"name": name, "namespace": "default"}
    if uid:
        meta["uid"] = uid
    spec: Obj = {"containers": [{"name": "c", "image": "busybox"}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": phase}}


def with_phase(obj: Obj, phase: str) -> Obj:
    return {**obj, "status": {"phase": phase}}


@contextmanager
def watch(http: httpx.Client, path: str, **params: Any) -> Iterator[Iterator[Obj]]:
    """Open a watch stream and yield an iterator of decoded events (blocking reads)."""
    query = {"watch": "1", **params}
    with http.stream("GET", path, params=query) as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/json"
        yield (json.loads(line) for line in response.iter_lines() if line)


def names(items: list[Obj]) -> list[str]:
    return [item["metadata"]["name"] for item in items]


def test_list_reports_current_rv_and_bare_items(api: FakeAPIServer, http: httpx.Client) -> None:
    api.add(node("n1"))
    stored = api.add(node("n2"))
    assert stored["metadata"]["resourceVersion"] == str(api.current_rv()) == "2"
    assert stored["metadata"]["uid"]

    response = http.get("/api/v1/nodes", headers={"Authorization": "Bearer x"})
    assert response.status_code == 200
    body = response.json()
    assert body["kind"] == "NodeList" and body["apiVersion"] == "v1"
    assert body["metadata"] == {"resourceVersion": "2"}
    assert names(body["items"]) == ["n1", "n2"]
    assert all("kind" not in item and "apiVersion" not in item for item in body["items"])
    assert ("GET", "/api/v1/nodes") in api.requests


def test_pagination_serves_first_page_snapshot(api: FakeAPIServer, http: httpx.Client) -> None:
    for i in range(5):
        api.add(pod(f"p{i}"))
    snapshot_rv = str(api.current_rv())
    url = "/api/v1/namespaces/default/pods"

    first = http.get(url, params={"limit": 2}).json()
    api.add(pod("late"))  # must not show up in the remaining pages
    second = http.get(url, params={"limit": 2, "continue": first["metadata"]["continue"]}).json()
    third = http.get(url, params={"limit": 2, "continue": second["metadata"]["continue"]}).json()

    assert [page["metadata"]["resourceVersion"] for page in (first, second, third)] == [snapshot_rv] * 3
    assert "continue" not in third["metadata"]
    assert names(first["items"] + second["items"] + third["items"]) == [f"p{i}" for i in range(5)]


def test_list_field_selectors(api: FakeAPIServer, http: httpx.Client) -> None:
    api.add(pod("pending"))
    api.add(pod("running", node_name="n1", phase="Running"))
    api.add(pod("done", node_name="n1", phase="Succeeded"))
    api.add(pod("failed", node_name="n2", phase="Failed"))
    url = "/api/v1/pods"

    def select(selector: str) -> list[str]:
        return sorted(names(http.get(url, params={"fieldSelector": selector}).json()["items"]))

    assert select("status.phase!=Succeeded,status.phase!=Failed") == ["pending", "running"]
    assert select("spec.nodeName=n1") == ["done", "running"]
    assert select("spec.nodeName==n2") == ["failed"]
    assert select("spec.nodeName=") == ["pending"]
    assert select("spec.nodeName!=") == ["done", "failed", "running"]
    bad = http.get(url, params={"fieldSelector": "spec.bogus=x"})
    assert bad.status_code == 400 and bad.json()["kind"] == "Status"


def test_watch_replays_history_after_rv(api: FakeAPIServer, http: httpx.Client) -> None:
    api.add(node("a"))
    start = api.current_rv()
    api.add(node("b"))
    api.update({**node("a"), "spec": {"unschedulable": True}})
    api.delete("Node", "b")

    with watch(http, "/api/v1/nodes", resourceVersion=start) as events:
        replayed = [next(events) for _ in range(3)]
    seen = [
        (e["type"], e["object"]["metadata"]["name"], int(e["object"]["metadata"]["resourceVersion"])) for e in replayed
    ]
    assert seen == [("ADDED", "b", start + 1), ("MODIFIED", "a", start + 2), ("DELETED", "b", start + 3)]


def test_watch_without_rv_starts_with_synthetic_adds(api: FakeAPIServer, http: httpx.Client) -> None:
    api.add(node("a"))
    with watch(http, "/api/v1/nodes", timeoutSeconds=1) as events:
        event = next(events)
    assert event["type"] == "ADDED"
    assert event["object"]["kind"] == "Node" and event["object"]["apiVersion"] == "v1"


def test_watch_delivers_live_events(api: FakeAPIServer, http: httpx.Client) -> None:
    with watch(http, "/api/v1/namespaces/default/pods", resourceVersion=api.current_rv()) as events:
        api.wait_for_watchers(1)
        created = api.add(pod("p"))
        api.add({**pod("elsewhere"), "metadata": {"name": "elsewhere", "namespace": "other"}})
        api.update(with_phase(created, "Running"))
        added, modified = next(events), next(events)
    assert (added["type"], added["object"]["kind"]) == ("ADDED", "Pod")
    assert modified["type"] == "MODIFIED" and modified["object"]["status"]["phase"] == "Running"
    assert modified["object"]["metadata"]["resourceVersion"] == str(api.current_rv())


def test_watch_field_selector_transitions(api: FakeAPIServer, http: httpx.Client) -> None:
    active = "status.phase!=Succeeded,status.phase!=Failed"
    with watch(http, "/api/v1/pods", resourceVersion=api.current_rv(), fieldSelector=active) as events:
        api.wait_for_watchers(1)
        api.add(pod("finished", phase="Succeeded"))  # never matches: no event
        p = api.add(pod("p"))
        api.update(with_phase(p, "Running"))
        api.update(with_phase(p, "Succeeded"))
        api.update(with_phase(p, "Running"))
        got = [(e["type"], e["object"]["status"]["phase"]) for e in (next(events) for _ in range(4))]
    assert got == [("ADDED", "Pending"), ("MODIFIED", "Running"), ("DELETED", "Running"), ("ADDED", "Running")]


def test_bookmarks_only_for_watches_that_asked(api: FakeAPIServer, http: httpx.Client) -> None:
    rv = api.current_rv()
    with (
        watch(http, "/api/v1/nodes", resourceVersion=rv, allowWatchBookmarks="true") as with_bookmarks,
        watch(http, "/api/v1/nodes", resourceVersion=rv) as without,
    ):
        api.wait_for_watchers(2)
        api.add(pod("p"))  # bumps the RV without a Node event
        api.send_bookmarks()
        api.drop_watches()
        bookmark = {"kind": "Node", "apiVersion": "v1", "metadata": {"resourceVersion": str(rv + 1)}}
        assert list(with_bookmarks) == [{"type": "BOOKMARK", "object": bookmark}]
        assert list(without) == []
    assert api.open_watch_count() == 0


def test_compact_expires_old_resource_versions(api: FakeAPIServer, http: httpx.Client) -> None:
    api.add(node("a"))
    old = api.current_rv()
    api.add(node("b"))
    with watch(http, "/api/v1/nodes", resourceVersion=old) as open_stream:
        api.wait_for_watchers(1)
        assert next(open_stream)["type"] == "ADDED"
        api.compact()
        error = next(open_stream)
        assert error["type"] == "ERROR" and error["object"]["code"] == 410
        assert list(open_stream) == []

    response = http.get("/api/v1/nodes", params={"resourceVersion": old})
    assert response.status_code == 410
    status = response.json()
    assert (status["kind"], status["reason"], status["code"]) == ("Status", "Expired", 410)
    assert status["message"].startswith(f"too old resource version: {old} (")
    assert http.get("/api/v1/nodes", params={"resourceVersion": api.current_rv()}).status_code == 200

    with watch(http, "/api/v1/nodes", resourceVersion=old) as events:
        assert [(e["type"], e["object"]["reason"]) for e in events] == [("ERROR", "Expired")]
    with watch(http, "/api/v1/nodes", resourceVersion=api.current_rv(), timeoutSeconds=1) as events:
        api.add(node("c"))
        assert next(events)["type"] == "ADDED"


def test_fail_next_with_retry_after(api: FakeAPIServer, http: httpx.Client) -> None:
    api.fail_next(1, status=429, retry_after=3, path_contains="/pods")
    assert http.get("/api/v1/nodes").status_code == 200
    failed = http.get("/api/v1/pods")
    assert failed.status_code == 429 and failed.headers["Retry-After"] == "3"
    assert failed.json()["reason"] == "TooManyRequests"
    assert failed.json()["details"] == {"retryAfterSeconds": 3}
    assert http.get("/api/v1/pods").status_code == 200


def binding(name: str, node_name: str, uid: str | None = None, annotations: dict[str, str] | None = None) -> Obj:
    meta: Obj = {"name": name, "namespace": "default"}
    if uid:
        meta["uid"] = uid
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Binding", "metadata": meta, "target": {"kind": "Node", "name": node_name}}


def test_binding(api: FakeAPIServer, http: httpx.Client) -> None:
    created = api.add(pod("p", uid="uid-p"))
    url = "/api/v1/namespaces/default/pods/{}/binding"

    with watch(http, "/api/v1/pods", resourceVersion=api.current_rv()) as events:
        ok = http.post(url.format("p"), json=binding("p", "n1", uid="uid-p", annotations={"gpu/ids": "0,1"}))
        assert ok.status_code == 201
        assert ok.json() == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
        event = next(events)
    assert event["type"] == "MODIFIED" and event["object"]["spec"]["nodeName"] == "n1"
    bound = api.get("Pod", "p", "default")
    assert bound is not None
    assert bound["spec"]["nodeName"] == "n1" and bound["metadata"]["annotations"] == {"gpu/ids": "0,1"}
    assert int(bound["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    assert [b["target"]["name"] for b in api.bindings] == ["n1"]

    again = http.post(url.format("p"), json=binding("p", "n2"))
    assert again.status_code == 409 and again.json()["reason"] == "Conflict"
    assert 'pod p is already assigned to node "n1"' in again.json()["message"]

    api.add(pod("q", uid="uid-q"))
    stale = http.post(url.format("q"), json=binding("q", "n1", uid="uid-old"))
    assert stale.status_code == 409
    assert "Precondition failed: UID in precondition: uid-old, UID in object meta: uid-q" in stale.json()["message"]

    missing = http.post(url.format("nope"), json=binding("nope", "n1"))
    assert missing.status_code == 404 and missing.json()["reason"] == "NotFound"
    assert len(api.bindings) == 1


def test_unknown_path_is_status_404(api: FakeAPIServer, http: httpx.Client) -> None:
    response = http.get("/apis/apps/v1/deployments")
    assert response.status_code == 404
    assert response.json()["kind"] == "Status" and response.json()["code"] == 404


def test_kueue_group_served_or_not() -> None:
    queue = {"kind": "LocalQueue", "metadata": {"name": "q", "namespace": "team-a"}, "spec": {"clusterQueue": "cq"}}
    with FakeAPIServer() as api, httpx.Client(base_url=api.url, timeout=TIMEOUT) as http:
        api.add(queue)
        api.add({"kind": "ClusterQueue", "metadata": {"name": "cq"}, "spec": {}})
        body = http.get("/apis/kueue.x-k8s.io/v1beta2/localqueues").json()
        assert body["kind"] == "LocalQueueList" and body["apiVersion"] == "kueue.x-k8s.io/v1beta2"
        assert [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in body["items"]] == [("team-a", "q")]
        assert http.get("/apis/kueue.x-k8s.io/v1beta2/namespaces/other/localqueues").json()["items"] == []
        assert names(http.get("/apis/kueue.x-k8s.io/v1beta2/clusterqueues").json()["items"]) == ["cq"]
    with FakeAPIServer(kueue=False) as api, httpx.Client(base_url=api.url, timeout=TIMEOUT) as http:
        response = http.get("/apis/kueue.x-k8s.io/v1beta2/clusterqueues")
        assert response.status_code == 404 and response.json()["reason"] == "NotFound"


def test_timeout_and_latency(api: FakeAPIServer, http: httpx.Client) -> None:
    with watch(http, "/api/v1/nodes", resourceVersion=api.current_rv(), timeoutSeconds=0.2) as events:
        assert list(events) == []  # server closes the stream when timeoutSeconds elapses
    api.set_latency(0.3)
    began = time.monotonic()
    assert http.get("/api/v1/nodes").status_code == 200
    assert time.monotonic() - began >= 0.3
    with pytest.raises(TimeoutError):
        api.wait_for_watchers(1, timeout=0.05)


def test_stop_closes_open_watches() -> None:
    server = FakeAPIServer()
    base_url = server.start()
    with httpx.Client(base_url=base_url, timeout=TIMEOUT) as http:
        with watch(http, "/api/v1/nodes", resourceVersion=0) as events:
            server.wait_for_watchers(1)
            server.stop()
            assert list(events) == []
        with pytest.raises(httpx.ConnectError):
            http.get("/api/v1/nodes")
