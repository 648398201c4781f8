"""What the cache's property tests share: a settable clock and the pod events they drive."""

from __future__ import annotations

from app.cluster.cache import ClusterCache
from scoring.framework import PodInfo

POD_EVENTS = ("upsert", "delete", "assume", "forget", "expire")


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def apply_pod_event(cache: ClusterCache, clock: Clock, op: str, pod: PodInfo, node: str) -> bool:
    """Apply one of ``POD_EVENTS`` (an assumption goes to ``node``, or g1); False for any other op."""
    if op == "upsert":
        cache.upsert_pod(pod)
    elif op == "delete":
        cache.delete_pod(pod.uid)
    elif op == "assume":
        cache.assume(pod, node or "g1")
    elif op == "forget":
        cache.forget(pod.uid)
    elif op == "expire":
        clock.now += 61  # past the tests' 60 s assume TTL
        cache.expire()
    else:
        return False
    return True
