"""Pods bound without the extender's /bind (bindVerb unset, or an ignorable extender whose bind failed),
against the fake API server: someone else's Binding goes through the API, the watch shows it, and
the metric, /readyz's detail, /debug and the log say so; pods /bind bound, and pods never filtered,
never count."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from app.cluster.bindless import LOG_INTERVAL, BindlessPods
from app.cluster.cache import ClusterCache
from app.cluster.objects import pod_from_obj
from app.operator.metrics import Metrics
from app.service import Binder
from tests.app.apiharness import Harness, eventually
from tests.conftest import bind_body, filter_body, node_obj, pod_obj
from tests.fakeapi import FakeAPIServer

METRIC = "kube_gpu_extender_pods_bound_without_extender_total"


def reported(h: Harness) -> float:
    return h.metrics.registry.get_sample_value(METRIC) or 0.0


async def default_binder(h: Harness, pod: dict[str, Any], node: str) -> None:
    """kube-scheduler's own binder: a Binding through the API, the extender not asked."""
    meta = pod["metadata"]
    await h.client.bind(meta["namespace"], meta["name"], meta["uid"], node)


async def bound_on(h: Harness, pod: dict[str, Any], node: str) -> None:
    uid = pod["metadata"]["uid"]
    await eventually(lambda: uid in h.cache.pods and h.cache.pods[uid].node_name == node, f"watch shows {uid} bound")


class HeldBinder:
    """Binds through the API at once, then holds the answer until released: the watch event arrives
    while /bind is still in flight."""

    def __init__(self, inner: Binder) -> None:
        self.inner = inner
        self.release = asyncio.Event()

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        await self.inner.bind(namespace, name, uid, node)
        await self.release.wait()


def test_a_filtered_pod_bound_by_someone_else_is_reported(
    fake: FakeAPIServer, caplog: pytest.LogCaptureFixture
) -> None:
    fake.add(node_obj("g1", gpus=8))
    fake.add(node_obj("g2", gpus=8))
    web = fake.add(pod_obj("web", cpu="2"))  # no GPU: kube-scheduler never sends it (managedResources)
    train = fake.add(pod_obj("train", gpus=2))
    tune = fake.add(pod_obj("tune", gpus=1))

    async def body() -> None:
        h = Harness(fake)
        tasks = h.start()
        try:
            await eventually(lambda: h.service.not_ready_reason() == "", "initial sync")
            await default_binder(h, web, "g1")  # never filtered: not ours to judge
            await bound_on(h, web, "g1")
            answer = (await h.http.post("/filter", content=filter_body(train, ["g1", "g2"]))).json()
            assert answer["NodeNames"] == ["g1", "g2"]
            await default_binder(h, train, "g2")  # bindVerb unset: kube-scheduler binds it itself
            await eventually(lambda: reported(h) == 1, "the bind-less pod counted")
            assert h.cache.usage("g2").requested["nvidia.com/gpu"] == 2  # the watch counts it, too late

            status, ready = await h.readyz()
            assert status == 200 and ready["ready"] is True
            assert ready["detail"].startswith(
                "ready; warning: 1 pod bound without the extender's /bind (bindVerb unset?) — last default/train on g2 "
            )
            assert f"{METRIC} 1.0" in (await h.http.get("/metrics")).text
            section = (await h.http.get("/debug", params={"nodes": "false"})).json()["boundWithoutExtender"]
            assert section["count"] == 1
            (entry,) = section["recent"]
            assert (entry["pod"], entry["uid"], entry["node"]) == ("default/train", train["metadata"]["uid"], "g2")
            assert entry["time"] > 0 and entry["ageSeconds"] >= 0

            # A second one within the minute: counted and listed first, but no second warning line.
            h.service.filter(filter_body(tune, ["g1"]))
            await default_binder(h, tune, "g1")
            await eventually(lambda: reported(h) == 2, "the second bind-less pod counted")
            recent = (await h.http.get("/debug", params={"nodes": "false"})).json()["boundWithoutExtender"]["recent"]
            assert [r["pod"] for r in recent] == ["default/tune", "default/train"]
            assert (await h.readyz())[1]["detail"].startswith("ready; warning: 2 pods bound without")
        finally:
            await h.stop(tasks)

    with caplog.at_level(logging.WARNING, logger="kube_gpu_extender.bindless"):
        asyncio.run(body())
    (warning,) = [r for r in caplog.records if r.name == "kube_gpu_extender.bindless"]
    assert warning.levelno == logging.WARNING
    assert "1 pod(s) bound without the extender's /bind" in warning.getMessage()
    assert "default/train on node g2" in warning.getMessage()


