"""resource.k8s.io/v1 objects parsed from the API server's JSON into ``allocator.types``.

Parsing is strict about *types* (a count that is not an integer is an error naming the field) and
lenient about *future extensions*: a selector without ``cel``, a request with neither ``exactly``
nor ``firstAvailable`` or a constraint of an unknown kind is kept, and the allocator refuses it
with an ``AllocationError`` when a pod actually uses it - as upstream's allocator does. That way a
newer API server never makes the cache drop an object.

KEP-5773 priorities: a real API server drops unknown fields of built-in types, so
``spec.priority`` / ``spec.pool.priority`` are read when present and otherwise the annotations
``dra.kube-gpu-extender.io/priority`` / ``dra.kube-gpu-extender.io/pool-priority`` (int64 as a
string).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from fractions import Fraction
from typing import Any

from allocator.errors import AllocatorError
from allocator.types import (
    ALLOCATION_MODE_EXACT_COUNT,
    ALLOCATION_RESULTS_MAX_SIZE,
    DEVICE_REQUESTS_MAX_SIZE,
    AllocatedDeviceStatus,
    AllocationResult,
    DeviceAllocationConfiguration,
    DeviceClaim,
    DeviceClaimConfiguration,
    DeviceClass,
    DeviceCondition,
    DeviceConstraint,
    DeviceRequest,
    DeviceRequestAllocationResult,
    DeviceSelector,
    DeviceSubRequest,
    DeviceToleration,
    ExactDeviceRequest,
    OpaqueDeviceConfiguration,
    ResourceClaim,
    ResourceClaimConsumer,
    ScaledQuantity,
)
from k8s_semantics.nodeselector import NodeSelector, NodeSelectorRequirement, NodeSelectorTerm
from k8s_semantics.quantity import QuantityError, parse_quantity

__all__ = [
    "ParseError",
    "parse_device_class",
    "parse_node_selector",
    "parse_resource_claim",
]

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_INT_TEXT = re.compile(r"[+-]?[0-9]+")


class ParseError(AllocatorError, ValueError):
    """A resource.k8s.io object that cannot be used; the message names the object and the field."""


class _Obj:
    """Field access with errors that name the object and the JSON path."""

    __slots__ = ("what",)

    def __init__(self, what: str) -> None:
        self.what = what

    def fail(self, path: str, message: str) -> ParseError:
        return ParseError(f"{self.what}: {path}: {message}")

    def obj(self, value: Any, path: str) -> Mapping[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self.fail(path, f"must be an object, not {type(value).__name__}")
        return value

    def seq(self, value: Any, path: str, limit: tuple[int, str] | None = None) -> list[Any]:
        """A list; ``limit`` = (most entries, the upstream constant) refuses a longer one."""
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(path, f"must be a list, not {type(value).__name__}")
        if limit is not None:
            self.at_most(len(value), limit, path)
        return value

    def at_most(self, size: int, limit: tuple[int, str], path: str) -> None:
        most, name = limit
        if size > most:
            raise self.fail(path, f"must have at most {most} entries ({name}), has {size}")

    def objects(
        self, value: Any, path: str, limit: tuple[int, str] | None = None
    ) -> Iterator[tuple[str, Mapping[str, Any]]]:
        """A list of objects (``spec.devices.config``...): each one's path (``[i]`` appended) and the object."""
        for i, item in enumerate(self.seq(value, path, limit)):
            item_path = f"{path}[{i}]"
            yield item_path, self.obj(item, item_path)

    def text(self, obj: Mapping[str, Any], key: str, path: str, *, required: bool = False) -> str:
        value = obj.get(key)
        if value is None:
            if required:
                raise self.fail(f"{path}.{key}" if path else key, "required")
            return ""
        if not isinstance(value, str):
            raise self.fail(f"{path}.{key}" if path else key, f"must be a string, not {type(value).__name__}")
        return value

    def opt_text(self, obj: Mapping[str, Any], key: str, path: str) -> str | None:
        return self.text(obj, key, path) if obj.get(key) is not None else None

    def int64(self, value: Any, path: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, f"must be an integer, not {type(value).__name__}")
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise self.fail(path, "out of the int64 range")
        return value

    def flag(self, obj: Mapping[str, Any], key: str, path: str) -> bool | None:
        value = obj.get(key)
        if value is None:
            return None
        if not isinstance(value, bool):
            raise self.fail(f"{path}.{key}", f"must be a boolean, not {type(value).__name__}")
        return value

    def strings(self, value: Any, path: str) -> tuple[str, ...]:
        items = self.seq(value, path)
        for i, item in enumerate(items):
            if not isinstance(item, str):
                raise self.fail(f"{path}[{i}]", f"must be a string, not {type(item).__name__}")
        return tuple(items)

    def string_map(self, value: Any, path: str) -> dict[str, str]:
        items = self.obj(value, path)
        for key, item in items.items():
            if not isinstance(item, str):
                raise self.fail(f"{path}[{key!r}]", f"must be a string, not {type(item).__name__}")
        return dict(items)

    def quantity(self, value: Any, path: str) -> Fraction:
        try:
            return parse_quantity(value)
        except QuantityError as exc:
            raise self.fail(path, str(exc)) from None

    def scaled(self, value: Any, path: str, *, non_negative: bool = False) -> ScaledQuantity:
        """A quantity with the text it was written as; ``non_negative`` refuses amounts below zero."""
        if value is None:
            raise self.fail(path, "required")
        exact = self.quantity(value, path)
        if non_negative and exact < 0:
            raise self.fail(path, f"must not be negative, is {value}")
        return ScaledQuantity(exact, str(value))


