"""The allocation search: all of a pod's claims on one node, first complete solution wins.

This is kube-scheduler's structured allocator (``incubating``) over KEP-5773-ordered pools:

* claims in pod order, requests in claim order, ``firstAvailable`` subrequests in order (a later
  request can force a fall back to a later subrequest), and for every device slot the candidates in
  pool -> slice -> device order. Within one request the next slot resumes after the previous
  device, so combinations are tried, never permutations.
* A candidate is skipped when it is in use (allocated to another claim, in flight for another pod,
  or picked earlier in this attempt), not selectable (class selectors first, then the request's,
  then per-device node selection), needs a feature we do not implement, carries a NoSchedule /
  NoExecute taint the request does not tolerate, or breaks a ``matchAttribute`` constraint.
* No scoring: priorities already are the order, so the first complete solution is the answer.

Outcomes, with upstream's split: ``Allocated`` (one AllocationResult per claim), ``Unschedulable``
(this node cannot do it; another node may) or ``AllocationError`` raised (the pod is at fault
everywhere: unknown class, a selector that does not compile or fails at runtime, an ``All``
request on a node whose pools are being updated, a claim asking for more than 32 devices).
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, field

from allocator.cel import SelectorCache, SelectorError
from allocator.errors import AllocatorError
from allocator.pools import Candidate, NodePools
from allocator.types import (
    ALLOCATION_MODE_ALL,
    ALLOCATION_MODE_EXACT_COUNT,
    ALLOCATION_RESULTS_MAX_SIZE,
    CONFIG_SOURCE_CLAIM,
    CONFIG_SOURCE_CLASS,
    AllocationResult,
    Attribute,
    DeviceAllocationConfiguration,
    DeviceClass,
    DeviceConstraint,
    DeviceID,
    DeviceRequestAllocationResult,
    DeviceSelector,
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

REASON_CANNOT_ALLOCATE = "cannot allocate all claims"  # upstream's node-level message
REASON_INVALID_POOLS = "invalid resource pools were encountered"


class AllocationError(AllocatorError):
    """The pod cannot be scheduled anywhere as it is (not a property of one node)."""


@dataclass(frozen=True, slots=True)
class Allocated:
    """One AllocationResult per claim, in the order the claims were given."""

    results: tuple[AllocationResult, ...]


@dataclass(frozen=True, slots=True)
class Unschedulable:
    """The claims cannot be allocated on this node."""

    reason: str


@dataclass(frozen=True, slots=True, eq=False)
class _Alternative:
    """A request as the search sees it: an ``exactly`` request or one ``firstAvailable`` subrequest."""

    request: str  # the parent request's name
    result_name: str  # "request" or "request/subrequest", as written into the results
    device_class: DeviceClass
    selectors: tuple[str, ...]  # class selectors first, then the request's
    all_devices: bool
    count: int
    admin_access: bool
    tolerations: tuple[DeviceToleration, ...]
    unsupported: str  # "" if the alternative can be satisfied by this extender at all


@dataclass(slots=True, eq=False)
class _MatchAttribute:
    """``matchAttribute``: the first device fixes the value, every later one must equal it."""

    attribute: str
    requests: tuple[str, ...]
    values: list[Attribute] = field(default_factory=list)

    def applies(self, alt: _Alternative) -> bool:
        return not self.requests or alt.request in self.requests or alt.result_name in self.requests

    def add(self, candidate: Candidate) -> bool:
        value = candidate.device.attribute(self.attribute, candidate.id.driver)
        if value is None:
            return False  # a device without the attribute never satisfies the constraint
        if self.values and value != self.values[0]:
            return False
        self.values.append(value)
        return True

    def remove(self) -> None:
        self.values.pop()


@dataclass(slots=True, eq=False)
class _ClaimState:
    claim: ResourceClaim
    requests: tuple[tuple[_Alternative, ...], ...]  # per request, its alternatives in order
    constraints: tuple[_MatchAttribute, ...]
    chosen: list[int]  # per request, the index of the alternative in use
    picked: list[tuple[_Alternative, Candidate]] = field(default_factory=list)


def _tolerated(candidate: Candidate, tolerations: tuple[DeviceToleration, ...]) -> bool:
    for taint in candidate.device.taints:
        if taint.blocks and not any(t.tolerates(taint) for t in tolerations):
            return False
    return True


def _check_constraint(where: str, constraint: DeviceConstraint) -> None:
    if constraint.distinct_attribute is not None:
        raise AllocationError(f"{where}: distinctAttribute (consumable capacity) is not supported")
    if constraint.match_attribute is None:
        raise AllocationError(f"{where}: empty constraint (unsupported constraint type?)")


class Allocator:
    """Allocates claims against a fixed view of classes and devices in use (one per filter request).

    ``allocated`` is every device held by a claim's ``status.allocation`` or in flight for another
    pod. A claim's requests are set up (classes looked up, selectors compiled) once per allocator,
    and selector results are memoised per device, so a filter over many nodes does per-node work
    only for the search itself.
    """

    def __init__(
        self, classes: Mapping[str, DeviceClass], allocated: Container[DeviceID], selectors: SelectorCache
    ) -> None:
        self.classes = classes
        self.allocated = allocated
        self.selectors = selectors
        self._setup: dict[int, tuple[ResourceClaim, tuple[tuple[_Alternative, ...], ...]]] = {}

    # ------------------------------------------------------------------ setup (per claim)
    def _alternatives(self, claim: ResourceClaim, index: int) -> tuple[_Alternative, ...]:
        request = claim.requests[index]
        where = f"claim {claim.key}, request {request.name}"
        if request.exactly is not None:
            ex = request.exactly
            specs = [(request.name, ex.device_class_name, ex.selectors, ex.allocation_mode, ex.count)]
            extras = [(bool(ex.admin_access), ex.tolerations, ex.capacity_requests)]
        elif request.first_available:
            specs = [
                (f"{request.name}/{s.name}", s.device_class_name, s.selectors, s.allocation_mode, s.count)
                for s in request.first_available
            ]
            extras = [(False, s.tolerations, s.capacity_requests) for s in request.first_available]
        else:
            raise AllocationError(f"{where}: unsupported request type (neither exactly nor firstAvailable)")
        out = []
        for (name, class_name, selectors, mode, count), (admin, tolerations, capacity) in zip(
            specs, extras, strict=True
        ):
            where = f"claim {claim.key}, request {name}"
            if not class_name:
                raise AllocationError(f"{where}: deviceClassName is required")
            device_class = self.classes.get(class_name)
            if device_class is None:
                raise AllocationError(f"{where}: could not retrieve device class {class_name}")
            if mode not in (ALLOCATION_MODE_EXACT_COUNT, ALLOCATION_MODE_ALL):
                raise AllocationError(f"{where}: unsupported allocation mode {mode}")
            expressions = [*self._expressions(device_class.selectors, f"device class {class_name}")]
            expressions += self._expressions(selectors, where)
            out.append(
                _Alternative(
                    request=request.name,
                    result_name=name,
                    device_class=device_class,
                    selectors=tuple(expressions),
                    all_devices=mode == ALLOCATION_MODE_ALL,
                    count=count,
                    admin_access=admin,
                    tolerations=tolerations,
                    unsupported="capacity requests (consumable capacity) are not supported" if capacity else "",
                )
            )
        return tuple(out)

    def _expressions(self, selectors: tuple[DeviceSelector, ...], where: str) -> list[str]:
        out = []
        for i, selector in enumerate(selectors):
            if selector.expression is None:
                raise AllocationError(f"{where}: selector #{i}: CEL expression empty (unsupported selector type?)")
            try:
                self.selectors.compile(selector.expression)
            except SelectorError as exc:
                raise AllocationError(f"{where}: selector #{i}: {exc}") from None
            out.append(selector.expression)
        return out

    def _claim_state(self, claim: ResourceClaim) -> _ClaimState:
        setup = self._setup.get(id(claim))
        if setup is not None and setup[0] is claim:
            requests = setup[1]
        else:
            requests = self._requests(claim)
            self._setup[id(claim)] = (claim, requests)
        constraints = tuple(_MatchAttribute(c.match_attribute or "", c.requests) for c in claim.constraints)
        return _ClaimState(claim, requests, constraints, [0] * len(requests))

    def _requests(self, claim: ResourceClaim) -> tuple[tuple[_Alternative, ...], ...]:
        """Per request its alternatives; raises ``AllocationError`` for what no node can fix."""
        requests = tuple(self._alternatives(claim, i) for i in range(len(claim.requests)))
        minimum = sum(min((a.count if not a.all_devices else 1) for a in alts) for alts in requests)
        if minimum > ALLOCATION_RESULTS_MAX_SIZE:
            raise AllocationError(
                f"claim {claim.key}: number of requested devices {minimum} exceeds the claim limit of "
                f"{ALLOCATION_RESULTS_MAX_SIZE}"
            )
        for i, constraint in enumerate(claim.constraints):
            _check_constraint(f"claim {claim.key}, constraint #{i}", constraint)
        return requests

    # ------------------------------------------------------------------ the search
    def allocate(self, node: NodeRef, pools: NodePools, claims: Sequence[ResourceClaim]) -> Allocated | Unschedulable:
        """All ``claims`` together on ``node``, or why not; raises ``AllocationError`` for the pod."""
        if not claims:
            return Allocated(())
        search = _Search(self, node, pools, [self._claim_state(c) for c in claims])
        if search.run():
            return Allocated(tuple(search.result(state) for state in search.states))
        if pools.has_invalid:
            names = ", ".join(p.id for p in pools.unusable if p.invalid)
            return Unschedulable(f"{REASON_INVALID_POOLS} ({names})")
        return Unschedulable(REASON_CANNOT_ALLOCATE)

    def selectable(self, candidate: Candidate, alt: _Alternative) -> bool:
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

    def __init__(self, allocator: Allocator, node: NodeRef, pools: NodePools, states: list[_ClaimState]) -> None:
        self.allocator = allocator
        self.node = node
        self.pools = pools
        self.states = states
        self.candidates = pools.candidates
        # device -> its holders in this attempt, (claim index, admin access), in push order: with
        # admin access several claims can hold one device, and each pop must drop only its own hold.
        self.picked: dict[DeviceID, list[tuple[int, bool]]] = {}
        self._selectable: dict[tuple[int, int], bool] = {}  # (candidate index, id(alternative))
        self._all: dict[int, list[int]] = {}  # id(alternative) -> candidate indices of an All request

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
            if alt.unsupported:
                continue
            state.chosen[r] = index
            if alt.all_devices:
                if self._take_all(c, r, alt):
                    return True
            elif self._slot(c, r, alt, 0, 0):
                return True
        return False

    def _slot(self, c: int, r: int, alt: _Alternative, done: int, start: int) -> bool:
        if done == alt.count:
            return self._request(c, r + 1)
        state = self.states[c]
        if len(state.picked) + alt.count - done > ALLOCATION_RESULTS_MAX_SIZE:
            return False  # this choice would exceed the claim's results; keep searching for another
        for i in range(start, len(self.candidates)):
            candidate = self.candidates[i]
            if not self._usable(c, i, candidate, alt):
                continue
            if not self._push(c, alt, candidate):
                continue
            if self._slot(c, r, alt, done + 1, i + 1):
                return True
            self._pop(c)
        return False

    def _take_all(self, c: int, r: int, alt: _Alternative) -> bool:
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
            # In use or an untolerated taint: "All" cannot be met (taints are checked when a device
            # is allocated, as upstream does, so they never shrink the list to a subset).
            if self._in_use(c, candidate.id, alt.admin_access) or not _tolerated(candidate, alt.tolerations):
                ok = False
                break
            if not self._push(c, alt, candidate):
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

    def _all_devices(self, c: int, alt: _Alternative) -> list[int]:
        """Every selectable device on the node, for an ``All`` request (pools must all be usable)."""
        found = self._all.get(id(alt))
        if found is not None:
            return found
        for pool in self.pools.unusable:
            what = "currently being updated" if pool.incomplete else "currently invalid"
            raise AllocationError(
                f"claim {self.states[c].claim.key}, request {alt.result_name}: asks for all devices, but resource "
                f"pool {pool.id} is {what}"
            )
        indices = [i for i, candidate in enumerate(self.candidates) if self._selectable_for(i, candidate, alt)]
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

    def _selectable_for(self, i: int, candidate: Candidate, alt: _Alternative) -> bool:
        key = (i, id(alt))
        found = self._selectable.get(key)
        if found is None:
            device = candidate.device
            found = (
                not device.unsupported and self.allocator.selectable(candidate, alt) and i not in self.pools.off_node
            )
            self._selectable[key] = found
        return found

    def _usable(self, c: int, i: int, candidate: Candidate, alt: _Alternative) -> bool:
        return (
            not self._in_use(c, candidate.id, alt.admin_access)
            and self._selectable_for(i, candidate, alt)
            and _tolerated(candidate, alt.tolerations)
        )

    def _push(self, c: int, alt: _Alternative, candidate: Candidate) -> bool:
        """Take the device for the claim if every constraint accepts it (rolled back otherwise)."""
        state = self.states[c]
        applied: list[_MatchAttribute] = []
        for constraint in state.constraints:
            if not constraint.applies(alt):
                continue
            if not constraint.add(candidate):
                for done in applied:
                    done.remove()
                return False
            applied.append(constraint)
        state.picked.append((alt, candidate))
        self.picked.setdefault(candidate.id, []).append((c, alt.admin_access))
        return True

    def _pop(self, c: int) -> None:
        state = self.states[c]
        alt, candidate = state.picked.pop()
        holders = self.picked[candidate.id]
        holders.pop()  # the search is depth-first, so the last hold is this one
        if not holders:
            del self.picked[candidate.id]
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
            )
            for alt, candidate in state.picked
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
        for _, candidate in state.picked:
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
