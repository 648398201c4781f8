"""API-server faults against the fake API server, over real HTTP with the real client and reflectors.

Each test ends with the cache in exactly the server's state (pods by UID and node, nodes, DRA claims
and slices by resourceVersion), nothing counted twice (``check_invariants``), an empty assume ledger
once the watch has confirmed the binds, and the operator surface (/readyz, /debug) telling what
happened meanwhile.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app.cluster.binding import FINALIZER
from app.cluster.reflector import DEVICE_TAINT_RULES_NOT_SERVED
from tests.app.apiharness import GPU, SOURCES, Harness, add_dra_node, eventually, run
from tests.conftest import bind_body, claim_obj, filter_body, gpu_device, node_obj, pod_obj, slice_obj, with_claims
from tests.fakeapi import FakeAPIServer


def populate(fake: FakeAPIServer) -> dict[str, Any]:
    """Two GPU nodes with bound and pending pods, and a DRA node with a class, a slice and a claim."""
    fake.add(node_obj("g1", gpus=8))
    fake.add(node_obj("g2", gpus=8))
    add_dra_node(fake, "c1")
    return {
        "bound": [fake.add(pod_obj(f"b{i}", gpus=1, node="g1", phase="Running")) for i in range(3)],
        "pending": fake.add(pod_obj("pending", gpus=2)),
    }


async def churn(fake: FakeAPIServer, objects: dict[str, Any], tag: str) -> None:
    """Changes of every kind: add, modify (bind, finish), delete, for pods, nodes, slices and claims."""
    fake.add(pod_obj(f"new-{tag}", gpus=2, node="g2", phase="Running"))
    fake.delete("Pod", objects["bound"][0]["metadata"]["name"], "default")
    done = fake.get("Pod", objects["bound"][1]["metadata"]["name"], "default")
    if done is not None:
        fake.update({**done, "status": {"phase": "Succeeded"}})
    fake.add(node_obj(f"n-{tag}", gpus=4))
    fake.update({**fake.get("Node", "g2"), "metadata": {"name": "g2", "labels": {"tag": tag}}})  # type: ignore[dict-item]
    fake.add(slice_obj(f"s-{tag}", [gpu_device("gpu-0")], node=f"n-{tag}"))
    fake.add(claim_obj(f"c-{tag}"))
    fake.delete("ResourceClaim", "c1", "default")


# ---------------------------------------------------------------------------- watch and list faults
def test_unreachable_at_start_then_up(fake: FakeAPIServer) -> None:
    populate(fake)
    port = fake.port
    fake.stop()

    async def body(h: Harness) -> None:
        # Down: not ready, and /debug tells why and that the reflectors keep trying.
        await eventually(lambda: all(h.cache.source(s).restarts >= 2 for s in SOURCES), "retries while down")
        status, answer = await h.readyz()
        assert status == 503 and answer["reason"].startswith("nodes not synced yet: list /api/v1/nodes: ConnectError")
        sources = await h.sources()
        for name in SOURCES:
            assert sources[name]["synced"] is False and sources[name]["connected"] is False
            assert "ConnectError" in sources[name]["lastError"]
            assert sources[name]["relists"] == 0
        await asyncio.to_thread(fake.start, port)
        await h.settled("synced after the server came up")
        assert (await h.readyz())[0] == 200
        sources = await h.sources()
        assert all(sources[n]["synced"] and sources[n]["relists"] == 1 for n in SOURCES)
        # The fake API server does not serve the optional DeviceTaintRule API: synced, with no rules.
        assert sources["devicetaintrules"]["synced"]
        assert sources["devicetaintrules"]["lastError"] == DEVICE_TAINT_RULES_NOT_SERVED
        await eventually(lambda: all(h.cache.source(s).connected for s in SOURCES), "watches open")
        sources = await h.sources()
        assert all(not sources[n]["lastError"] for n in SOURCES)

    run(fake, body)


@pytest.mark.parametrize("compacted", [False, True], ids=["history-kept", "history-compacted"])
def test_restart_mid_watch_with_changes_meanwhile(fake: FakeAPIServer, compacted: bool) -> None:
    objects = populate(fake)

    async def body(h: Harness) -> None:
        await h.settled("initial sync")
        await asyncio.to_thread(fake.wait_for_watchers, len(SOURCES))
        relists = {s: h.cache.source(s).relists for s in SOURCES}
        port = fake.port
        await asyncio.to_thread(fake.stop)
        await churn(fake, objects, "down")  # the server's state moves on while we cannot see it
        if compacted:
            fake.compact()  # e.g. a restore: our resourceVersions are too old, a relist is needed
        await eventually(lambda: all("ConnectError" in h.cache.source(s).last_error for s in SOURCES), "down noticed")
        assert not h.cache.source("pods").connected
        sources = await h.sources()
        assert sources["pods"]["lastError"] and sources["pods"]["disconnectedForSeconds"] is not None
        # Past staleAfter, /readyz says which watch is broken and why.
        status, answer = await h.readyz()
        assert status == 503 and "watch broken" in answer["reason"] and "ConnectError" in answer["reason"]
        await asyncio.to_thread(fake.start, port)
        await h.settled("caught up after the restart")
        # Every source watches again (after its relist, when the history is gone: a watch from a
        # compacted resourceVersion opens, then brings a 410 ERROR event).
        expected = {s: relists[s] + compacted for s in SOURCES}
        await eventually(
            lambda: all(h.cache.source(s).relists >= expected[s] and h.cache.source(s).connected for s in SOURCES),
            "watches open again",
        )
        assert (await h.readyz())[0] == 200
        after = await h.sources()
        for name in SOURCES:
            # Resumed from the last resourceVersion, or relisted exactly once when the history is gone.
            assert after[name]["relists"] == relists[name] + compacted, name
            assert after[name]["lastError"] == "" and after[name]["disconnectedForSeconds"] is None

    run(fake, body, stale_after=0.0)


def test_gone_during_watch_with_an_assumption_in_flight(fake: FakeAPIServer) -> None:
    objects = populate(fake)

    async def body(h: Harness) -> None:
        await h.settled("initial sync")
        await asyncio.to_thread(fake.wait_for_watchers, len(SOURCES))
        pending = objects["pending"]
        h.service.filter(filter_body(pending, ["g1", "g2"]))
        assert await h.service.bind(bind_body(pending, "g1")) == {"Error": ""}
        fake.compact()  # 410 before (or after) the watch delivered our binding: the relist settles it
        await churn(fake, objects, "gone")
        # Every open watch got the 410; each reflector handles it on its own task.
        await eventually(
            lambda: all(h.cache.source(s).relists >= 2 for s in SOURCES), "every source relisted after 410", timeout=15
        )
        await h.settled("relisted after 410")
        assert all(h.cache.source(s).relists == 2 for s in SOURCES)  # once each, not again
        assert h.metrics.watch_restarts.labels("pods", "gone")._value.get() == 1
        # The bound pod counts once: 3 bound - 1 deleted - 1 finished + 2 pending-now-bound on g1.
        assert h.cache.usage("g1").requested[GPU] == 3

    run(fake, body)


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_is_honoured(fake: FakeAPIServer, status: int) -> None:
    populate(fake)
    # The list fails once with Retry-After: 1, then the watch once more: each retry waits >= 1 s
    # although the reflector's own backoff is 0.02 s.
    fake.fail_next(1, status=status, retry_after=1, path_contains="/api/v1/pods?")
    fake.fail_next(1, status=status, retry_after=1, path_contains="/api/v1/nodes?watch=")

    async def body(h: Harness) -> None:
        await eventually(lambda: h.cache.source("pods").restarts >= 1, "the list was refused")
        sources = await h.sources()
        assert sources["pods"]["lastError"].startswith(f"{status} ") and sources["pods"]["synced"] is False
        await h.settled("synced after the retries")
        await eventually(lambda: all(h.cache.source(s).connected for s in SOURCES), "watches open", timeout=10)

    h = run(fake, body)

    def gap(path: str) -> float:
        times = [t for t, method, target in fake.request_log if target.startswith(path)]
        return times[1] - times[0]

    assert gap("/api/v1/pods?") >= 1.0  # list refused, then the list again
    assert gap("/api/v1/nodes?watch=") >= 1.0  # watch refused, then the watch again
    assert h.cache.source("nodes").relists == 1  # a refused watch resumes; it does not relist


def test_slow_responses_then_timeouts_then_recovery(fake: FakeAPIServer) -> None:
    objects = populate(fake)

    async def body(h: Harness) -> None:
        fake.set_latency(0.1)  # slow, within the client's timeout: every source syncs anyway
        await h.settled("synced through a slow server")
        await asyncio.to_thread(fake.wait_for_watchers, len(SOURCES))
        fake.set_latency(0.6)  # slower than the client's 0.3 s timeout: lists time out
        compacted = fake.current_rv()
        fake.compact()
        await churn(fake, objects, "slow")
        await eventually(lambda: "ReadTimeout" in h.cache.source("pods").last_error, "timeouts reported")
        assert not h.cache.source("pods").connected
        fake.set_latency(0.0)
        await h.settled("caught up once the server is fast again")
        assert int(h.reflectors[1].resource_version) > compacted

    run(fake, body, timeout=0.3)


def test_repeated_watch_drops_during_churn(fake: FakeAPIServer) -> None:
    fake.add(node_obj("g1", gpus=1000))

    async def body(h: Harness) -> None:
        await h.settled("initial sync")
        live: list[str] = []
        for round_ in range(10):
            await asyncio.to_thread(fake.wait_for_watchers, len(SOURCES))
            for i in range(5):
                live.append(fake.add(pod_obj(f"p{round_}-{i}", gpus=1, node="g1", phase="Running"))["metadata"]["name"])
            fake.drop_watches()  # mid-stream, without an ERROR: resume from the last resourceVersion
            for name in live[:2]:
                fake.delete("Pod", name, "default")
            del live[:2]
        await h.settled("every drop resumed")
        assert h.cache.usage("g1").requested[GPU] == len(live) == 30  # 10 rounds x (5 added - 2 deleted)
        assert h.cache.source("pods").relists == 1  # resumed each time, never relisted
        assert h.cache.source("pods").restarts >= 10

    run(fake, body)


def test_watches_cut_at_once_back_off(fake: FakeAPIServer) -> None:
    """A server (or proxy) that accepts watches and ends them at once, event-less: the reflector backs
    off as after an error, instead of reconnecting in a tight loop."""
    populate(fake)

    async def body(h: Harness) -> None:
        await h.settled("initial sync")
        await asyncio.to_thread(fake.wait_for_watchers, len(SOURCES))
        fake.end_watches_at_once(10_000)
        fake.drop_watches()
        first = len(fake.request_log)
        await eventually(lambda: "very short watch" in h.cache.source("pods").last_error, "short watch", timeout=15)
        await eventually(
            lambda: sum(1 for _, _, t in fake.request_log[first:] if "/pods?watch=" in t) >= 6, "6 tries", timeout=15
        )
        tries = [t for t, _, target in fake.request_log[first:] if target.startswith("/api/v1/pods?watch=")][:6]
        # The backoff (0.02 s doubling up to 0.2 s) spaces 6 tries by at least 0.02+0.04+0.08+0.16+0.2 s,
        # less the first step if the drop itself counted: >= 0.3 s, where a tight loop takes milliseconds.
        assert tries[-1] - tries[0] >= 0.3

        # Each retry's watch connects for a moment (and clears the error) before it is cut again.
        async def shown() -> bool:
            return "very short watch" in (await h.sources())["pods"]["lastError"]

        await eventually(shown, "/debug shows the short watch")
        fake.end_watches_at_once(0)
        fake.add(pod_obj("late", gpus=1, node="g1", phase="Running"))
        await h.settled("recovered once watches last")
        await eventually(lambda: all(h.cache.source(s).connected for s in SOURCES), "watches open", timeout=10)
        assert all(h.cache.source(s).relists == 1 for s in SOURCES)

    run(fake, body)


# ---------------------------------------------------------------------------- bind faults
def test_bind_times_out_after_the_server_applied_it(fake: FakeAPIServer) -> None:
    objects = populate(fake)
    pending = objects["pending"]

    async def body(h: Harness) -> None:
        await h.settled("initial sync")
        h.service.filter(filter_body(pending, ["g1", "g2"]))
        fake.answer_late(1, 1.0, path_contains="/binding")  # applied at once, answered after the timeout
        answer = await h.service.bind(bind_body(pending, "g2"))
        assert "timed out" in answer["Error"]
        # Not definite: the assumption stays, so nobody else gets those GPUs meanwhile.
        assert h.cache.counted(pending["metadata"]["uid"]) is not None
        h.cache.check_invariants()
        # kube-scheduler retries the same bind: success, whether or not the watch has confirmed yet.
        assert await h.service.bind(bind_body(pending, "g2")) == {"Error": ""}
        await h.settled("the watch confirmed the binding")
        assert h.cache.usage("g2").requested[GPU] == 2
        assert [b["target"]["name"] for b in fake.bindings] == ["g2"]

    run(fake, body, timeout=0.3)


def test_bind_of_a_dra_pod_deleted_meanwhile_releases_the_claim(fake: FakeAPIServer) -> None:
    populate(fake)
    pod = fake.add(with_claims(pod_obj("dra", gpus=0), "c1"))

    async def body(h: Harness) -> None:
        await h.settled("initial sync")
        assert h.service.filter(filter_body(pod, ["d1"]))["NodeNames"] == ["d1"]
        fake.delete("Pod", "dra", "default")
        answer = await h.service.bind(bind_body(pod, "d1"))
        assert "failed: 404" in answer["Error"]
        claim = fake.get("ResourceClaim", "c1", "default")
        assert claim is not None
        assert not (claim.get("status") or {}).get("allocation") and not (claim.get("status") or {}).get("reservedFor")
        assert FINALIZER not in (claim["metadata"].get("finalizers") or [])
        await h.settled("claim and pod caught up")
        assert not h.cache.dra.inflight and h.cache.dra.counts()["allocatedDevices"] == 0

    run(fake, body)


def test_bind_of_a_dra_pod_bound_elsewhere_releases_the_claim(fake: FakeAPIServer) -> None:
    populate(fake)
    fake.add(node_obj("d2", gpus=None))
    pod = fake.add(with_claims(pod_obj("dra", gpus=0), "c1"))

    async def body(h: Harness) -> None:
        await h.settled("initial sync")
        h.service.filter(filter_body(pod, ["d1"]))
        await h.client.bind("default", "dra", pod["metadata"]["uid"], "d2")  # someone else, unseen yet
        answer = await h.service.bind(bind_body(pod, "d1"))
        assert 'already assigned to node "d2"' in answer["Error"] or "already bound to node d2" in answer["Error"]
        claim = fake.get("ResourceClaim", "c1", "default")
        assert claim is not None and not (claim.get("status") or {}).get("reservedFor")
        await h.settled("caught up")
        # kube-scheduler's retry gets the same answer, and writes nothing.
        writes = len(fake.updates)
        assert "already bound to node d2" in (await h.service.bind(bind_body(pod, "d1")))["Error"]
        assert len(fake.updates) == writes
        assert not h.cache.dra.inflight and h.cache.dra.counts()["allocatedDevices"] == 0

    run(fake, body)


def test_bind_of_a_dra_pod_times_out_after_the_server_applied_it(fake: FakeAPIServer) -> None:
    populate(fake)
    pod = fake.add(with_claims(pod_obj("dra", gpus=0), "c1"))

    async def body(h: Harness) -> None:
        await h.settled("initial sync")
        h.service.filter(filter_body(pod, ["d1"]))
        fake.answer_late(1, 1.0, path_contains="/binding")
        assert "timed out" in (await h.service.bind(bind_body(pod, "d1")))["Error"]
        # The claim stays allocated and reserved for the pod: the Binding may have been applied (it was).
        claim = fake.get("ResourceClaim", "c1", "default")
        assert claim is not None and [r["uid"] for r in claim["status"]["reservedFor"]] == [pod["metadata"]["uid"]]
        assert await h.service.bind(bind_body(pod, "d1")) == {"Error": ""}  # the retry
        await h.settled("pod and claim confirmed by the watch")
        assert not h.cache.dra.inflight and h.cache.dra.counts()["allocatedDevices"] == 1
        assert [b["target"]["name"] for b in fake.bindings] == ["d1"]
        again = fake.get("ResourceClaim", "c1", "default")
        assert again is not None and again["status"]["allocation"] == claim["status"]["allocation"]

    run(fake, body, timeout=0.3)