def _metadata(obj: Mapping[str, Any], kind: str, namespaced: bool) -> tuple[_Obj, Mapping[str, Any]]:
    if not isinstance(obj, Mapping):
        raise ParseError(f"{kind}: must be an object, not {type(obj).__name__}")
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        raise ParseError(f"{kind}: metadata: required")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ParseError(f"{kind}: metadata.name: required")
    namespace = meta.get("namespace")
    if namespaced and (not isinstance(namespace, str) or not namespace):
        raise ParseError(f"{kind} {name}: metadata.namespace: required")
    return _Obj(f"{kind} {namespace}/{name}" if namespaced else f"{kind} {name}"), meta


def _priority(o: _Obj, spec_value: Any, spec_path: str, annotations: Mapping[str, str], annotation: str) -> int:
    """A KEP-5773 priority: the spec field if present, else the annotation, else 0."""
    if spec_value is not None:
        return o.int64(spec_value, spec_path)
    text = annotations.get(annotation)
    if text is None:
        return 0
    # Go's strconv.ParseInt syntax: Python's int() would also take "1_000" and non-ASCII digits.
    if _INT_TEXT.fullmatch(text.strip()) is None:
        raise o.fail(f"metadata.annotations[{annotation!r}]", f"must be an int64, not {text!r}")
    value = int(text.strip(), 10)
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise o.fail(f"metadata.annotations[{annotation!r}]", "out of the int64 range")
    return value


def _selectors(o: _Obj, value: Any, path: str) -> tuple[DeviceSelector, ...]:
    out = []
    for p, sel in o.objects(value, path):
        cel = sel.get("cel")
        if cel is None:
            out.append(DeviceSelector(None))
            continue
        cel = o.obj(cel, f"{p}.cel")
        out.append(DeviceSelector(o.text(cel, "expression", f"{p}.cel", required=True)))
    return tuple(out)


def _opaque(o: _Obj, value: Any, path: str) -> OpaqueDeviceConfiguration | None:
    if value is None:
        return None
    opaque = o.obj(value, path)
    return OpaqueDeviceConfiguration(o.text(opaque, "driver", path, required=True), opaque.get("parameters"))


def _tolerations(o: _Obj, value: Any, path: str) -> tuple[DeviceToleration, ...]:
    out = []
    for p, t in o.objects(value, path):
        seconds = t.get("tolerationSeconds")
        out.append(
            DeviceToleration(
                key=o.text(t, "key", p),
                operator=o.text(t, "operator", p) or "Equal",
                value=o.text(t, "value", p),
                effect=o.text(t, "effect", p),
                toleration_seconds=None if seconds is None else o.int64(seconds, f"{p}.tolerationSeconds"),
            )
        )
    return tuple(out)


def _count(o: _Obj, req: Mapping[str, Any], path: str) -> tuple[str, int]:
    mode = o.text(req, "allocationMode", path) or ALLOCATION_MODE_EXACT_COUNT
    raw = req.get("count")
    if raw is None:
        return mode, 1
    count = o.int64(raw, f"{path}.count")
    if count < 1:
        raise o.fail(f"{path}.count", "must be >= 1")
    return mode, count


def _capacity_requests(o: _Obj, req: Mapping[str, Any], path: str) -> Mapping[str, ScaledQuantity] | None:
    """``capacity.requests``: capacity name -> amount (consumable capacity); None when absent."""
    capacity = req.get("capacity")
    if capacity is None:
        return None
    requests = o.obj(capacity, f"{path}.capacity").get("requests")
    if requests is None:
        return None
    rp = f"{path}.capacity.requests"
    return {k: o.scaled(v, f"{rp}[{k!r}]", non_negative=True) for k, v in o.obj(requests, rp).items()}


def parse_node_selector(value: Any, what: str = "NodeSelector", path: str = "nodeSelector") -> NodeSelector | None:
    """A core/v1 NodeSelector (``nodeSelectorTerms``); None when absent. Errors name ``what`` and ``path``."""
    return _node_selector(_Obj(what), value, path)


