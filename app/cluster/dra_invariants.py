"""``DraState.check_invariants``: the incrementally kept device maps recomputed from scratch and
compared (the tests and ``bench.overcommit`` call it after every change they make)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from allocator import DeviceID, allocated_device_ids, allocated_shares
from app.cluster.dra_extended import FREE
from app.cluster.dra_inuse import Shares, add_shares

if TYPE_CHECKING:
    from app.cluster.dra import DraState

__all__ = ["check"]


def check(state: DraState) -> None:
    """Raise ``AssertionError`` naming the first map that drifted from the claims and in-flight binds."""
    claimed: dict[DeviceID, str] = {}
    for claim in state.claims.values():
        if claim.allocation is not None:
            for device in allocated_device_ids(claim.allocation):
                claimed[device] = claim.key
    if claimed != state._claim_devices:
        raise AssertionError(f"claimed devices drifted: have {state._claim_devices}, want {claimed}")
    inflight = {d: e.pod_uid for e in state.inflight.values() for d in e.devices}
    if inflight != state._inflight_devices:
        raise AssertionError(f"in-flight devices drifted: have {state._inflight_devices}, want {inflight}")
    claim_shares: Shares = {}
    for claim in state.claims.values():
        if claim.allocation is not None:
            add_shares(claim_shares, claim.key, allocated_shares(claim.allocation))
    if claim_shares != state._claim_shares:
        raise AssertionError(f"claimed shares drifted: have {state._claim_shares}, want {claim_shares}")
    inflight_shares: Shares = {}
    for entry in state.inflight.values():
        add_shares(inflight_shares, entry.pod_uid, entry.shares)
    if inflight_shares != state._inflight_shares:
        raise AssertionError(f"in-flight shares drifted: have {state._inflight_shares}, want {inflight_shares}")
    state.extended.check(state.classes.values(), state._node_refs, state.slices, state.selectors, state._holders)
    state.fast.check(state._holders)
    devices = {*claimed, *inflight, *claim_shares, *inflight_shares}
    held_now = {d: h for d in devices if (h := state._holders(d)) != FREE}
    if held_now != state._held:
        raise AssertionError(f"device holdings drifted: have {state._held}, want {held_now}")
