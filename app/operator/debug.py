"""The /debug document: what an operator needs to answer "what does the extender believe, and why"."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.service import ExtenderService

__all__ = ["debug_view"]


def _age(now: float, then: float | None) -> float | None:
    return None if then is None else round(now - then, 3)


def debug_view(
    service: ExtenderService, *, node: str | None = None, include_nodes: bool = True, decisions: int = 50
) -> dict[str, Any]:
    cache = service.cache
    now = cache.clock()
    sources = {
        name: {
            "synced": state.synced,
            "connected": state.connected,
            "resourceVersion": state.resource_version,
            "lastEventAgeSeconds": _age(now, state.last_event_at),
            "lastSyncAgeSeconds": _age(now, state.last_sync_at),
            "disconnectedForSeconds": _age(now, state.disconnected_since),
            "restarts": state.restarts,
            "relists": state.relists,
            "lastError": state.last_error,
        }
        for name, state in sorted(cache.sources.items())
    }
    view: dict[str, Any] = {
        "ready": not service.not_ready_reason(),
        "notReadyReason": service.not_ready_reason(),
        "cache": {"sources": sources, "counts": cache.counts()},
        "assumeLedger": [
            {
                "pod": a.pod.key,
                "uid": a.pod.uid,
                "node": a.node,
                "ageSeconds": round(now - a.assumed_at, 3),
                "expiresInSeconds": round(a.expires_at - now, 3),
                "requests": dict(a.pod.resources.requests),
            }
            for a in cache.ledger.values()
        ],
        "draInFlight": cache.dra.inflight_view(),
        "draBindingConditionsPending": service.binding_waits(),
        "boundWithoutExtender": service.bindless.view(),
        "config": service.config.model_dump(mode="json"),
        "decisions": list(service.decisions)[-decisions:] if decisions > 0 else [],
    }
    if include_nodes:
        names = [node] if node is not None else sorted(cache.nodes)
        view["nodes"] = {}
        for name in names:
            info = cache.node_info(name)
            if info is None:
                continue
            usage = cache.usage(name)
            view["nodes"][name] = {
                "allocatable": dict(info.allocatable),
                "requested": dict(info.requested),
                "nonZeroRequested": {"cpu": info.non_zero_cpu, "memory": info.non_zero_memory},
                "pods": info.pod_count,
                "assumedPods": usage.assumed_count,
                "free": {r: info.allocatable.get(r, 0) - info.requested.get(r, 0) for r in service.fit.resources},
            }
            dra = cache.dra.node_view(name)
            if dra is not None:
                view["nodes"][name]["dra"] = dra
    return view
