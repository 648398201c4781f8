"""A claim's requests set up for the search, once per allocator: every ``exactly`` request or
``firstAvailable`` subrequest becomes an ``Alternative`` (class looked up, selectors compiled,
capacity requests kept), and what no node can fix raises ``AllocationError``."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

from allocator.cel import SelectorCache, SelectorError
from allocator.constraints import Constraint, DistinctAttribute, MatchAttribute
from allocator.outcome import AllocationError
from allocator.types import (
    ALLOCATION_MODE_ALL,
    ALLOCATION_MODE_EXACT_COUNT,
    ALLOCATION_RESULTS_MAX_SIZE,
    DeviceClaim,
    DeviceClass,
    DeviceConstraint,
    DeviceSelector,
    DeviceToleration,
    ResourceClaim,
    ScaledQuantity,
)

__all__ = ["Alternative", "claim_constraint", "claim_requests"]

_NO_CAPACITY: tuple[object, ...] = ("capacity",)


def _capacity_key(capacity: Mapping[str, ScaledQuantity] | None) -> tuple[object, ...]:
    """A hashable key of capacity requests, for the per-device memo of what they consume."""
    return ("capacity", *sorted((k, q.value) for k, q in capacity.items())) if capacity else _NO_CAPACITY


@dataclass(frozen=True, slots=True, eq=False)
class Alternative:
    """A request as the search sees it: an ``exactly`` request or one ``firstAvailable`` subrequest."""

    request: str  # the parent request's name
    result_name: str  # "request" or "request/subrequest", as written into the results
    device_class: DeviceClass
    selectors: tuple[str, ...]  # class selectors first, then the request's
    all_devices: bool
    count: int
    admin_access: bool
    tolerations: tuple[DeviceToleration, ...]
    capacity: Mapping[str, ScaledQuantity] | None  # capacity.requests
    capacity_key: tuple[object, ...]  # hashable form of ``capacity``, for the per-device memo


def _check_constraint(where: str, constraint: DeviceConstraint) -> None:
    if constraint.match_attribute is None and constraint.distinct_attribute is None:
        raise AllocationError(f"{where}: empty constraint (unsupported constraint type?)")


def claim_constraint(constraint: DeviceConstraint) -> Constraint:
    if constraint.match_attribute is not None:
        return MatchAttribute(constraint.match_attribute, constraint.requests)
    return DistinctAttribute(constraint.distinct_attribute or "", constraint.requests)


def _alternatives(
    claim: ResourceClaim, index: int, classes: Mapping[str, DeviceClass], cache: SelectorCache
) -> tuple[Alternative, ...]:
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
    for (name, class_name, selectors, mode, count), (admin, tolerations, capacity) in zip(specs, extras, strict=True):
        where = f"claim {claim.key}, request {name}"
        if not class_name:
            raise AllocationError(f"{where}: deviceClassName is required")
        device_class = classes.get(class_name)
        if device_class is None:
            raise AllocationError(f"{where}: could not retrieve device class {class_name}")
        if mode not in (ALLOCATION_MODE_EXACT_COUNT, ALLOCATION_MODE_ALL):
            raise AllocationError(f"{where}: unsupported allocation mode {mode}")
        expressions = [*_expressions(device_class.selectors, f"device class {class_name}", cache)]
        expressions += _expressions(selectors, where, cache)
        out.append(
            Alternative(
                request=request.name,
                result_name=name,
                device_class=device_class,
                selectors=tuple(expressions),
                all_devices=mode == ALLOCATION_MODE_ALL,
                count=count,
                admin_access=admin,
                tolerations=tolerations,
                capacity=capacity,
                capacity_key=("capacity", *sorted((k, q.value) for k, q in capacity.items()))
                if capacity
                else _NO_CAPACITY,
            )
        )
    return tuple(out)


def _expressions(selectors: tuple[DeviceSelector, ...], where: str, cache: SelectorCache) -> list[str]:
    out = []
    for i, selector in enumerate(selectors):
        if selector.expression is None:
            raise AllocationError(f"{where}: selector #{i}: CEL expression empty (unsupported selector type?)")
        try:
            cache.compile(selector.expression)
        except SelectorError as exc:
            raise AllocationError(f"{where}: selector #{i}: {exc}") from None
        out.append(selector.expression)
    return out


Requests = tuple[tuple[Alternative, ...], ...]

# A claim's set-up is asked for by the filter, the scorer and the bind of one pod: kept per claim
# spec (the same frozen object), valid while every class it names is the same object.
_MEMO_SIZE = 64
_memo: OrderedDict[int, tuple[DeviceClaim, tuple[tuple[str, DeviceClass | None], ...], Requests]] = OrderedDict()


def _class_names(claim: ResourceClaim) -> list[str]:
    names = []
    for request in claim.requests:
        if request.exactly is not None:
            names.append(request.exactly.device_class_name)
        names.extend(s.device_class_name for s in request.first_available)
    return names


def claim_requests(claim: ResourceClaim, classes: Mapping[str, DeviceClass], cache: SelectorCache) -> Requests:
    """Per request its alternatives; raises ``AllocationError`` for what no node can fix."""
    spec = claim.devices
    found = _memo.get(id(spec))
    if found is not None and found[0] is spec and all(classes.get(n) is c for n, c in found[1]):
        return found[2]
    requests = _claim_requests(claim, classes, cache)
    _memo[id(spec)] = (spec, tuple((n, classes.get(n)) for n in _class_names(claim)), requests)
    _memo.move_to_end(id(spec))
    while len(_memo) > _MEMO_SIZE:
        _memo.popitem(last=False)
    return requests


def _claim_requests(claim: ResourceClaim, classes: Mapping[str, DeviceClass], cache: SelectorCache) -> Requests:
    requests = tuple(_alternatives(claim, i, classes, cache) for i in range(len(claim.requests)))
    minimum = sum(min((a.count if not a.all_devices else 1) for a in alts) for alts in requests)
    if minimum > ALLOCATION_RESULTS_MAX_SIZE:
        raise AllocationError(
            f"claim {claim.key}: number of requested devices {minimum} exceeds the claim limit of "
            f"{ALLOCATION_RESULTS_MAX_SIZE}"
        )
    for i, constraint in enumerate(claim.constraints):
        _check_constraint(f"claim {claim.key}, constraint #{i}", constraint)
    return requests
