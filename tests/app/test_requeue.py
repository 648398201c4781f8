"""The requeuer: pods filter left with no node are asked for again (a status condition kube-scheduler
sees as an update) once the cache frees capacity and kube-scheduler has not retried them itself."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app.cluster.cache import ClusterCache
from app.cluster.kube import ApiError
from app.cluster.objects import claim_from_obj, node_from_obj, pod_from_obj, slice_from_obj
from app.cluster.requeue import (
    CONDITION_TYPE,
    MAX_INTERVAL,
    MAX_PER_ROUND,
    ApiRetryRequester,
    Held,
    Requeuer,
)
from app.service import ExtenderService
from tests.app.cache_ops import Clock
from tests.conftest import (
    DRIVER,
    claim_obj,
    filter_body,
    gpu_device,
    labelled,
    make_service,
    node_obj,
    pod_obj,
    slice_obj,
)


class Requests:
    """A RetryRequester that records the pods asked for; ``fail`` makes it raise for a pod's key."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.fail: dict[str, Exception] = {}
        self.arrived = asyncio.Event()

    async def request_retry(self, held: Held) -> None:
        if held.key in self.fail:
            raise self.fail[held.key]
        self.asked.append(held.key)
        self.arrived.set()


def _setup(after: float = 1.0) -> tuple[ExtenderService, Requeuer, Requests, Clock, list[tuple[str, str]]]:
    """One full 2-GPU node (pod "holder"); a requeuer on the service's cache with a fake clock."""
    service = make_service([node_obj("g1", gpus=2)], [pod_obj("holder", gpus=2, node="g1", uid="holder")])
    clock = Clock(100.0)
    service.cache.clock = clock
    requests = Requests()
    outcomes: list[tuple[str, str]] = []
    requeuer = Requeuer(
        service.cache, requests, after=after, on_request=lambda held, outcome, _e: outcomes.append((held.key, outcome))
    )
    service.requeuer = requeuer
    return service, requeuer, requests, clock, outcomes


def _reject(service: ExtenderService, name: str, gpus: int = 1) -> dict[str, Any]:
    pod = pod_obj(name, gpus=gpus, uid=name)
    assert service.filter(filter_body(pod, ["g1"]))["NodeNames"] == []
    return pod


def _free(service: ExtenderService) -> None:
    service.cache.delete_pod("holder")


def test_a_pod_rejected_before_capacity_was_freed_is_asked_for_once_per_doubling_interval() -> None:
    service, requeuer, requests, clock, outcomes = _setup()
    _reject(service, "p")
    clock.now += 1
    _free(service)
    freed_at = clock.now
    (held,) = requeuer.due(freed_at)
    assert held.key == "default/p"
    asyncio.run(requeuer.request_due(freed_at))
    assert requests.asked == ["default/p"] and outcomes == [("default/p", "requested")]
    assert requeuer.due(freed_at) == []  # asked for: not again within the interval (1 s)
    intervals = []
    for _ in range(12):
        clock.now += MAX_INTERVAL  # past any interval: due again while it stays held
        assert asyncio.run(requeuer.request_due(clock.now)) == 1
        intervals.append(held.interval)
    assert intervals[:4] == [2.0, 4.0, 8.0, 16.0]
    assert intervals[-1] == MAX_INTERVAL


def test_a_pod_rejected_after_the_freeing_is_not_asked_for() -> None:
    service, requeuer, _requests, clock, _ = _setup()
    _free(service)
    freed_at = clock.now
    clock.now += 0.5
    _reject(service, "big", gpus=4)  # judged on the freed count: kube-scheduler has nothing to retry for
    assert requeuer.due(freed_at) == []
    assert len(requeuer) == 1


