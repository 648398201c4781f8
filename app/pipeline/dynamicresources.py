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
otherwise both would allocate (see docs/deploy.md).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from allocator import (
    AllocationError,
    AllocationResult,
    Allocator,
    DeviceID,
    DeviceRequestAllocationResult,
    ExtendedClaimPlan,
    RequestMapping,
    ResourceClaim,
    Unschedulable,
    claim_object,
    is_extended_resource_claim,
    node_selector_matches,
)
from app.cluster.dra import DraState
from app.cluster.dra_inuse import Planned, SharedAlso, TakenAlso
from app.cluster.writes import ClaimWriteError
from app.pipeline.dra_fast_path import FastPath, FastVerdicts
from app.pipeline.extended_claims import ExtendedClaims
from scoring.framework import Code, PodInfo, Status
from scoring.table import Batch

__all__ = [
    "RESERVED_FOR_MAX",
    "ClaimWriter",
    "DynamicResources",
    "FastVerdicts",
    "PodClaims",
    "Preference",
    "Reservation",
]

# The devices the extender's device choice (``deviceChoice``) gives a pod on a node, to be tried first
# among devices of equal rank (``app.pipeline.device_preference``); () for no preference.
Preference = Callable[[PodInfo, str], Sequence[DeviceID]]

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

    async def create(self, obj: dict[str, object]) -> ResourceClaim: ...

    async def delete(self, claim: ResourceClaim) -> None: ...

    async def record_extended_claim(self, pod: PodInfo, claim: str, mappings: tuple[RequestMapping, ...]) -> None: ...


@dataclass(frozen=True, slots=True)
class PodClaims:
    """PreFilter's answer for a pod: its claims split by whether they still need devices, and the
    extended resources DRA may serve."""

    allocated: tuple[ResourceClaim, ...]
    unallocated: tuple[ResourceClaim, ...]
    extended: ExtendedClaims | None = None

    @property
    def unallocated_keys(self) -> tuple[str, ...]:
        return tuple(claim.key for claim in self.unallocated)


@dataclass(frozen=True, slots=True)
class Reservation:
    """What /bind will write for a pod on its node."""

    node: str
    allocate: tuple[tuple[ResourceClaim, AllocationResult], ...]
    reserve: tuple[ResourceClaim, ...]  # already allocated; only the pod's reservation is added
    # The special claim to create (with its allocation and the pod's request mappings).
    extended: tuple[ResourceClaim, AllocationResult, ExtendedClaimPlan] | None = None

    @property
    def empty(self) -> bool:
        return not self.allocate and not self.reserve and self.extended is None


def _unresolvable(reason: str) -> Status:
    return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, reason)


