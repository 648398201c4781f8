"""The allocation search: all of a pod's claims on one node, first complete solution wins.

This is kube-scheduler's structured allocator (``incubating``) over KEP-5773-ordered pools:

* claims in pod order, requests in claim order, ``firstAvailable`` subrequests in order (a later
  request can force a fall back to a later subrequest), and for every device slot the candidates in
  pool -> slice -> device order. Within one request the next slot resumes after the previous
  device, so combinations are tried, never permutations.
* A candidate is skipped when it is in use (allocated to another claim, in flight for another pod,
  or picked earlier in this attempt), not selectable (class selectors first, then the request's,
  then per-device node selection), needs a feature we do not implement, carries a NoSchedule /
  NoExecute taint (its slice's or a DeviceTaintRule's, ``allocator.taints``) the request does not
  tolerate, lacks the capacity the request asks for
  (``allocator.capacity``; a device that allows multiple allocations gets a new *share* while
  its shares fit), would overdraw its pool's shared counters (``allocator.counters``), or breaks a
  ``matchAttribute`` / ``distinctAttribute`` constraint (``allocator.constraints``).
* No scoring: priorities already are the order, so the first complete solution is the answer. A
  caller may *prefer* devices (``allocate(..., prefer=...)``, the extender's device choice): they
  are tried first among devices of equal rank (``NodePools.preferred``), never across pool or slice
  priorities.
* Devices with binding conditions are allocated like any other (their pools come after the others,
  ``allocator.pools``); the results carry the conditions, and /bind waits for them
  (``allocator.binding``, ``app.pipeline.binding_conditions``).

``Allocator`` is the facade (set-up of claims in ``allocator.requests``, outcome types in
``allocator.outcome``); ``_Search`` is one Allocate call.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from allocator.capacity import NO_SHARES, Consumption, SharedDevices, consumption, fits
from allocator.cel import SelectorCache, SelectorError
from allocator.constraints import Constraint
from allocator.counters import CounterKey, CounterUse, PoolCounters, is_allocated
from allocator.outcome import (
    REASON_CANNOT_ALLOCATE,
    REASON_INVALID_POOLS,
    Allocated,
    AllocationError,
    Unschedulable,
)
from allocator.pools import Candidate, NodePools
from allocator.requests import Alternative, claim_constraint, claim_requests
from allocator.taints import NO_TAINT_RULES, TaintRules, taint_blocks
from allocator.types import (
    ALLOCATION_RESULTS_MAX_SIZE,
    CONFIG_SOURCE_CLAIM,
    CONFIG_SOURCE_CLASS,
    AllocationResult,
    DeviceAllocationConfiguration,
    DeviceClass,
    DeviceID,
    DeviceRequestAllocationResult,
    DeviceToleration,
    NodeRef,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    ResourceClaim,
)

__all__ = [
    "REASON_CANNOT_ALLOCATE",
    "REASON_INVALID_POOLS",
    "Allocated",
    "AllocationError",
    "Allocator",
    "Unschedulable",
]


# One device taken in this attempt: (alternative, candidate, shared, consumed, counters): whether it
# is a share (its shareID is made for the result: a search tries many) and what it consumes, and the
# counters of a device that took its pool's.
_Pick = tuple[Alternative, Candidate, bool, Consumption | None, PoolCounters | None]


@dataclass(slots=True, eq=False)
class _ClaimState:
    claim: ResourceClaim
    requests: tuple[tuple[Alternative, ...], ...]  # per request, its alternatives in order
    constraints: tuple[Constraint, ...]
    chosen: list[int]  # per request, the index of the alternative in use
    picked: list[_Pick] = field(default_factory=list)


def _tolerated(candidate: Candidate, tolerations: tuple[DeviceToleration, ...], rules: TaintRules) -> bool:
    """No NoSchedule / NoExecute taint of the device (slice or DeviceTaintRule) is left untolerated."""
    if not candidate.device.taints and not rules:
        return True
    return taint_blocks(candidate.device, candidate.id, tolerations, rules) is None


def _new_share_id() -> str:
    return str(uuid.uuid4())  # upstream: a random UID per share


_NO_FIT: tuple[Consumption | None, bool] = (None, False)  # memoised "cannot serve this request's capacity"
_EMPTY: tuple[Consumption | None, bool] = ({}, True)  # no capacity involved at all
_OK, _NO_ROOM, _CONSTRAINT = 0, 1, 2  # what _Search._push answers


class Allocator:
    """Allocates claims against a fixed view of classes and devices in use (one per filter request).

    ``allocated`` is every device held whole by a claim's ``status.allocation`` or in flight for
    another pod; ``shared`` the devices with shares (consumable capacity) and what those consume.
    ``share_ids`` makes the ``shareID`` of each new share (a random UUID, as upstream);
    ``taint_rules`` the DeviceTaintRules in force (``allocator.taints``). A claim's
    requests are set up (classes looked up, selectors compiled) once per allocator, selector and
    capacity results are memoised per device, and a pool's available counters are computed once
    per allocator, so a filter over many nodes does per-node work only for the search itself.
    """

    def __init__(
        self,
        classes: Mapping[str, DeviceClass],
        allocated: Container[DeviceID],
        selectors: SelectorCache,
        shared: SharedDevices = NO_SHARES,
        share_ids: Callable[[], str] = _new_share_id,
        taint_rules: TaintRules = NO_TAINT_RULES,
    ) -> None:
        self.classes = classes
        self.taint_rules = taint_rules
        self.allocated = allocated
        self.selectors = selectors
        self.shared = shared
        self.share_ids = share_ids
        self._setup: dict[int, tuple[ResourceClaim, tuple[tuple[Alternative, ...], ...]]] = {}
        self._available: dict[int, tuple[PoolCounters, dict[CounterKey, Fraction]]] = {}
        self._is_allocated = is_allocated(allocated, shared)
        self.any_shares = bool(shared)  # False: no device holds a share outside the search

    def available_counters(self, pool: PoolCounters) -> Mapping[CounterKey, Fraction]:
        """The pool's counters minus what allocated devices consume (once per allocator and pool)."""
        found = self._available.get(id(pool))
        if found is None or found[0] is not pool:
            found = (pool, pool.available(self._is_allocated))
            self._available[id(pool)] = found
        return found[1]

    def _claim_state(self, claim: ResourceClaim) -> _ClaimState:
        setup = self._setup.get(id(claim))
        if setup is not None and setup[0] is claim:
            requests = setup[1]
        else:
            requests = claim_requests(claim, self.classes, self.selectors)
            self._setup[id(claim)] = (claim, requests)
        constraints = tuple(claim_constraint(c) for c in claim.constraints)
        return _ClaimState(claim, requests, constraints, [0] * len(requests))

    # ------------------------------------------------------------------ the search
    def allocate(
        self, node: NodeRef, pools: NodePools, claims: Sequence[ResourceClaim], prefer: Sequence[DeviceID] = ()
    ) -> Allocated | Unschedulable:
        """All ``claims`` together on ``node``, or why not; raises ``AllocationError`` for the pod.
        ``prefer``: devices to try first among devices of equal rank, in that order."""
        if not claims:
            return Allocated(())
        search = _Search(self, node, pools, [self._claim_state(c) for c in claims], prefer)
        if search.run():
            return Allocated(tuple(search.result(state) for state in search.states))
        if pools.has_invalid:
            names = ", ".join(p.id for p in pools.unusable if p.invalid)
            return Unschedulable(f"{REASON_INVALID_POOLS} ({names})")
        return Unschedulable(REASON_CANNOT_ALLOCATE)

    def selectable(self, candidate: Candidate, alt: Alternative) -> bool:
        """Every selector accepts the device (memoised per device by the selector cache)."""
        driver = candidate.id.driver
        for expression in alt.selectors:
            try:
                if not self.selectors.matches(expression, candidate.device, driver):
                    return False
            except SelectorError as exc:
                raise AllocationError(
                    f"claim request {alt.result_name}: selector {expression!r} failed for device {candidate.id}: {exc}"
                ) from None
        return True