def test_passing_binding_or_deleting_drops_the_pod() -> None:
    service, requeuer, _requests, clock, _ = _setup()
    for name in ("passes", "bound", "deleted"):
        _reject(service, name)
    _free(service)
    assert service.filter(filter_body(pod_obj("passes", gpus=1, uid="passes"), ["g1"]))["NodeNames"] == ["g1"]
    service.cache.upsert_pod(pod_from_obj(pod_obj("bound", gpus=1, node="g1", uid="bound")))
    service.cache.upsert_pod(pod_from_obj(pod_obj("deleted", gpus=1, uid="deleted")))  # still pending: kept
    assert len(requeuer) == 1
    service.cache.delete_pod("deleted")
    assert len(requeuer) == 0
    assert requeuer.due(clock.now + 1) == []


def test_a_gone_pod_is_dropped_and_a_failed_write_retried_later() -> None:
    service, requeuer, requests, clock, outcomes = _setup()
    _reject(service, "gone")
    _reject(service, "flaky")
    clock.now += 1
    _free(service)
    requests.fail = {"default/gone": LookupError("404"), "default/flaky": ApiError("timed out")}
    freed_at = clock.now
    asyncio.run(requeuer.request_due(freed_at))
    assert sorted(outcomes) == [("default/flaky", "failed"), ("default/gone", "gone")]
    assert requeuer.due(freed_at) == []  # within its interval
    clock.now += 1
    assert [h.key for h in requeuer.due(freed_at)] == ["default/flaky"]


def test_a_round_asks_for_at_most_max_per_round() -> None:
    service, requeuer, _requests, clock, _ = _setup()
    for i in range(MAX_PER_ROUND + 5):
        _reject(service, f"p{i}")
    clock.now += 1
    _free(service)
    assert asyncio.run(requeuer.request_due(clock.now)) == MAX_PER_ROUND
    assert len(requeuer.due(clock.now)) == 5


def test_the_loop_asks_after_the_cache_frees_capacity() -> None:
    service, requeuer, requests, clock, _ = _setup(after=0.01)
    _reject(service, "p")
    clock.now += 1

    async def run() -> None:
        task = asyncio.create_task(requeuer.run())
        await asyncio.sleep(0)  # the loop takes the current version
        clock.now += 1
        _free(service)
        await asyncio.wait_for(requests.arrived.wait(), 5.0)
        task.cancel()

    asyncio.run(run())
    assert requests.asked == ["default/p"]


# ---------------------------------------------------------------------- what frees capacity
def test_the_freed_signal_moves_on_frees_only() -> None:
    service = make_service([node_obj("g1", gpus=2)], [pod_obj("holder", gpus=1, node="g1")])
    cache = service.cache

    def bumps(change: Any) -> bool:
        before = cache.freed.version
        change()
        return cache.freed.version != before

    assert not bumps(lambda: cache.upsert_pod(pod_from_obj(pod_obj("more", gpus=1, node="g1", uid="more"))))
    assert not bumps(lambda: cache.upsert_pod(pod_from_obj(pod_obj("pending", gpus=1, uid="pending"))))
    assert not bumps(lambda: cache.upsert_node(node_from_obj(node_obj("g1", gpus=2))))  # the same node again
    assert bumps(lambda: cache.upsert_node(node_from_obj(node_obj("g1", gpus=4))))  # grew
    assert bumps(lambda: cache.upsert_node(node_from_obj(labelled("g1", {"zone": "b"}, gpus=4))))  # relabelled
    assert bumps(lambda: cache.upsert_node(node_from_obj(node_obj("g2"))))  # added
    assert bumps(lambda: cache.delete_pod("more"))
    assert not bumps(lambda: cache.delete_pod("pending"))  # counted nowhere


# ---------------------------------------------------------------------- the API write
class FakeClient:
    def __init__(self, error: ApiError | None = None) -> None:
        self.error = error
        self.patches: list[tuple[str, dict[str, Any]]] = []

    async def strategic_patch(self, path: str, patch: dict[str, Any]) -> dict[str, Any]:
        if self.error is not None:
            raise self.error
        self.patches.append((path, patch))
        return {}


