"""filter_caught_up: when a rejection may come from a cache that lags kube-scheduler's, filter waits for
the cache to change and judges once more (seen on a real cluster: a pod retried because another was
deleted, rejected on the not-yet-updated count, then left waiting for the next cluster event)."""

from __future__ import annotations

import asyncio
from typing import Any

from app.cluster.objects import pod_from_obj
from app.service import ExtenderService
from tests.conftest import filter_body, make_service, node_obj, pod_obj

CATCH_UP = "kube_gpu_extender_filter_catch_up_total"


def _service(catch_up: float = 5.0, **managed: Any) -> tuple[ExtenderService, dict[str, Any]]:
    """One 2-GPU node, full with one bound pod (returned)."""
    holder = pod_obj("holder", gpus=2, node="g1")
    resources = [{"name": "nvidia.com/gpu", **managed}] if managed else ["nvidia.com/gpu"]
    config = {"managedResources": resources, "cache": {"catchUpSeconds": catch_up}}
    return make_service([node_obj("g1", gpus=2)], [holder], config), holder


def _waits(service: ExtenderService, outcome: str) -> float:
    return service.metrics.registry.get_sample_value(CATCH_UP, {"outcome": outcome}) or 0.0


def test_a_shortage_kube_scheduler_does_not_see_waits_for_the_deletion_it_saw() -> None:
    """kube-scheduler counts nvidia.com/gpu too and sent g1: it has seen the holder go; we catch up."""
    service, holder = _service()
    body = filter_body(pod_obj("p", gpus=1), ["g1"])

    async def run() -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        loop.call_later(0.01, service.cache.delete_pod, holder["metadata"]["uid"])  # the watch delivers it
        return await service.filter_caught_up(body)

    answer = asyncio.run(run())
    assert answer["NodeNames"] == ["g1"]
    assert _waits(service, "changed") == 1


def test_a_resource_kube_scheduler_ignores_is_not_a_sign_of_lag() -> None:
    service, holder = _service(ignoredByScheduler=True)
    body = filter_body(pod_obj("p", gpus=1), ["g1"])

    async def run() -> dict[str, Any]:
        asyncio.get_running_loop().call_later(0.01, service.cache.delete_pod, holder["metadata"]["uid"])
        return await service.filter_caught_up(body)

    answer = asyncio.run(run())
    assert answer["NodeNames"] == []  # answered at once, on the count it had
    assert _waits(service, "changed") == _waits(service, "unchanged") == 0


def test_a_pod_retried_with_nothing_changed_waits_once_per_change() -> None:
    """Rejected, then retried with no change in the cache: kube-scheduler saw something we have not."""
    service, _ = _service(catch_up=0.01, ignoredByScheduler=True)  # the waits time out: nothing will come
    first, second = pod_obj("a", gpus=1), pod_obj("b", gpus=1)

    async def run() -> None:
        for pod in (first, second):
            await service.filter_caught_up(filter_body(pod, ["g1"]))  # first rejections: no wait
        assert _waits(service, "unchanged") == 0
        await service.filter_caught_up(filter_body(first, ["g1"]))  # retried, unchanged: one wait
        assert _waits(service, "unchanged") == 1
        await service.filter_caught_up(filter_body(second, ["g1"]))  # same generation: no second wait
        await service.filter_caught_up(filter_body(first, ["g1"]))
        assert _waits(service, "unchanged") == 1
        service.cache.upsert_pod(pod_from_obj(pod_obj("elsewhere", node="g2")))  # the cache moves
        await service.filter_caught_up(filter_body(first, ["g1"]))  # rejected after the change: no wait
        assert _waits(service, "unchanged") == 1
        await service.filter_caught_up(filter_body(first, ["g1"]))  # retried again, unchanged since
        assert _waits(service, "unchanged") == 2

    asyncio.run(run())


def test_passing_pods_never_wait() -> None:
    service, _ = _service()
    answer = asyncio.run(service.filter_caught_up(filter_body(pod_obj("cpu-only"), ["g1"])))
    assert answer["NodeNames"] == ["g1"]
    assert _waits(service, "changed") == _waits(service, "unchanged") == 0


def test_a_node_kube_scheduler_knows_and_the_cache_not_yet_waits_for_it() -> None:
    """Nodes added and a pod created at once (seen on a real cluster): kube-scheduler's informer had
    the node, our watch delivered it a moment later."""
    from app.cluster.objects import node_from_obj

    service, _ = _service()
    body = filter_body(pod_obj("p", gpus=1), ["fresh"])

    async def run() -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        loop.call_later(0.01, service.cache.upsert_node, node_from_obj(node_obj("fresh", gpus=8)))
        return await service.filter_caught_up(body)

    answer = asyncio.run(run())
    assert answer["NodeNames"] == ["fresh"]
    assert _waits(service, "changed") == 1
