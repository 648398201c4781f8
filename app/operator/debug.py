"""The /debug document: what an operator needs to answer "what does the extender believe, and why"."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.service import ExtenderService

__all__ = ["debug_view", "node_view", "single_node_view"]


def _age(now: float, then: float | None) -> float | None:
    return None if then is None else round(now - then, 3)


def _ledger(service: ExtenderService, now: float) -> list[dict[str, Any]]:
    return [
        {
            "pod": a.pod.key,
            "uid": a.pod.uid,
            "node": a.node,
            "ageSeconds": round(now - a.assumed_at, 3),
            "expiresInSeconds": round(a.expires_at - now, 3),
            "requests": dict(a.pod.resources.requests),
            "heldFor": a.held_for,  # a gang member's hold on its planned node ("" for a /bind's assumption)
        }
        for a in service.cache.ledger.values()
    ]


def debug_view(service: ExtenderService, *, include_nodes: bool = True, decisions: int = 50) -> dict[str, Any]:
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
        "assumeLedger": _ledger(service, now),
        "draInFlight": cache.dra.inflight_view(),
        "draBindingConditionsPending": service.binding_waits(),
        "boundWithoutExtender": service.bindless.view(),
        "gangs": service.gangs_view(),
        "config": service.config.model_dump(mode="json"),
        "decisions": list(service.decisions)[-decisions:] if decisions > 0 else [],
    }
    if include_nodes:
        view["nodes"] = {}
        for name in sorted(cache.nodes):
            shown = node_view(service, name)
            if shown is not None:
                view["nodes"][name] = shown
    return view


def node_view(service: ExtenderService, name: str) -> dict[str, Any] | None:
    """What the extender counts on one node (``/debug``'s ``nodes.NAME``); None when not in the cache."""
    cache = service.cache
    info = cache.node_info(name)
    if info is None:
        return None
    usage = cache.usage(name)
    view: dict[str, Any] = {
        "allocatable": dict(info.allocatable),
        "requested": dict(info.requested),
        "nonZeroRequested": {"cpu": info.non_zero_cpu, "memory": info.non_zero_memory},
        "pods": info.pod_count,
        "assumedPods": usage.assumed_count,
        "free": {r: info.allocatable.get(r, 0) - info.requested.get(r, 0) for r in service.fit.resources},
    }
    dra = cache.dra.node_view(name)
    if dra is not None:
        view["dra"] = dra
    return view


def single_node_view(service: ExtenderService, name: str) -> dict[str, Any] | None:
    """``/debug?node=NAME``: that node alone, with the assume-ledger entries on it."""
    shown = node_view(service, name)
    if shown is None:
        return None
    now = service.cache.clock()
    assumed = [entry for entry in _ledger(service, now) if entry["node"] == name]
    return {"name": name, **shown, "assumed": assumed}