def _rfc3339(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


class DynamicResources:
    def __init__(
        self,
        state: DraState,
        wall_clock: Callable[[], float] = time.time,
        allocatable: Callable[[str], Mapping[str, int] | None] = lambda node: None,
        prefer: Preference | None = None,
    ) -> None:
        self.state = state
        self.wall_clock = wall_clock
        self.allocatable = allocatable  # a node's allocatable: what its device plugins advertise
        self.prefer = prefer  # the devices the scoring's device choice gave the pod on the chosen node
        self.fast = FastPath(state)

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
        return PodClaims(tuple(allocated), tuple(unallocated), self._extended(pod))

    def extended_applies(self, pod: PodInfo) -> bool:
        """Whether the pod's extended-resource requests concern DRA: a DeviceClass serves one of
        them, or the pod owns a special claim an earlier bind left behind."""
        return self.state.owns_special_claims(pod.uid) or bool(self._served(pod))

    def _extended(self, pod: PodInfo) -> ExtendedClaims | None:
        """The pod's requests that a DeviceClass could serve; None without any (or once bound)."""
        classes = self._served(pod) if not pod.node_name else None
        return ExtendedClaims(pod, classes) if classes else None

    def _served(self, pod: PodInfo) -> dict[str, str]:
        """The pod's extended resources a DeviceClass serves, each with that class's name."""
        if not pod.extended_requests or not self.state.classes:
            return {}
        mapping = self.state.class_mapping()
        return {r.resource: mapping[r.resource] for r in pod.extended_requests if r.resource in mapping}

    def stale_extended_claims(self, pod: PodInfo) -> list[ResourceClaim]:
        """Special claims of this pod that an earlier bind left behind (its create or delete timed out,
        or the extender stopped mid-bind): upstream's PostFilter deletes them; here /bind does, first.
        Until then their devices count for every other pod, not for this one."""
        claims = (self.state.claims.get(key) for key in sorted(self.state.special_claims_of(pod.uid)))
        return [claim for claim in claims if claim is not None]

    def _in_flight_for_other(self, claim_key: str, pod_uid: str) -> str:
        for uid, entry in self.state.inflight.items():
            if uid != pod_uid and claim_key in entry.claims:
                return uid
        return ""

    # ------------------------------------------------------------------ Filter
    def allocator(self, pod_uid: str, planned: Planned | None = None) -> Allocator:
        """The allocator for one pod's claims; ``planned``: the devices and shares a gang's plan has
        given to members placed on the node before this one (not written anywhere yet)."""
        state = self.state
        allocated = state.allocated_view(pod_uid)
        shared = state.shared_view(pod_uid)
        return Allocator(
            state.classes,
            TakenAlso(allocated, planned.whole) if planned is not None and planned.whole else allocated,
            state.selectors,
            SharedAlso(shared, planned.shares) if planned is not None and planned.shares else shared,
            taint_rules=state.taint_rules,
        )

    # ------------------------------------------------------------------ gangs
    def node_state(self, node: str) -> tuple[object, ...] | None:
        """What allocating on ``node`` reads of the cluster, as a value that changes whenever it does
        (its pools as gathered, their holders' versions, classes and taint rules); None: no pools."""
        state = self.state
        ref = state.node_ref(node)
        if ref is None:
            return None
        pools = state.slices.pools_for(ref)
        versions = tuple(state.pool_versions.get((p.driver, p.name), 0) for p in pools.pools)
        return (pools, versions, state.rules_version)

    def plan_on(
        self, pod: PodInfo, claims: PodClaims, node: str, planned: Planned
    ) -> tuple[AllocationResult, ...] | None:
        """The devices a gang member's claims would get on ``node`` next to ``planned`` (what members
        planned there before it took); None when they do not fit."""
        status, results = self.filter(self.allocator(pod.uid, planned), claims, node)
        return results if status.passed and results is not None else None

    def hold(
        self, pod: PodInfo, claims: PodClaims, node: str, results: tuple[AllocationResult, ...], until: float
    ) -> None:
        """Count a gang member's planned devices as in flight until ``until`` (or its /bind)."""
        held = {claim.key: result for claim, result in zip(claims.unallocated, results, strict=False)}
        if len(results) > len(claims.unallocated) and claims.extended is not None:
            special = claims.extended.for_node(self.allocatable(node))
            if special is not None:
                held[special[0].key] = results[len(claims.unallocated)]
        if held:
            self.state.begin(pod.uid, pod.key, node, held, expires_at=until, held=True)

    def filter(
        self, allocator: Allocator, claims: PodClaims, node: str, prefer: Sequence[DeviceID] = ()
    ) -> tuple[Status, tuple[AllocationResult, ...] | None]:
        """One node; raises ``AllocationError`` when the pod itself is at fault (not the node).
        ``prefer``: devices to try first among devices of equal rank."""
        wanted = self._to_allocate(claims, node)
        if not wanted and not claims.allocated:
            return Status(), ()  # extended resources all served by device plugins here
        ref = self.state.node_ref(node)
        if ref is None:
            return _unresolvable(REASON_NO_NODE), None
        for claim in claims.allocated:
            assert claim.allocation is not None
            if not node_selector_matches(claim.allocation.node_selector, ref):
                return _unresolvable(REASON_NOT_ON_NODE), None
        if not wanted:
            return Status(), ()
        outcome = allocator.allocate(ref, self.state.slices.pools_for(ref), wanted, prefer)
        if isinstance(outcome, Unschedulable):
            return _unresolvable(outcome.reason), None
        return Status(), outcome.results

    def _to_allocate(self, claims: PodClaims, node: str) -> tuple[ResourceClaim, ...]:
        """The unallocated claims, and on nodes where DRA serves the pod's extended resources the
        special claim last (upstream allocates it with the others)."""
        special = claims.extended.for_node(self.allocatable(node)) if claims.extended is not None else None
        return claims.unallocated if special is None else (*claims.unallocated, special[0])

    def filter_nodes(self, pod: PodInfo, claims: PodClaims, nodes: Sequence[str]) -> dict[str, Status]:
        """Failures among ``nodes``; records the pod's proposals for the nodes that pass. (Nodes the
        fast path passed have none: /bind allocates on the chosen one, once.)"""
        failures: dict[str, Status] = {}
        proposals: dict[str, tuple[AllocationResult, ...]] = {}
        if nodes:  # none left when the fast path decided every node
            allocator = self.allocator(pod.uid)
            for node in nodes:
                status, results = self.filter(allocator, claims, node)
                if not status.passed:
                    failures[node] = status
                elif results:
                    proposals[node] = results
        if claims.unallocated and claims.extended is None:  # the special claim differs per node: no proposals
            self.state.propose(pod.uid, claims.unallocated_keys, proposals)
        return failures

    def fast_filter(
        self, pod: PodInfo, claims: PodClaims, names: Sequence[str], batch: Batch | None = None
    ) -> FastVerdicts | None:
        """Decide a simple pod on every node at once (``app.pipeline.dra_fast_path``); None when it is not
        simple. Nodes left undecided go to ``filter``. ``batch``: the candidates' node-table rows."""
        if claims.allocated or len(claims.unallocated) != 1 or claims.extended is not None:
            return None
        return self.fast.verdicts(pod, claims.unallocated[0], names, batch)

    def preference(self, pod: PodInfo, node: str) -> Sequence[DeviceID]:
        """The devices the device choice gives ``pod`` on ``node`` (none without a choice)."""
        return self.prefer(pod, node) if self.prefer is not None else ()

    def explain(self, pod: PodInfo, claims: PodClaims, node: str) -> dict[str, object]:
        """Which devices /bind would pick on ``node`` (for /debug/explain)."""
        try:
            status, results = self.filter(self.allocator(pod.uid), claims, node, self.preference(pod, node))
        except AllocationError as exc:
            return {"error": str(exc)}
        view: dict[str, object] = {"passed": status.passed, "reason": status.reason}
        if results:
            view["devices"] = {
                claim.key: [self._explain_device(r) for r in result.devices]
                for claim, result in zip(self._to_allocate(claims, node), results, strict=True)
            }
        if claims.allocated:
            view["alreadyAllocated"] = [claim.key for claim in claims.allocated]
        return view

    def _explain_device(self, result: DeviceRequestAllocationResult) -> dict[str, object]:
        """One device /bind would pick: for a share, what it consumes and who else holds shares of
        the device now; for a device with binding conditions, the conditions /bind will wait for."""
        view: dict[str, object] = {
            "request": result.request,
            "driver": result.driver,
            "pool": result.pool,
            "device": result.device,
        }
        if result.consumed_capacity:
            view["consumedCapacity"] = dict(result.consumed_capacity)
        if result.shared:
            view["sharedWith"] = self.state.shares(result.id)
        if result.binding_conditions:
            view["bindingConditions"] = list(result.binding_conditions)
            view["bindingFailureConditions"] = list(result.binding_failure_conditions)
        return view

    # ------------------------------------------------------------------ Reserve
    def reserve(self, pod: PodInfo, node: str) -> Reservation | Status:
        """Choose the allocation on ``node`` and count it as in flight (synchronously, no await).

        Raises ``AllocationError`` for a pod-level error. Nothing is recorded when a Status is returned.
        """
        claims = self.prefilter(pod)
        if isinstance(claims, Status):
            return claims
        results = None
        prefer = self.preference(pod, node)  # filter's proposals took devices in search order
        if claims.extended is None and not prefer:
            results = self.state.proposal(pod.uid, claims.unallocated_keys, node) if claims.unallocated else ()
        if results is None:  # no proposal for this node, or its devices were taken meanwhile: decide again
            status, results = self.filter(self.allocator(pod.uid), claims, node, prefer)
            if not status.passed:
                return status
        else:
            ref = self.state.node_ref(node)
            for claim in claims.allocated:
                assert claim.allocation is not None
                if ref is None or not node_selector_matches(claim.allocation.node_selector, ref):
                    return _unresolvable(REASON_NOT_ON_NODE)
        assert results is not None
        results = tuple(map(self._stamped, results))
        count = len(claims.unallocated)
        allocate = tuple(zip(claims.unallocated, results[:count], strict=True))
        extended = None
        if len(results) > count:
            special = claims.extended.for_node(self.allocatable(node)) if claims.extended is not None else None
            assert special is not None
            extended = (special[0], results[count], special[1])
        reserve = tuple(c for c in claims.allocated if pod.uid not in {r.uid for r in c.reserved_for})
        held = {claim.key: result for claim, result in allocate}
        if extended is not None:
            held[extended[0].key] = extended[1]
        if held:
            self.state.begin(pod.uid, pod.key, node, held)
        return Reservation(node, allocate, reserve, extended)

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
            for stale in self.stale_extended_claims(pod):
                await writer.delete(stale)
                self.state.delete_claim(stale.key)
            for claim, allocation in reservation.allocate:
                stored = await writer.allocate(claim, allocation, pod)
                self.state.upsert_claim(stored)
                written.append((stored, allocation))
            for claim in reservation.reserve:
                stored = await writer.reserve(claim, pod)
                self.state.upsert_claim(stored)
                written.append((stored, None))
            if reservation.extended is not None:
                await self._create_extended(pod, reservation.extended, writer, written)
        except ClaimWriteError as exc:
            undone = await self.unreserve(pod, written, writer)
            if exc.definite and undone:
                self.state.end(pod.uid)  # otherwise the in-flight entry holds the devices until its TTL
            raise
        self.state.end(pod.uid)  # the claims in the cache now hold the devices

    async def _create_extended(
        self,
        pod: PodInfo,
        extended: tuple[ResourceClaim, AllocationResult, ExtendedClaimPlan],
        writer: ClaimWriter,
        written: list[tuple[ResourceClaim, AllocationResult | None]],
    ) -> None:
        """Upstream's PreBind for the special claim: create it (after deleting what an earlier failed
        bind left), allocate and reserve it, then record it in the pod's status."""
        _, allocation, plan = extended
        created = await writer.create(claim_object(pod.namespace, pod.name, pod.uid, plan))
        self.state.upsert_claim(created)
        written.append((created, allocation))  # undone by deleting it
        stored = await writer.allocate(created, allocation, pod)
        self.state.upsert_claim(stored)
        written[-1] = (stored, allocation)
        await writer.record_extended_claim(pod, stored.name, plan.mappings)

    async def unreserve(
        self, pod: PodInfo, written: Sequence[tuple[ResourceClaim, AllocationResult | None]], writer: ClaimWriter
    ) -> bool:
        """Undo reservations (and our allocations) in reverse order, deleting the pod's special claim;
        False if any undo failed."""
        complete = True
        for claim, allocation in reversed(written):
            try:
                if is_extended_resource_claim(claim.annotations) and claim.owner_pod_uid == pod.uid:
                    await writer.delete(claim)
                    self.state.delete_claim(claim.key)
                    continue
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
        if reservation.extended is not None:
            pod_uid = reservation.extended[0].owner_pod_uid or ""
            for key in sorted(self.state.special_claims_of(pod_uid)):
                out.append((self.state.claims[key], reservation.extended[1]))
        return out