class _Search:
    """One Allocate call: the depth-first search over a fixed, ordered candidate list."""

    def __init__(
        self,
        allocator: Allocator,
        node: NodeRef,
        pools: NodePools,
        states: list[_ClaimState],
        prefer: Sequence[DeviceID] = (),
    ) -> None:
        self.allocator = allocator
        self.node = node
        self.pools = pools
        self.states = states
        self.candidates = pools.candidates
        self.off_node = pools.off_node  # positions in ``candidates`` of devices for other nodes
        if prefer:
            self.candidates, self.off_node = pools.preferred(prefer)
        # device -> its holders in this attempt, (claim index, admin access), in push order: with
        # admin access several claims can hold one device, and each pop must drop only its own hold.
        self.picked: dict[DeviceID, list[tuple[int, bool]]] = {}
        self._selectable: dict[tuple[int, int], bool] = {}  # (candidate index, id(alternative))
        self._all: dict[int, list[int]] = {}  # id(alternative) -> candidate indices of an All request
        # Shares taken in this attempt: their number and summed consumption per device.
        self.shares: dict[DeviceID, int] = {}
        self.allocating: dict[DeviceID, dict[str, Fraction]] = {}
        self._counter_use: CounterUse | None = None
        self.any_shares = allocator.any_shares
        self.rules = allocator.taint_rules

    def run(self) -> bool:
        return self._request(0, 0)

    # ------------------------------------------------------------------ per request
    def _request(self, c: int, r: int) -> bool:
        if c == len(self.states):
            return True
        state = self.states[c]
        if r == len(state.requests):
            return self._request(c + 1, 0)
        for index, alt in enumerate(state.requests[r]):
            state.chosen[r] = index
            if alt.all_devices:
                if self._take_all(c, r, alt):
                    return True
            elif self._slot(c, r, alt, 0, 0):
                return True
        return False

    def _slot(self, c: int, r: int, alt: Alternative, done: int, start: int) -> bool:
        if done == alt.count:
            return self._request(c, r + 1)
        state = self.states[c]
        if len(state.picked) + alt.count - done > ALLOCATION_RESULTS_MAX_SIZE:
            return False  # this choice would exceed the claim's results; keep searching for another
        for i in range(start, len(self.candidates)):
            candidate = self.candidates[i]
            if not self._usable(c, i, candidate, alt):
                continue
            if self._push(c, i, alt, candidate) != _OK:
                continue
            if self._slot(c, r, alt, done + 1, i + 1):
                return True
            self._pop(c)
        return False

    def _take_all(self, c: int, r: int, alt: Alternative) -> bool:
        indices = self._all_devices(c, alt)
        if not indices:
            return False
        state = self.states[c]
        if len(state.picked) + len(indices) > ALLOCATION_RESULTS_MAX_SIZE:
            return False
        pushed = 0
        ok = True
        for i in indices:
            candidate = self.candidates[i]
            # In use, an untolerated taint, no capacity or counters left: "All" cannot be met (these
            # are checked when a device is allocated, as upstream does, so they never shrink the list).
            if self._in_use(c, candidate.id, alt.admin_access) or not _tolerated(
                candidate, alt.tolerations, self.rules
            ):
                ok = False
                break
            outcome = self._push(c, i, alt, candidate)
            if outcome == _NO_ROOM:
                ok = False
                break
            if outcome == _CONSTRAINT:
                raise AllocationError(
                    f"claim {state.claim.key}, request {alt.result_name}: all devices were requested, but device "
                    f"{candidate.id} does not satisfy the claim's constraints"
                )
            pushed += 1
        if ok and self._request(c, r + 1):
            return True
        for _ in range(pushed):
            self._pop(c)
        return False

    def _all_devices(self, c: int, alt: Alternative) -> list[int]:
        """Every selectable device on the node whose capacity could serve the request next to the
        shares that already exist, for an ``All`` request (pools must all be usable)."""
        found = self._all.get(id(alt))
        if found is not None:
            return found
        for pool in self.pools.unusable:
            what = "currently being updated" if pool.incomplete else "currently invalid"
            raise AllocationError(
                f"claim {self.states[c].claim.key}, request {alt.result_name}: asks for all devices, but resource "
                f"pool {pool.id} is {what}"
            )
        indices = []
        for i, candidate in enumerate(self.candidates):
            if not self._selectable_for(i, candidate, alt):
                continue
            consumed, alone = self._consumption(candidate, alt)
            if consumed is None:
                continue
            existing = self.allocator.shared.consumed(candidate.id)
            if alone if existing is None else fits(candidate.device, consumed, existing, None):
                indices.append(i)
        self._all[id(alt)] = indices
        return indices

    # ------------------------------------------------------------------ per candidate
    def _in_use(self, c: int, device: DeviceID, admin: bool) -> bool:
        holders = self.picked.get(device)
        if admin:
            # Admin access ignores other claims' allocations, but never takes a device twice in one claim.
            return holders is not None and any(claim == c for claim, _ in holders)
        if device in self.allocator.allocated:
            return True
        return holders is not None and any(not held_admin or claim == c for claim, held_admin in holders)

    def _selectable_for(self, i: int, candidate: Candidate, alt: Alternative) -> bool:
        key = (i, id(alt))
        found = self._selectable.get(key)
        if found is None:
            device = candidate.device
            found = not device.unsupported and self.allocator.selectable(candidate, alt) and i not in self.off_node
            self._selectable[key] = found
        return found

    def _usable(self, c: int, i: int, candidate: Candidate, alt: Alternative) -> bool:
        return (
            not self._in_use(c, candidate.id, alt.admin_access)
            and self._selectable_for(i, candidate, alt)
            and ((not candidate.device.taints and not self.rules) or _tolerated(candidate, alt.tolerations, self.rules))
        )

    @staticmethod
    def _consumption(candidate: Candidate, alt: Alternative) -> tuple[Consumption | None, bool]:
        """What one allocation of the device for ``alt`` consumes (None: it cannot serve it) and
        whether that fits the device on its own; memoised per device object and capacity request."""
        device = candidate.device
        if not device.capacity and not alt.capacity:
            return _EMPTY
        memo = device.memo
        found: tuple[Consumption | None, bool] | None = memo.get(alt.capacity_key)
        if found is None:
            consumed = consumption(device, alt.capacity)
            found = _NO_FIT if consumed is None else (consumed, fits(device, consumed, None, None))
            memo[alt.capacity_key] = found
        return found

    @property
    def counter_use(self) -> CounterUse:
        """What this search took from pools' counters (made on first use: most searches take none)."""
        if self._counter_use is None:
            self._counter_use = CounterUse(self.allocator.available_counters)
        return self._counter_use

    def _has_shares(self, device: DeviceID) -> bool:
        return bool(self.shares.get(device)) or (self.any_shares and device in self.allocator.shared)

    def _push(self, c: int, i: int, alt: Alternative, candidate: Candidate) -> int:
        """Take the device for the claim if its capacity, its pool's counters and every constraint
        allow it (everything rolled back otherwise): ``_OK``, ``_NO_ROOM`` or ``_CONSTRAINT``."""
        device, device_id = candidate.device, candidate.id
        consumed: Consumption | None = None
        counters = None
        if not candidate.plain or alt.capacity is not None or (self.any_shares and device_id in self.allocator.shared):
            shared, multi = self.allocator.shared, device.allow_multiple_allocations
            consumed, alone = self._consumption(candidate, alt)
            if consumed is None:
                return _NO_ROOM
            if consumed:
                existing = shared.consumed(device_id) if self.any_shares else None
                allocating = self.allocating.get(device_id)
                if existing is None and allocating is None:
                    if not alone:
                        return _NO_ROOM
                elif not fits(device, consumed, existing, allocating):
                    return _NO_ROOM
            if device.consumes_counters and not (multi and self._has_shares(device_id)):
                counters = self.pools.counters.get((device_id.driver, device_id.pool))
                if counters is None or not self.counter_use.take(counters, device.consumes_counters):
                    return _NO_ROOM
        state = self.states[c]
        applied: list[Constraint] = []
        for constraint in state.constraints:
            if not constraint.applies(alt):
                continue
            if not constraint.add(candidate):
                for done in applied:
                    done.remove()
                if counters is not None:
                    self.counter_use.give_back(counters, device.consumes_counters)
                return _CONSTRAINT
            applied.append(constraint)
        if device.allow_multiple_allocations:
            state.picked.append((alt, candidate, True, consumed, counters))  # its shareID: made in ``result``
            self.shares[device_id] = self.shares.get(device_id, 0) + 1
            if consumed:
                sums = self.allocating.setdefault(device_id, {})
                for name, amount in consumed.items():
                    sums[name] = sums.get(name, 0) + amount.value
        else:
            state.picked.append((alt, candidate, False, None, counters))
            self.picked.setdefault(device_id, []).append((c, alt.admin_access))
        return _OK

    def _pop(self, c: int) -> None:
        state = self.states[c]
        alt, candidate, shared, consumed, counters = state.picked.pop()
        device_id = candidate.id
        if shared:
            self.shares[device_id] -= 1
            if consumed:
                sums = self.allocating[device_id]
                for name, amount in consumed.items():
                    sums[name] -= amount.value
            if not self.shares[device_id]:
                del self.shares[device_id]
                self.allocating.pop(device_id, None)
        else:
            holders = self.picked[device_id]
            holders.pop()  # the search is depth-first, so the last hold is this one
            if not holders:
                del self.picked[device_id]
        if counters is not None:
            self.counter_use.give_back(counters, candidate.device.consumes_counters)
        for constraint in state.constraints:
            if constraint.applies(alt):
                constraint.remove()

    # ------------------------------------------------------------------ results
    def result(self, state: _ClaimState) -> AllocationResult:
        devices = tuple(
            DeviceRequestAllocationResult(
                request=alt.result_name,
                driver=candidate.id.driver,
                pool=candidate.id.pool,
                device=candidate.id.device,
                admin_access=True if alt.admin_access else None,
                tolerations=alt.tolerations,
                binding_conditions=candidate.device.binding_conditions,
                binding_failure_conditions=candidate.device.binding_failure_conditions,
                share_id=self.allocator.share_ids() if shared else None,
                consumed_capacity={name: q.text for name, q in consumed.items()} if consumed else None,
            )
            for alt, candidate, shared, consumed, _ in state.picked
        )
        return AllocationResult(devices=devices, config=self._config(state), node_selector=self._node_selector(state))

    @staticmethod
    def _config(state: _ClaimState) -> tuple[DeviceAllocationConfiguration, ...]:
        """Class configs first (once per class, for the requests using it), then the claim's own."""
        chosen = [alts[state.chosen[r]] for r, alts in enumerate(state.requests)]
        every = {alt.result_name for alt in chosen}
        out: list[DeviceAllocationConfiguration] = []
        by_class: dict[str, list[str]] = {}
        classes: dict[str, DeviceClass] = {}
        for alt in chosen:
            by_class.setdefault(alt.device_class.name, []).append(alt.result_name)
            classes[alt.device_class.name] = alt.device_class
        for name, requests in by_class.items():
            for opaque in classes[name].config:
                if opaque is None:
                    continue
                covered = () if set(requests) >= every else tuple(requests)
                out.append(DeviceAllocationConfiguration(CONFIG_SOURCE_CLASS, covered, opaque))
        names = {alt.request for alt in chosen} | every
        for config in state.claim.config:
            if config.opaque is None:
                continue
            if not config.requests or any(r in names for r in config.requests):
                covered = () if set(config.requests) >= every else config.requests
                out.append(DeviceAllocationConfiguration(CONFIG_SOURCE_CLAIM, covered, config.opaque))
        return tuple(out)

    def _node_selector(self, state: _ClaimState) -> NodeSelector | None:
        """Node-local devices pin the claim to the node; otherwise the merged terms of the devices used."""
        requirements: dict[tuple[str, str, str, frozenset[str]], NodeSelectorRequirement] = {}
        for _, candidate, *_ in state.picked:
            if candidate.node_local:
                return self.pools.local_selector
            if candidate.selector_error:
                raise AllocationError(f"claim {state.claim.key}: device {candidate.id}: {candidate.selector_error}")
            term = candidate.selector_term
            if term is None:
                continue  # allNodes: available everywhere
            for kind, reqs in (("expr", term.match_expressions), ("field", term.match_fields)):
                for req in reqs:
                    requirements.setdefault((kind, req.key, req.operator, frozenset(req.values)), req)
        if not requirements:
            return None
        expressions = tuple(req for key, req in requirements.items() if key[0] == "expr")
        fields = tuple(req for key, req in requirements.items() if key[0] == "field")
        return NodeSelector((NodeSelectorTerm(expressions, fields),))
