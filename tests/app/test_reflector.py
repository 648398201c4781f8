"""The watch-fed cache against a fake API server spoken to over real HTTP by the real client."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from app.cluster.cache import ClusterCache
from app.runtime import readiness
from tests.app.apiharness import Harness, eventually
from tests.app.apiharness import run as run_harness
from tests.conftest import bind_body, filter_body, node_obj, pod_obj
from tests.fakeapi import FakeAPIServer


def run(fake: FakeAPIServer, body: Callable[[Harness], Awaitable[None]]) -> Harness:
    """The harness with node and pod watches only."""
    return run_harness(fake, body, dra=False)


def test_initial_sync_and_live_events(fake: FakeAPIServer) -> None:
    fake.add(node_obj("g1", gpus=4))
    running = fake.add(pod_obj("a", gpus=2, node="g1", phase="Running"))

    async def body(h: Harness) -> None:
        await eventually(lambda: h.service.not_ready_reason() == "", "initial sync")
        assert h.cache.usage("g1").requested["nvidia.com/gpu"] == 2
        await asyncio.to_thread(fake.wait_for_watchers, 2)
        fake.add(pod_obj("b", gpus=1, node="g1", phase="Running"))
        await eventually(lambda: h.cache.usage("g1").requested.get("nvidia.com/gpu") == 3, "ADDED counted")
        # Succeeded leaves the field selector: the watch sends DELETED and the GPUs are free again.
        fake.update({**running, "status": {"phase": "Succeeded"}})
        await eventually(lambda: h.cache.usage("g1").requested.get("nvidia.com/gpu") == 1, "terminal pod dropped")
        fake.delete("Pod", "b", "default")
        await eventually(lambda: not h.cache.usage("g1").requested, "DELETED uncounted")
        fake.delete("Node", "g1")
        await eventually(lambda: "g1" not in h.cache.nodes, "node deleted")

    run(fake, body)


def test_gone_relists_without_losing_or_doubling_pods(fake: FakeAPIServer) -> None:
    fake.add(node_obj("g1", gpus=8))
    pods = [fake.add(pod_obj(f"p{i}", gpus=1, node="g1", phase="Running")) for i in range(4)]

    async def body(h: Harness) -> None:
        await eventually(h.consistent, "initial sync")
        await asyncio.to_thread(fake.wait_for_watchers, 2)
        relists = h.cache.source("pods").relists
        fake.compact()  # open watches get ERROR 410 and must relist
        fake.delete("Pod", "p0", "default")
        fake.update({**pods[1], "spec": {**pods[1]["spec"]}, "status": {"phase": "Failed"}})
        fake.add(pod_obj("late", gpus=2, node="g1", phase="Running"))
        await eventually(lambda: h.cache.source("pods").relists > relists, "relist after 410")
        await eventually(h.consistent, "cache matches the server")
        assert h.cache.usage("g1").requested["nvidia.com/gpu"] == 4  # p2, p3 and late(2)

    harness = run(fake, body)
    assert harness.metrics.watch_restarts.labels("pods", "gone")._value.get() >= 1


def test_dropped_watch_resumes_from_last_resource_version(fake: FakeAPIServer) -> None:
    fake.add(node_obj("g1", gpus=8))

    async def body(h: Harness) -> None:
        await eventually(h.consistent, "initial sync")
        await asyncio.to_thread(fake.wait_for_watchers, 2)
        relists = h.cache.source("pods").relists
        fake.drop_watches()
        fake.add(pod_obj("x", gpus=3, node="g1", phase="Running"))
        await eventually(lambda: h.cache.usage("g1").requested.get("nvidia.com/gpu") == 3, "event after drop")
        assert h.cache.source("pods").relists == relists  # resumed by resourceVersion, no relist

    run(fake, body)
    watch_requests = [q for m, q in fake.requests if "watch=" in q and "/pods" in q]
    assert any("resourceVersion=" in q and "resourceVersion=&" not in q for q in watch_requests[1:])


def test_bookmark_advances_resource_version(fake: FakeAPIServer) -> None:
    fake.add(node_obj("g1"))

    async def body(h: Harness) -> None:
        await eventually(h.consistent, "initial sync")
        await asyncio.to_thread(fake.wait_for_watchers, 2)
        fake.add(node_obj("other"))  # bumps the RV, but pods do not see it
        target = str(fake.current_rv())
        fake.send_bookmarks()
        await eventually(lambda: h.reflectors[1].resource_version == target, "bookmark RV")

    run(fake, body)


def test_unreachable_then_errors_then_recovery(fake: FakeAPIServer) -> None:
    fake.add(node_obj("g1"))
    fake.fail_next(3, status=500, path_contains="/api/v1/pods")
    fake.fail_next(1, status=429, retry_after=0, path_contains="/api/v1/nodes")

    async def body(h: Harness) -> None:
        await eventually(lambda: h.service.not_ready_reason() == "", "sync despite errors")
        assert h.cache.source("pods").restarts >= 3

    run(fake, body)


def test_not_ready_before_first_sync_fails_closed() -> None:
    cache = ClusterCache()
    ready, reason = readiness(cache, ("nodes", "pods"), 30.0)
    assert (ready, reason) == (False, "nodes not synced yet")
    cache.source("nodes").synced = cache.source("pods").synced = True
    cache.source("pods").disconnected_since = cache.clock() - 31
    cache.source("pods").last_error = "connection refused"
    ready, reason = readiness(cache, ("nodes", "pods"), 30.0)
    assert not ready and reason.startswith("pods watch broken for 31s: connection refused")


def test_bind_through_the_api(fake: FakeAPIServer) -> None:
    fake.add(node_obj("g1", gpus=4))
    fake.add(node_obj("g2", gpus=4))
    pod = fake.add(pod_obj("p", gpus=2))
    gone = fake.add(pod_obj("gone", gpus=1))
    elsewhere = fake.add(pod_obj("elsewhere", gpus=1))

    async def body(h: Harness) -> None:
        await eventually(lambda: h.consistent() and len(h.cache.nodes) == 2, "initial sync")
        assert (await h.service.bind(bind_body(pod, "g1"))) == {"Error": ""}
        assert fake.get("Pod", "p", "default")["spec"]["nodeName"] == "g1"
        await eventually(lambda: not h.cache.ledger, "watch confirms the assumption")
        assert h.cache.usage("g1").requested["nvidia.com/gpu"] == 2

        # Deleted on the server before our watch saw it: 404, the assumption is released.
        h.service.filter(filter_body(gone, ["g1"]))
        fake.delete("Pod", "gone", "default")
        answer = await h.service.bind(bind_body(gone, "g1"))
        assert "failed: 404" in answer["Error"]  # filter memoised the pod, so bind reached the API
        assert gone["metadata"]["uid"] not in h.cache.ledger

        # Bound elsewhere by someone else, not yet seen by our watch: 409, Error, nothing leaked.
        fake.update({**elsewhere, "spec": {**elsewhere["spec"], "nodeName": "g2"}})
        h.cache.upsert_pod(h.cache.pods[elsewhere["metadata"]["uid"]])  # still believed pending
        answer = await h.service.bind(bind_body(elsewhere, "g1"))
        # Either the API refuses (409) or our watch delivered the update first: both are a clear Error.
        assert "already assigned to node" in answer["Error"] or "already bound to node g2" in answer["Error"]
        assert elsewhere["metadata"]["uid"] not in h.cache.ledger
        await eventually(lambda: h.cache.usage("g2").requested.get("nvidia.com/gpu") == 1, "watch catches up")

    run(fake, body)
    assert [b["target"]["name"] for b in fake.bindings] == ["g1"]


def test_bind_already_assigned_to_same_node_is_success(fake: FakeAPIServer) -> None:
    fake.add(node_obj("g1", gpus=4))
    pod = fake.add(pod_obj("p", gpus=1))

    async def body(h: Harness) -> None:
        await eventually(h.consistent, "initial sync")
        # The scheduler's bind reached the server but the reply was lost; the retry finds it bound.
        await h.client.bind("default", "p", pod["metadata"]["uid"], "g1")
        answer = await h.service.bind(bind_body(pod, "g1"))
        assert answer == {"Error": ""}

    run(fake, body)


def test_bind_uid_precondition(fake: FakeAPIServer) -> None:
    fake.add(node_obj("g1", gpus=4))
    fake.add(pod_obj("p", gpus=1))
    stale: dict[str, Any] = pod_obj("p", gpus=1, uid="old-uid")

    async def body(h: Harness) -> None:
        await eventually(h.consistent, "initial sync")
        h.service.filter(filter_body(stale, ["g1"]))  # the scheduler still has the old incarnation
        answer = await h.service.bind(bind_body(stale, "g1"))
        assert "Precondition failed" in answer["Error"]
        assert "old-uid" not in h.cache.ledger

    run(fake, body)


def test_a_paged_list_is_converted_page_by_page_and_skips_only_the_unusable(fake: FakeAPIServer) -> None:
    """1,201 pods come in three pages of at most 500; the one with a broken quantity on the last page
    is skipped (logged), every other one is counted once."""
    fake.add(node_obj("g1", gpus=2000))
    for i in range(1200):
        fake.add(pod_obj(f"p{i}", gpus=1, node="g1", phase="Running"))
    broken = pod_obj("broken", gpus=1, node="g1", phase="Running")
    broken["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    fake.add(broken)

    async def body(h: Harness) -> None:
        await eventually(lambda: h.service.not_ready_reason() == "", "initial sync")
        assert len(h.cache.pods) == 1200
        assert h.cache.usage("g1").requested["nvidia.com/gpu"] == 1200

    run(fake, body)
    pod_lists = [t for _, m, t in fake.request_log if m == "GET" and t.startswith("/api/v1/pods?") and "watch" not in t]
    assert len(pod_lists) == 3 and sum("continue=" in t for t in pod_lists) == 2
