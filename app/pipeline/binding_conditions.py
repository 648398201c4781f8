"""The binding-condition wait of /bind (kube-scheduler's DynamicResources PreBind, DRADeviceBindingConditions).

After PreBind wrote the pod's claims, a device allocated with ``bindingConditions`` is not ready
until its driver (or a controller) sets every one of them ``True`` in the claim's
``status.devices[].conditions``. Upstream polls every 5 s for up to 600 s; /bind is one HTTP call
from kube-scheduler bounded by the extender's ``httpTimeout``, so here the wait is bounded by
``dra.bindingTimeoutSeconds`` (default 3 s, below the 5 s shipped timeout) and driven by the claim
watch: it re-reads the claims from the cache whenever a claim changes (``DraState.claim_changes``),
never on a timer.

The answer is "" (ready: create the Binding), or why not: a binding failure condition is ``True``,
or the deadline passed with conditions still pending. Either way /bind then undoes its writes (the
allocation is removed, the devices are free again) and answers an ``Error``, so kube-scheduler
retries the pod, possibly on other devices.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from allocator import ResourceClaim
from allocator.binding import has_binding_conditions, pods_binding_state
from app.cluster.dra import DraState

__all__ = ["needs_wait", "wait_for_binding_conditions"]

log = logging.getLogger("kube_gpu_extender.dra")


def needs_wait(claims: Sequence[ResourceClaim]) -> bool:
    """Whether any of the pod's claims, as written, has a device with binding conditions."""
    return any(has_binding_conditions(claim) for claim in claims)


async def wait_for_binding_conditions(
    state: DraState,
    keys: Sequence[str],
    timeout: float,
    clock: Callable[[], float] | None = None,
) -> str:
    """Wait until the claims ``keys`` (as the cache has them) are ready for binding: "" when they are,
    else the reason they are not (a failure condition, a claim gone, or the timeout)."""
    now = clock or asyncio.get_running_loop().time
    deadline = now() + timeout
    while True:
        version = state.claim_changes.version
        claims = []
        for key in keys:
            claim = state.claims.get(key)
            if claim is None:
                return f"resourceclaim {key} disappeared while waiting for its binding conditions"
            claims.append(claim)
        verdict = pods_binding_state(claims)
        if verdict.failed:
            return verdict.failed
        if verdict.ready:
            return ""
        remaining = deadline - now()
        if remaining <= 0 or not await state.claim_changes.changed_after(version, remaining):
            pending = ", ".join(verdict.pending)
            return f"binding conditions not met within {timeout:g}s (dra.bindingTimeoutSeconds): {pending}"