def _node_selector(o: _Obj, value: Any, path: str) -> NodeSelector | None:
    if value is None:
        return None
    sel = o.obj(value, path)
    terms = []
    for tp, term in o.objects(sel.get("nodeSelectorTerms"), f"{path}.nodeSelectorTerms"):
        parts: list[tuple[NodeSelectorRequirement, ...]] = []
        for key in ("matchExpressions", "matchFields"):
            reqs = []
            for rp, r in o.objects(term.get(key), f"{tp}.{key}"):
                reqs.append(
                    NodeSelectorRequirement(
                        o.text(r, "key", rp, required=True),
                        o.text(r, "operator", rp, required=True),
                        o.strings(r.get("values"), f"{rp}.values"),
                    )
                )
            parts.append(tuple(reqs))
        terms.append(NodeSelectorTerm(parts[0], parts[1]))
    return NodeSelector(tuple(terms))


def parse_device_class(obj: Mapping[str, Any]) -> DeviceClass:
    """A resource.k8s.io/v1 DeviceClass."""
    o, meta = _metadata(obj, "DeviceClass", namespaced=False)
    spec = o.obj(obj.get("spec"), "spec")
    config = []
    for p, item in o.objects(spec.get("config"), "spec.config"):
        config.append(_opaque(o, item.get("opaque"), f"{p}.opaque"))
    return DeviceClass(
        name=meta["name"],
        selectors=_selectors(o, spec.get("selectors"), "spec.selectors"),
        config=tuple(config),
        extended_resource_name=o.opt_text(spec, "extendedResourceName", "spec"),
        uid=o.text(meta, "uid", "metadata"),
        resource_version=o.text(meta, "resourceVersion", "metadata"),
        creation_timestamp=o.text(meta, "creationTimestamp", "metadata"),
    )


def _request(o: _Obj, item: Any, path: str) -> DeviceRequest:
    req = o.obj(item, path)
    name = o.text(req, "name", path, required=True)
    exactly_raw = req.get("exactly")
    subs_raw = req.get("firstAvailable")
    if exactly_raw is not None and subs_raw:
        raise o.fail(path, "must specify exactly one of exactly or firstAvailable")
    exactly = None
    if exactly_raw is not None:
        ep = f"{path}.exactly"
        ex = o.obj(exactly_raw, ep)
        mode, count = _count(o, ex, ep)
        exactly = ExactDeviceRequest(
            device_class_name=o.text(ex, "deviceClassName", ep),
            selectors=_selectors(o, ex.get("selectors"), f"{ep}.selectors"),
            allocation_mode=mode,
            count=count,
            admin_access=o.flag(ex, "adminAccess", ep),
            tolerations=_tolerations(o, ex.get("tolerations"), f"{ep}.tolerations"),
            capacity_requests=_capacity_requests(o, ex, ep),
        )
    subs = []
    for sp, sub in o.objects(subs_raw, f"{path}.firstAvailable"):
        mode, count = _count(o, sub, sp)
        subs.append(
            DeviceSubRequest(
                name=o.text(sub, "name", sp, required=True),
                device_class_name=o.text(sub, "deviceClassName", sp),
                selectors=_selectors(o, sub.get("selectors"), f"{sp}.selectors"),
                allocation_mode=mode,
                count=count,
                tolerations=_tolerations(o, sub.get("tolerations"), f"{sp}.tolerations"),
                capacity_requests=_capacity_requests(o, sub, sp),
            )
        )
    return DeviceRequest(name, exactly, tuple(subs))


def _join(prefix: str, path: str) -> str:
    return f"{prefix}.{path}" if prefix else path


