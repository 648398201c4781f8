"""The DynamicResources steps of the extender, mapped from kube-scheduler's in-tree plugin.

=============  ===============================  =============================================
upstream       here                             what
=============  ===============================  =============================================
PreFilter      ``prefilter`` (per request)      resolve the pod's claims, refuse the pod on
                                                every node when one is missing or unusable
Filter         ``filter`` (per node)            allocated claims: their nodeSelector must
                                                match; unallocated ones: allocate them all
                                                together on the node (first fit, by priority)
Reserve        ``reserve`` (in /bind)           pick the allocation for the chosen node and
                                                count it as in flight, before any await
PreBind        ``prebind`` (in /bind)           finalizer, then ``status.allocation`` and
                                                ``status.reservedFor``, claim by claim; then
                                                wait for binding conditions (claims.py)
Unreserve      ``unreserve``                    undo every write of this bind in reverse order
=============  ===============================  =============================================

kube-scheduler's own DynamicResources plugin must be disabled in the extender's profile,
otherwise both would allocate (see deploy/README.md).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
import numpy.typing as npt

from allocator import (
    AllocationError,
    AllocationResult,
    Allocator,
    ResourceClaim,
    Unschedulable,
    node_selector_matches,
)
from allocator.requests import claim_requests
from app.cluster.dra import DraState
from app.cluster.dra_fast import DeviceTable, decide, node_index, simple_request
from app.cluster.writes import ClaimWriteError
from scoring.framework import Code, PodInfo, Status

__all__ = [
    "RESERVED_FOR_MAX",
    "ClaimWriter",
    "DynamicResources",
    "FastVerdicts",
    "PodClaims",
    "Reservation",
]

log = logging.getLogger("kube_gpu_extender.dra")

RESERVED_FOR_MAX = 256  # ResourceClaimReservedForMaxSize
REASON_NOT_ON_NODE = "resourceclaim not available on the node"
REASON_NO_NODE = "node(s) unknown to the GPU extender"


class ClaimWriter(Protocol):
    """Writes claims as kube-scheduler's PreBind and Unreserve do; returns the claim as stored."""

    async def allocate(self, claim: ResourceClaim, allocation: AllocationResult, pod: PodInfo) -> ResourceClaim: ...

    async def reserve(self, claim: ResourceClaim, pod: PodInfo) -> ResourceClaim: ...

    async def release(
        self, claim: ResourceClaim, pod: PodInfo, allocation: AllocationResult | None
    ) -> ResourceClaim | None: ...


@dataclass(frozen=True, slots=True)
class PodClaims:
    """PreFilter's answer for a pod: its claims split by whether they still need devices."""

    allocated: tuple[ResourceClaim, ...]
    unallocated: tuple[ResourceClaim, ...]

    @property
    def unallocated_keys(self) -> tuple[str, ...]:
        return tuple(claim.key for claim in self.unallocated)


@dataclass(frozen=True, slots=True)
class Reservation:
    """What /bind will write for a pod on its node."""

    node: str
    allocate: tuple[tuple[ResourceClaim, AllocationResult], ...]
    reserve: tuple[ResourceClaim, ...]  # already allocated; only the pod's reservation is added

    @property
    def empty(self) -> bool:
        return not self.allocate and not self.reserve


class _LazyProposals(Mapping[str, tuple[AllocationResult, ...]]):
    """Proposals of the nodes the fast path passed, allocated only for the node /bind asks about
    (then as the state is at that moment, which is what /bind checks a proposal against anyway)."""

    def __init__(
        self,
        made: Mapping[str, tuple[AllocationResult, ...]],
        passed: Sequence[str],
        allocate: Callable[[str], tuple[Status, tuple[AllocationResult, ...] | None]],
    ) -> None:
        self._made = dict(made)
        self._passed = passed
        self._allocate = allocate
        self._names: set[str] | None = None

    def _keys(self) -> set[str]:
        if self._names is None:
            self._names = set(self._passed)
        return self._names

    def __getitem__(self, node: str) -> tuple[AllocationResult, ...]:
        found = self._made.get(node)
        if found is None and node in self._keys():
            status, results = self._allocate(node)
            if status.passed and results:
                found = self._made[node] = results
        if found is None:
            raise KeyError(node)
        return found

    def __iter__(self) -> Iterator[str]:
        yield from dict.fromkeys([*self._made, *self._passed])

    def __len__(self) -> int:
        return len(set(self._made) | self._keys())


