"""What /debug shows of the DRA state: a node's pools, devices, holders, shares and counters, and the
allocations in flight."""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, Any

from allocator import DeviceID

if TYPE_CHECKING:
    from allocator.counters import PoolCounters
    from app.cluster.dra import DraState

__all__ = ["inflight_view", "node_view", "number", "shares"]


def number(value: Fraction) -> int | float:
    """A counter or capacity amount for JSON: an integer when it is one."""
    return value.numerator if value.denominator == 1 else float(value)


def node_view(state: DraState, name: str) -> dict[str, Any] | None:
    """A node's pools in allocation order with their priorities and who holds each device."""
    ref = state._node_refs.get(name)
    if ref is None:
        return None
    pools = state.slices.pools_for(ref)
    if not pools.gathered:
        return None
    free = allocated = 0
    out = []
    for pool in pools.gathered:
        slices = []
        for s in pool.slices:
            devices = []
            for device in s.devices:
                device_id = DeviceID(pool.driver, pool.name, device.name)
                holder = state.holder(device_id)
                entry: dict[str, Any] = {"name": device.name, "holder": holder or None}
                if device.capacity:
                    entry["capacity"] = {k: c.text for k, c in device.capacity.items()}
                if device.allow_multiple_allocations:
                    entry["shares"] = state.shares(device_id)
                    holder = holder or ("shared" if entry["shares"] else "")
                if device.consumes_counters:
                    entry["consumesCounters"] = {
                        use.counter_set: {k: number(v) for k, v in use.counters.items()}
                        for use in device.consumes_counters
                    }
                if device.unsupported:
                    entry["neverAllocated"] = device.unsupported
                elif pool.usable:
                    if holder:
                        allocated += 1
                    else:
                        free += 1
                devices.append(entry)
            slices.append({"name": s.name, "priority": s.priority, "devices": devices})
        view: dict[str, Any] = {
            "driver": pool.driver,
            "pool": pool.name,
            "priority": pool.priority,
            "generation": pool.generation,
            "problem": pool.problem or None,
            "slices": slices,
        }
        if pool.counters is not None:
            view["counters"] = _counter_view(state, pool.counters)
        out.append(view)
    return {"freeDevices": free, "allocatedDevices": allocated, "pools": out}


def _counter_view(state: DraState, counters: PoolCounters) -> dict[str, Any]:
    """Per counter set and counter: its total and what allocated and in-flight devices leave."""
    allocated, shared = state.allocated_view(), state.shared_view()
    left = counters.available(lambda d: d in allocated or d in shared)
    return {
        name: {c: {"total": number(v), "available": number(left[(name, c)])} for c, v in values.items()}
        for name, values in counters.sets.items()
    }


def shares(state: DraState, device: DeviceID) -> list[dict[str, Any]]:
    """Who holds which share of a device: claims first, then in-flight binds (by pod)."""
    out = []
    for held, what in ((state._claim_shares, "claim"), (state._inflight_shares, "in flight for pod")):
        for (holder, share_id), consumed in sorted((held.get(device) or {}).items()):
            name = state.inflight[holder].pod if what != "claim" and holder in state.inflight else holder
            entry: dict[str, Any] = {"holder": f"{what} {name}", "shareID": share_id}
            if consumed is not None:
                entry["consumed"] = {k: number(v) for k, v in consumed.items()}
            out.append(entry)
    return out


def inflight_view(state: DraState) -> list[dict[str, Any]]:
    now = state.clock()
    return [
        {
            "pod": e.pod,
            "uid": e.pod_uid,
            "node": e.node,
            "claims": sorted(e.claims),
            "devices": [str(d) for d in e.devices],
            "shares": [f"{share.device}/{share.share_id}" for share in e.shares],
            "ageSeconds": round(now - e.started_at, 3),
            "expiresInSeconds": round(e.expires_at - now, 3),
        }
        for e in state.inflight.values()
    ]