def test_pods_bound_through_bind_never_count(fake: FakeAPIServer) -> None:
    fake.add(node_obj("g1", gpus=8))
    early, late, plain, failed = (fake.add(pod_obj(name, gpus=1)) for name in ("early", "late", "plain", "failed"))

    async def body() -> None:
        h = Harness(fake)
        tasks = h.start()
        try:
            await eventually(lambda: h.service.not_ready_reason() == "", "initial sync")
            for pod in (early, late, plain, failed):
                h.service.filter(filter_body(pod, ["g1"]))

            # Through the route, as kube-scheduler calls it.
            assert (await h.http.post("/bind", content=bind_body(plain, "g1"))).json() == {"Error": ""}
            await bound_on(h, plain, "g1")
            assert reported(h) == 0  # judged when the watch showed it bound (the cache's PodChanged event)

            # The watch shows the pod bound while /bind has not answered yet.
            held = HeldBinder(h.service.binder)
            h.service.binder = held
            binding = asyncio.create_task(h.service.bind(bind_body(early, "g1")))
            await bound_on(h, early, "g1")
            assert not binding.done() and reported(h) == 0
            held.release.set()
            assert await binding == {"Error": ""}
            h.service.binder = held.inner

            # The watch shows the pod bound only after /bind answered (the pod watch lags behind).
            pods = h.reflectors.index(next(r for r in h.reflectors if r.resource.name == "pods"))
            tasks[pods].cancel()
            await asyncio.gather(tasks[pods], return_exceptions=True)
            assert await h.service.bind(bind_body(late, "g1")) == {"Error": ""}
            assert h.cache.pods[late["metadata"]["uid"]].node_name == ""  # not seen bound yet
            tasks[pods] = asyncio.create_task(h.reflectors[pods].run())
            await bound_on(h, late, "g1")
            assert reported(h) == 0

            # /bind failed (the API refused: the assumption is dropped); an ignorable extender lets
            # kube-scheduler's default binder bind it on the same node: that one counts, and only it.
            fake.fail_next(1, status=500, path_contains="/pods/failed/binding")
            error = (await h.http.post("/bind", content=bind_body(failed, "g1"))).json()["Error"]
            assert "binding pod default/failed to node g1 failed" in error
            await default_binder(h, failed, "g1")
            await eventually(lambda: reported(h) == 1, "the fallback binder's pod counted")
            await h.settled("every bind confirmed")
            section = (await h.http.get("/debug", params={"nodes": "false"})).json()["boundWithoutExtender"]
            assert section["count"] == 1 and [r["pod"] for r in section["recent"]] == ["default/failed"]
        finally:
            await h.stop(tasks)

    asyncio.run(body())


# ---------------------------------------------------------------------------- the detector alone
def test_warnings_at_most_once_a_minute_and_memory_is_bounded(caplog: pytest.LogCaptureFixture) -> None:
    now = [1000.0]
    cache = ClusterCache(clock=lambda: now[0])
    metrics = Metrics()
    pods = BindlessPods(cache, metrics, wall_clock=lambda: 5.0, limit=3)

    def bound_elsewhere(name: str, advance: float) -> None:
        pod = pod_from_obj(pod_obj(name, gpus=1, uid=name))
        cache.upsert_pod(pod)
        pods.filtered(pod)
        now[0] += advance
        cache.upsert_pod(pod_from_obj(pod_obj(name, gpus=1, uid=name, node="g1")))

    with caplog.at_level(logging.WARNING, logger="kube_gpu_extender.bindless"):
        bound_elsewhere("a", 1)  # the first: warned at once
        bound_elsewhere("b", 30)
        bound_elsewhere("c", LOG_INTERVAL - 31)  # 59 s after the first warning: still quiet
        bound_elsewhere("d", 1)  # a minute on: warned again, with what happened meanwhile
    first, second = (r.getMessage() for r in caplog.records)
    assert first.startswith("1 pod(s) bound without the extender's /bind (1 since the last warning), last default/a")
    assert second.startswith("4 pod(s) bound without the extender's /bind (3 since the last warning), last default/d")
    assert metrics.registry.get_sample_value(METRIC) == 4
    assert pods.view()["recent"][0] == {"pod": "default/d", "uid": "d", "node": "g1", "time": 5.0, "ageSeconds": 0.0}
    assert pods.warning() == "4 pods bound without the extender's /bind (bindVerb unset?) — last default/d on g1 0s ago"

    # Bounded: only the last ``limit`` filtered pods are remembered; an older one bound elsewhere is missed.
    for name in ("e", "f", "g", "h"):
        pod = pod_from_obj(pod_obj(name, gpus=1, uid=name))
        cache.upsert_pod(pod)
        pods.filtered(pod)
    assert len(pods._filtered) == 3
    cache.upsert_pod(pod_from_obj(pod_obj("e", gpus=1, uid="e", node="g1")))
    assert pods.count == 4
    cache.upsert_pod(pod_from_obj(pod_obj("h", gpus=1, uid="h", node="g1")))
    assert pods.count == 5
    # A filtered pod deleted before anyone bound it is forgotten.
    cache.delete_pod("g")
    assert "g" not in pods._filtered
