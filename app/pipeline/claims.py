"""DRA claims: a pod's ResourceClaims allocated on the node it binds to (KEP-5773 priority order).

Filter runs DynamicResources on the nodes still passing (it is the most expensive check); reserve
chooses the devices and holds them in flight; pre-bind writes the claims, then waits for the binding
conditions of their devices (if any); unreserve gives back what was written when the wait or the
Binding fails for certain.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from allocator import AllocationError
from allocator.binding import binding_state
from app.cluster.writes import ClaimWriteError
from app.pipeline.binding_conditions import needs_wait, wait_for_binding_conditions
from app.pipeline.dynamicresources import ClaimWriter, DynamicResources, FastVerdicts, Reservation
from app.pipeline.framework import BindCycle, FilterCycle, FilterError, Participant, Refusal
from scoring.framework import Code, PodInfo, Status
from scoring.verdicts import CODES

UNRESOLVABLE = CODES.index(Code.UNSCHEDULABLE_AND_UNRESOLVABLE)

__all__ = ["DraClaims"]


class DraClaims(Participant):
    name = "dra"

    def __init__(self, dra: DynamicResources, writer: ClaimWriter, binding_timeout: float = 3.0) -> None:
        self.dra = dra
        self.writer = writer
        self.binding_timeout = binding_timeout  # dra.bindingTimeoutSeconds
        # pod UID -> what /debug shows of a /bind waiting for binding conditions
        self.waiting: dict[str, dict[str, Any]] = {}

    def applies(self, pod: PodInfo) -> bool:
        # Extended resources only where a DeviceClass serves one of them (or an earlier bind left a
        # special claim to delete): a GPU pod of a device-plugin cluster has nothing here.
        if pod.claims or pod.claims_pending:
            return True
        return bool(pod.extended_requests) and self.dra.extended_applies(pod)

    def filter(self, cycle: FilterCycle) -> None:
        pod = cycle.pod
        try:
            claims = self.dra.prefilter(pod)
            if isinstance(claims, Status):
                for position in cycle.passing():
                    cycle.verdicts.set(position, claims)
                return
            positions: list[int] | None = None
            if not claims.allocated and not claims.unallocated:
                if claims.extended is None:
                    return  # only extended resources no DeviceClass serves: device plugins' business
                positions = self._without_device_plugins(cycle, claims.extended.classes)
            fast = self.dra.fast_filter(pod, claims, cycle.names, cycle.batch)  # None for a special claim
            if fast is not None:
                positions = self._take_fast(cycle, fast)
            elif positions is None:
                positions = cycle.passing()
            by_name = {cycle.names[position]: position for position in positions}
            for name, status in self.dra.filter_nodes(pod, claims, list(by_name)).items():
                cycle.verdicts.set(by_name[name], status)
        except AllocationError as exc:
            raise FilterError(f"cannot allocate the claims of pod {pod.key}: {exc}") from None

    @staticmethod
    def _without_device_plugins(cycle: FilterCycle, resources: Iterable[str]) -> list[int]:
        """Positions still passing where some of ``resources`` is not advertised (allocatable 0): only
        there the special claim is needed (elsewhere the resource fit has judged the pod)."""
        passing = cycle.verdicts.codes == 0
        batch = cycle.batch
        if batch is None:
            everywhere: list[int] = passing.nonzero()[0].tolist()
            return everywhere
        missing = np.zeros(len(batch), dtype=np.bool_)
        for resource in resources:
            missing |= batch.allocatable(resource) <= 0
        positions: list[int] = (passing & missing & batch.known).nonzero()[0].tolist()
        return positions

    @staticmethod
    def _take_fast(cycle: FilterCycle, fast: FastVerdicts) -> list[int]:
        """Record the fast path's failures among the nodes still passing; the positions it left
        undecided, for the full allocator."""
        verdicts = cycle.verdicts
        passing = verdicts.codes == 0
        failing = (passing & fast.decided & ~fast.passes).nonzero()[0]
        if len(failing):
            verdicts.codes[failing] = UNRESOLVABLE
            verdicts.reason_index[failing] = fast.reason[failing] + len(verdicts.reasons)
            verdicts.reasons.extend(fast.reasons)
        undecided: list[int] = (passing & ~fast.decided).nonzero()[0].tolist()
        return undecided

    def reserve(self, cycle: BindCycle) -> Refusal | None:
        """Choose the devices on the node and count them in flight (before the first await)."""
        try:
            chosen = self.dra.reserve(cycle.pod, cycle.node)
        except AllocationError as exc:
            return self._cannot(cycle, str(exc))
        if isinstance(chosen, Status):
            return self._cannot(cycle, chosen.reason)
        cycle.state[self.name] = _Held(chosen)
        return None

    @staticmethod
    def _cannot(cycle: BindCycle, reason: str) -> Refusal:
        return Refusal("no-fit", f"node {cycle.node} cannot take the claims of pod {cycle.key}: {reason}")

    async def pre_bind(self, cycle: BindCycle) -> Refusal | None:
        held: _Held | None = cycle.state.get(self.name)
        if held is None:  # reserve did not apply to this pod (nothing of it is the allocator's)
            return None
        try:
            await self.dra.prebind(cycle.pod, held.reservation, self.writer)
        except ClaimWriteError as exc:
            del cycle.state[self.name]  # prebind undid its own writes
            message = f"writing the claims of pod {cycle.key} failed: {exc}"
            return Refusal("claim-write", message, definite=exc.definite)
        held.written = True
        return await self._binding_conditions(cycle, held.reservation)

    async def _binding_conditions(self, cycle: BindCycle, reservation: Reservation) -> Refusal | None:
        """Wait for the devices' binding conditions (app.pipeline.binding_conditions); a Refusal makes
        /bind undo the writes (unreserve) and answer an Error."""
        state = self.dra.state
        keys = [claim.key for claim, _ in reservation.allocate] + [claim.key for claim in reservation.reserve]
        if reservation.extended is not None:  # the special claim pre-bind created
            keys += sorted(state.special_claims_of(cycle.pod.uid))
        claims = [state.claims[key] for key in keys if key in state.claims]
        if not needs_wait(claims):
            return None
        self.waiting[cycle.pod.uid] = {
            "pod": cycle.key,
            "node": cycle.node,
            "claims": keys,
            "since": time.time(),
            "timeoutSeconds": self.binding_timeout,
        }
        try:
            reason = await wait_for_binding_conditions(state, keys, self.binding_timeout)
        finally:
            self.waiting.pop(cycle.pod.uid, None)
        if not reason:
            return None
        return Refusal("binding-conditions", f"pod {cycle.key} cannot bind to node {cycle.node}: {reason}")

    async def unreserve(self, cycle: BindCycle) -> None:
        held: _Held | None = cycle.state.pop(self.name, None)
        if held is None or held.reservation.empty:
            return
        if held.written:
            await self.dra.unreserve(cycle.pod, self.dra.written(held.reservation), self.writer)
        else:
            self.dra.state.end(cycle.pod.uid)  # reserved, never written: the devices leave flight

    def binding_waits(self) -> list[dict[str, Any]]:
        """The binds waiting for their devices' binding conditions, and on which conditions of which
        device, as the cache has the claims now."""
        now, out = time.time(), []
        for wait in self.waiting.values():
            claims = [self.dra.state.claims.get(key) for key in wait["claims"]]
            pending = [p for claim in claims if claim is not None for p in binding_state(claim).pending]
            since = wait["since"]
            out.append({**{k: v for k, v in wait.items() if k != "since"}, "waitingSeconds": round(now - since, 3)})
            out[-1]["pending"] = pending  # "<claim>: <driver>/<pool>/<device> <condition>"
        return out

    def explain(self, pod: PodInfo, names: Sequence[str]) -> Mapping[str, Any]:
        claims = self.dra.prefilter(pod)
        if isinstance(claims, Status):
            return {name: {"passed": False, "reason": claims.reason} for name in names}
        return {name: self.dra.explain(pod, claims, name) for name in names}


@dataclass(slots=True)
class _Held:
    """What reserve chose, and whether pre-bind wrote it."""

    reservation: Reservation
    written: bool = False