def test_the_request_is_a_strategic_patch_of_the_status_with_the_uid() -> None:
    client = FakeClient()
    requester = ApiRetryRequester(client, wall_clock=lambda: 1795588330.5)  # type: ignore[arg-type]
    asyncio.run(requester.request_retry(Held("team", "p", "uid-1", 0.0)))
    ((path, patch),) = client.patches
    assert path == "/api/v1/namespaces/team/pods/p/status"
    assert patch["metadata"] == {"uid": "uid-1"}
    (condition,) = patch["status"]["conditions"]
    assert condition["type"] == CONDITION_TYPE and condition["status"] == "True"
    assert condition["lastProbeTime"] == "2026-11-25T06:32:10Z"


@pytest.mark.parametrize("status", [404, 409, 422])
def test_a_missing_or_replaced_pod_is_lookup_error(status: int) -> None:
    requester = ApiRetryRequester(FakeClient(ApiError("no", status=status)))  # type: ignore[arg-type]
    with pytest.raises(LookupError):
        asyncio.run(requester.request_retry(Held("team", "p", "uid-1", 0.0)))


def test_other_api_errors_propagate() -> None:
    requester = ApiRetryRequester(FakeClient(ApiError("busy", status=429)))  # type: ignore[arg-type]
    with pytest.raises(ApiError):
        asyncio.run(requester.request_retry(Held("team", "p", "uid-1", 0.0)))


def test_devices_freed_move_the_signal_and_devices_taken_do_not() -> None:
    cache = ClusterCache()

    def claim(version: int, allocated: bool) -> Any:
        obj = claim_obj("c", uid="c")
        obj["metadata"]["resourceVersion"] = str(version)
        if allocated:
            result = {"request": "gpu", "driver": DRIVER, "pool": "g1", "device": "gpu-0"}
            obj["status"] = {"allocation": {"devices": {"results": [result]}}}
        return claim_from_obj(obj)

    def bumps(change: Any) -> bool:
        before = cache.freed.version
        change()
        return cache.freed.version != before

    assert not bumps(lambda: cache.dra.upsert_claim(claim(1, allocated=False)))
    assert not bumps(lambda: cache.dra.upsert_claim(claim(2, allocated=True)))
    assert bumps(lambda: cache.dra.upsert_claim(claim(3, allocated=False)))  # deallocated
    cache.dra.upsert_claim(claim(4, allocated=True))
    assert bumps(lambda: cache.dra.delete_claim("default/c"))
    assert bumps(lambda: cache.dra.upsert_slice(slice_from_obj(slice_obj("s", [gpu_device("gpu-0")], node="g1"))))


def test_a_slice_republished_as_it_was_changes_nothing() -> None:
    """A ResourceSlice update with the same content (new resourceVersion: a metadata update) frees no
    capacity and keeps the DRA state's derived views; a changed device list counts."""
    cache = ClusterCache()

    def published(version: int, *devices: str) -> Any:
        obj = slice_obj("s", [gpu_device(d) for d in devices], node="g1")
        obj["metadata"]["resourceVersion"] = str(version)
        return slice_from_obj(obj)

    cache.dra.upsert_slice(published(1, "gpu-0"))
    before, slice_before = cache.freed.version, cache.dra.slices.get("s")
    cache.dra.fast.tables["marker"] = None  # type: ignore[index]  # dropped by any invalidation
    cache.dra.upsert_slice(published(2, "gpu-0"))
    assert cache.freed.version == before and "marker" in cache.dra.fast.tables
    assert cache.dra.slices.get("s") is slice_before
    cache.dra.upsert_slice(published(3, "gpu-0", "gpu-1"))
    assert cache.freed.version != before and "marker" not in cache.dra.fast.tables
    assert [d.name for d in cache.dra.slices.get("s").devices] == ["gpu-0", "gpu-1"]  # type: ignore[union-attr]