def _allocation(o: _Obj, obj: Any, prefix: str) -> AllocationResult:
    """``status.allocation``; ``prefix`` is its path in the enclosing object (for error messages)."""
    alloc = o.obj(obj, prefix or "allocation")
    devices = o.obj(alloc.get("devices"), _join(prefix, "devices"))
    results = []
    results_limit = (ALLOCATION_RESULTS_MAX_SIZE, "AllocationResultsMaxSize")
    for p, r in o.objects(devices.get("results"), _join(prefix, "devices.results"), results_limit):
        consumed = r.get("consumedCapacity")
        results.append(
            DeviceRequestAllocationResult(
                request=o.text(r, "request", p, required=True),
                driver=o.text(r, "driver", p, required=True),
                pool=o.text(r, "pool", p, required=True),
                device=o.text(r, "device", p, required=True),
                admin_access=o.flag(r, "adminAccess", p),
                tolerations=_tolerations(o, r.get("tolerations"), f"{p}.tolerations"),
                binding_conditions=o.strings(r.get("bindingConditions"), f"{p}.bindingConditions"),
                binding_failure_conditions=o.strings(
                    r.get("bindingFailureConditions"), f"{p}.bindingFailureConditions"
                ),
                share_id=o.opt_text(r, "shareID", p),
                consumed_capacity=None
                if consumed is None
                else {
                    k: o.scaled(v, f"{p}.consumedCapacity[{k!r}]").text
                    for k, v in o.obj(consumed, f"{p}.consumedCapacity").items()
                },
            )
        )
    config = []
    for p, c in o.objects(devices.get("config"), _join(prefix, "devices.config")):
        config.append(
            DeviceAllocationConfiguration(
                o.text(c, "source", p, required=True),
                o.strings(c.get("requests"), f"{p}.requests"),
                _opaque(o, c.get("opaque"), f"{p}.opaque"),
            )
        )
    return AllocationResult(
        devices=tuple(results),
        config=tuple(config),
        node_selector=_node_selector(o, alloc.get("nodeSelector"), _join(prefix, "nodeSelector")),
        allocation_timestamp=o.opt_text(alloc, "allocationTimestamp", prefix),
    )


def parse_resource_claim(obj: Mapping[str, Any]) -> ResourceClaim:
    """A resource.k8s.io/v1 ResourceClaim, including ``status.allocation`` and ``status.reservedFor``."""
    o, meta = _metadata(obj, "ResourceClaim", namespaced=True)
    devices = o.obj(o.obj(obj.get("spec"), "spec").get("devices"), "spec.devices")
    requests = tuple(
        _request(o, item, f"spec.devices.requests[{i}]")
        for i, item in enumerate(
            o.seq(devices.get("requests"), "spec.devices.requests", (DEVICE_REQUESTS_MAX_SIZE, "DeviceRequestsMaxSize"))
        )
    )
    constraints = []
    for cp, c in o.objects(devices.get("constraints"), "spec.devices.constraints"):
        match, distinct = o.opt_text(c, "matchAttribute", cp), o.opt_text(c, "distinctAttribute", cp)
        if match is not None and distinct is not None:
            raise o.fail(cp, "must specify exactly one of matchAttribute or distinctAttribute")
        constraints.append(DeviceConstraint(o.strings(c.get("requests"), f"{cp}.requests"), match, distinct))
    config = []
    for cp, c in o.objects(devices.get("config"), "spec.devices.config"):
        config.append(
            DeviceClaimConfiguration(
                o.strings(c.get("requests"), f"{cp}.requests"), _opaque(o, c.get("opaque"), f"{cp}.opaque")
            )
        )

    status = o.obj(obj.get("status"), "status")
    allocation = None if status.get("allocation") is None else _allocation(o, status["allocation"], "status.allocation")
    reserved = []
    for rp, r in o.objects(status.get("reservedFor"), "status.reservedFor"):
        reserved.append(
            ResourceClaimConsumer(
                o.text(r, "resource", rp), o.text(r, "name", rp), o.text(r, "uid", rp), o.text(r, "apiGroup", rp)
            )
        )

    statuses = []
    for dp, d in o.objects(status.get("devices"), "status.devices"):
        conditions = []
        for cp, c in o.objects(d.get("conditions"), f"{dp}.conditions"):
            conditions.append(
                DeviceCondition(
                    o.text(c, "type", cp, required=True),
                    o.text(c, "status", cp, required=True),
                    o.text(c, "reason", cp),
                    o.text(c, "message", cp),
                )
            )
        statuses.append(
            AllocatedDeviceStatus(
                driver=o.text(d, "driver", dp, required=True),
                pool=o.text(d, "pool", dp, required=True),
                device=o.text(d, "device", dp, required=True),
                share_id=o.opt_text(d, "shareID", dp),
                conditions=tuple(conditions),
            )
        )

    owner = None
    for p, ref in o.objects(meta.get("ownerReferences"), "metadata.ownerReferences"):
        if ref.get("controller") is True and ref.get("kind") == "Pod" and ref.get("apiVersion", "v1") == "v1":
            owner = o.text(ref, "uid", p)
    return ResourceClaim(
        namespace=meta["namespace"],
        name=meta["name"],
        uid=o.text(meta, "uid", "metadata"),
        resource_version=o.text(meta, "resourceVersion", "metadata"),
        devices=DeviceClaim(requests, tuple(constraints), tuple(config)),
        allocation=allocation,
        reserved_for=tuple(reserved),
        deleting=meta.get("deletionTimestamp") is not None,
        finalizers=o.strings(meta.get("finalizers"), "metadata.finalizers"),
        owner_pod_uid=owner,
        annotations=o.string_map(meta.get("annotations"), "metadata.annotations"),
        labels=o.string_map(meta.get("labels"), "metadata.labels"),
        device_statuses=tuple(statuses),
    )