@dataclass(frozen=True, slots=True)
class FastVerdicts:
    """The fast path's answer for a list of node names (``DynamicResources.fast_filter``)."""

    decided: npt.NDArray[np.bool_]  # per name: decided without the search (else: the full allocator)
    passes: npt.NDArray[np.bool_]
    reason: npt.NDArray[np.intp]  # per name: index into ``reasons`` (read where decided and failing)
    reasons: tuple[Status, ...]


def _unresolvable(reason: str) -> Status:
    return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, reason)


def _rfc3339(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


class DynamicResources:
    def __init__(self, state: DraState, wall_clock: Callable[[], float] = time.time) -> None:
        self.state = state
        self.wall_clock = wall_clock
        # the last candidate list (by identity: kube-scheduler sends the same one again) and its node indices
        self._index: tuple[Sequence[str], DeviceTable, npt.NDArray[np.intp]] | None = None
        self._statuses: tuple[DeviceTable, tuple[Status, ...]] | None = None

    # ------------------------------------------------------------------ PreFilter
    def prefilter(self, pod: PodInfo) -> PodClaims | Status:
        """Resolve the pod's claims; a Status means the pod cannot run on any node now."""
        if pod.claims_pending:
            return _unresolvable(pod.claims_pending)
        allocated: list[ResourceClaim] = []
        unallocated: list[ResourceClaim] = []
        for ref in pod.claims:
            claim = self.state.claims.get(f"{pod.namespace}/{ref.claim}")
            if claim is None:
                return _unresolvable(f"waiting for resourceclaim {ref.claim!r} to be created")
            if claim.deleting:
                return _unresolvable(f"resourceclaim {ref.claim!r} is being deleted")
            if ref.generated and claim.owner_pod_uid != pod.uid:
                return _unresolvable(f"resourceclaim {ref.claim!r} was not created for this pod")
            holder = self._in_flight_for_other(claim.key, pod.uid)
            if holder:
                return Status(Code.UNSCHEDULABLE, f"resourceclaim {ref.claim!r} is being allocated for another pod")
            if claim.allocation is None:
                unallocated.append(claim)
                continue
            reserved = {consumer.uid for consumer in claim.reserved_for}
            if pod.uid not in reserved and len(reserved) >= RESERVED_FOR_MAX:
                return _unresolvable(f"resourceclaim {ref.claim!r} is reserved for too many pods")
            allocated.append(claim)
        return PodClaims(tuple(allocated), tuple(unallocated))

    def _in_flight_for_other(self, claim_key: str, pod_uid: str) -> str:
        for uid, entry in self.state.inflight.items():
            if uid != pod_uid and claim_key in entry.claims:
                return uid
        return ""

    # ------------------------------------------------------------------ Filter
    def allocator(self, pod_uid: str) -> Allocator:
        state = self.state
        return Allocator(
            state.classes,
            state.allocated_view(pod_uid),
            state.selectors,
            state.shared_view(pod_uid),
            taint_rules=state.taint_rules,
        )

    def filter(
        self, allocator: Allocator, claims: PodClaims, node: str
    ) -> tuple[Status, tuple[AllocationResult, ...] | None]:
        """One node; raises ``AllocationError`` when the pod itself is at fault (not the node)."""
        ref = self.state.node_ref(node)
        if ref is None:
            return _unresolvable(REASON_NO_NODE), None
        for claim in claims.allocated:
            assert claim.allocation is not None
            if not node_selector_matches(claim.allocation.node_selector, ref):
                return _unresolvable(REASON_NOT_ON_NODE), None
        if not claims.unallocated:
            return Status(), ()
        outcome = allocator.allocate(ref, self.state.slices.pools_for(ref), claims.unallocated)
        if isinstance(outcome, Unschedulable):
            return _unresolvable(outcome.reason), None
        return Status(), outcome.results

    def filter_nodes(
        self, pod: PodInfo, claims: PodClaims, nodes: Sequence[str], fast: Sequence[str] = ()
    ) -> dict[str, Status]:
        """Failures among ``nodes``; records the pod's proposals for the nodes that pass, and for the
        nodes ``fast`` passed (``fast_filter``) proposals made when /bind asks for them."""
        allocator = self.allocator(pod.uid)
        failures: dict[str, Status] = {}
        proposals: dict[str, tuple[AllocationResult, ...]] = {}
        for node in nodes:
            status, results = self.filter(allocator, claims, node)
            if not status.passed:
                failures[node] = status
            elif results:
                proposals[node] = results
        if claims.unallocated:
            by_node: Mapping[str, tuple[AllocationResult, ...]] = proposals
            if fast:
                by_node = _LazyProposals(
                    proposals, fast, lambda node: self.filter(self.allocator(pod.uid), claims, node)
                )
            self.state.propose(pod.uid, claims.unallocated_keys, by_node)
        return failures

    def fast_filter(self, pod: PodInfo, claims: PodClaims, names: Sequence[str]) -> FastVerdicts | None:
        """Decide a simple pod (``app.cluster.dra_fast``) on every node at once from the per-node
        free capacity; None when the pod is not simple. Nodes left undecided go to ``filter``."""
        state = self.state
        if claims.allocated or len(claims.unallocated) != 1 or state.taint_rules or pod.uid in state.inflight:
            return None
        claim = claims.unallocated[0]
        if claim.constraints or len(claim.requests) != 1:
            return None
        try:
            (alternatives,) = claim_requests(claim, state.classes, state.selectors)
        except AllocationError:
            return None  # the full path raises it for the pod (or answers per node)
        if len(alternatives) != 1 or not simple_request(alternatives[0]):
            return None
        alt = alternatives[0]
        table = state.fast.table(alt.device_class, state.node_refs, state.slices, state.selectors, state.holders)
        cached = self._index
        if cached is not None and cached[0] is names and cached[1] is table:
            index = cached[2]
        else:
            index = node_index(table, names)
            self._index = (names, table, index)
        decision = decide(table, alt, index)
        if decision is None:
            return None
        if self._statuses is None or self._statuses[0] is not table:
            self._statuses = (table, tuple(_unresolvable(reason) for reason in table.reasons))
        return FastVerdicts(*decision, self._statuses[1])

    def explain(self, pod: PodInfo, claims: PodClaims, node: str) -> dict[str, object]:
        """Which devices /bind would pick on ``node`` (for /debug/explain)."""
        try:
            status, results = self.filter(self.allocator(pod.uid), claims, node)
        except AllocationError as exc:
            return {"error": str(exc)}
        view: dict[str, object] = {"passed": status.passed, "reason": status.reason}
        if results:
            view["devices"] = {
                claim.key: [
                    {"request": r.request, "driver": r.driver, "pool": r.pool, "device": r.device}
                    | ({"consumedCapacity": dict(r.consumed_capacity)} if r.consumed_capacity else {})
                    for r in result.devices
                ]
                for claim, result in zip(claims.unallocated, results, strict=True)
            }
        if claims.allocated:
            view["alreadyAllocated"] = [claim.key for claim in claims.allocated]
        return view

    # ------------------------------------------------------------------ Reserve
    def reserve(self, pod: PodInfo, node: str) -> Reservation | Status:
        """Choose the allocation on ``node`` and count it as in flight (synchronously, no await).

        Raises ``AllocationError`` for a pod-level error. Nothing is recorded when a Status is returned.
        """
        claims = self.prefilter(pod)
        if isinstance(claims, Status):
            return claims
        results = self.state.proposal(pod.uid, claims.unallocated_keys, node) if claims.unallocated else ()
        if results is None:  # no proposal for this node, or its devices were taken meanwhile: decide again
            status, results = self.filter(self.allocator(pod.uid), claims, node)
            if not status.passed:
                return status
        else:
            ref = self.state.node_ref(node)
            for claim in claims.allocated:
                assert claim.allocation is not None
                if ref is None or not node_selector_matches(claim.allocation.node_selector, ref):
                    return _unresolvable(REASON_NOT_ON_NODE)
        assert results is not None
        allocate = tuple(zip(claims.unallocated, map(self._stamped, results), strict=True))
        reserve = tuple(c for c in claims.allocated if pod.uid not in {r.uid for r in c.reserved_for})
        if allocate:
            self.state.begin(pod.uid, pod.key, node, {claim.key: result for claim, result in allocate})
        return Reservation(node, allocate, reserve)

    def _stamped(self, allocation: AllocationResult) -> AllocationResult:
        """With binding conditions, ``allocationTimestamp`` records when the allocation was made (as
        upstream's PreBind does; upstream sets it on every allocation, here only where it is read)."""
        if allocation.allocation_timestamp is not None or not any(r.binding_conditions for r in allocation.results):
            return allocation
        return replace(allocation, allocation_timestamp=_rfc3339(self.wall_clock()))

    # ------------------------------------------------------------------ PreBind / Unreserve
    async def prebind(self, pod: PodInfo, reservation: Reservation, writer: ClaimWriter) -> None:
        """Write every claim; on failure undo what this call wrote and raise ``ClaimWriteError``."""
        written: list[tuple[ResourceClaim, AllocationResult | None]] = []
        try:
            for claim, allocation in reservation.allocate:
                stored = await writer.allocate(claim, allocation, pod)
                self.state.upsert_claim(stored)
                written.append((stored, allocation))
            for claim in reservation.reserve:
                stored = await writer.reserve(claim, pod)
                self.state.upsert_claim(stored)
                written.append((stored, None))
        except ClaimWriteError as exc:
            undone = await self.unreserve(pod, written, writer)
            if exc.definite and undone:
                self.state.end(pod.uid)  # otherwise the in-flight entry holds the devices until its TTL
            raise
        self.state.end(pod.uid)  # the claims in the cache now hold the devices

    async def unreserve(
        self, pod: PodInfo, written: Sequence[tuple[ResourceClaim, AllocationResult | None]], writer: ClaimWriter
    ) -> bool:
        """Undo reservations (and our allocations) in reverse order; False if any undo failed."""
        complete = True
        for claim, allocation in reversed(written):
            try:
                stored = await writer.release(claim, pod, allocation)
            except ClaimWriteError as exc:
                complete = False
                log.error("could not undo the write of resourceclaim %s for pod %s: %s", claim.key, pod.key, exc)
                continue
            if stored is None:
                self.state.delete_claim(claim.key)
            else:
                self.state.upsert_claim(stored)
        return complete

    def written(self, reservation: Reservation) -> list[tuple[ResourceClaim, AllocationResult | None]]:
        """What a completed ``prebind`` wrote, as ``unreserve`` takes it (claims re-read from the cache)."""
        out: list[tuple[ResourceClaim, AllocationResult | None]] = []
        pairs: list[tuple[ResourceClaim, AllocationResult | None]] = [*reservation.allocate]
        pairs.extend((claim, None) for claim in reservation.reserve)
        for claim, allocation in pairs:
            out.append((self.state.claims.get(claim.key, claim), allocation))
        return out
