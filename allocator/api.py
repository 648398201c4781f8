"""resource.k8s.io/v1 objects as the allocator needs them, parsed from the API server's JSON.

Parsing is strict about *types* (a count that is not an integer is an error naming the field) and
lenient about *future extensions*: a selector without ``cel``, a request with neither ``exactly``
nor ``firstAvailable`` or a constraint of an unknown kind is kept, and the allocator refuses it
with an ``AllocationError`` when a pod actually uses it - as upstream's allocator does. That way a
newer API server never makes the cache drop an object.

KEP-5773 priorities are a local extension: a real API server drops unknown fields of built-in
types, so ``spec.priority`` / ``spec.pool.priority`` are read when present and otherwise the
annotations ``dra.kube-gpu-extender.io/priority`` / ``dra.kube-gpu-extender.io/pool-priority``
(int64 as a string). Unset means 0; higher values are tried first.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, NamedTuple

from allocator.errors import AllocatorError
from k8s_semantics.nodeselector import NodeSelector, NodeSelectorRequirement, NodeSelectorTerm
from k8s_semantics.taints import tolerates
from scoring.quantity import QuantityError, parse_quantity

__all__ = [
    "ALLOCATION_MODE_ALL",
    "ALLOCATION_MODE_EXACT_COUNT",
    "ALLOCATION_RESULTS_MAX_SIZE",
    "CONFIG_SOURCE_CLAIM",
    "CONFIG_SOURCE_CLASS",
    "POOL_PRIORITY_ANNOTATION",
    "PRIORITY_ANNOTATION",
    "AllocationResult",
    "Attribute",
    "CounterSet",
    "Device",
    "DeviceAllocationConfiguration",
    "DeviceCapacity",
    "DeviceClaim",
    "DeviceClaimConfiguration",
    "DeviceClass",
    "DeviceConstraint",
    "DeviceCounterConsumption",
    "DeviceID",
    "DeviceRequest",
    "DeviceRequestAllocationResult",
    "DeviceSelector",
    "DeviceSubRequest",
    "DeviceTaint",
    "DeviceToleration",
    "ExactDeviceRequest",
    "NodeRef",
    "NodeSelector",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "OpaqueDeviceConfiguration",
    "ParseError",
    "ResourceClaim",
    "ResourceClaimConsumer",
    "ResourcePool",
    "ResourceSlice",
    "parse_device_class",
    "parse_node_selector",
    "parse_resource_claim",
    "parse_resource_slice",
]

ALLOCATION_RESULTS_MAX_SIZE = 32  # resourceapi.AllocationResultsMaxSize: results per claim
ALLOCATION_MODE_EXACT_COUNT = "ExactCount"
ALLOCATION_MODE_ALL = "All"
CONFIG_SOURCE_CLASS = "FromClass"
CONFIG_SOURCE_CLAIM = "FromClaim"
PRIORITY_ANNOTATION = "dra.kube-gpu-extender.io/priority"
POOL_PRIORITY_ANNOTATION = "dra.kube-gpu-extender.io/pool-priority"

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_INT_TEXT = re.compile(r"[+-]?[0-9]+")


class ParseError(AllocatorError, ValueError):
    """A resource.k8s.io object that cannot be used; the message names the object and the field."""


class DeviceID(NamedTuple):
    """A device, cluster-wide: upstream's ``DeviceID`` (driver, pool, device)."""

    driver: str
    pool: str
    device: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


@dataclass(frozen=True, slots=True)
class NodeRef:
    """What the allocator needs of a node: its name (``metadata.name`` fields) and labels."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------- node selectors
# NodeSelector, NodeSelectorTerm, NodeSelectorRequirement: k8s_semantics.nodeselector (imported above).


# ---------------------------------------------------------------------------------------- classes and claims


@dataclass(frozen=True, slots=True)
class DeviceSelector:
    """One selector; ``expression`` is None for a selector kind this code does not know (refused when used)."""

    expression: str | None


@dataclass(frozen=True, slots=True)
class OpaqueDeviceConfiguration:
    driver: str
    parameters: Any  # the raw JSON value, copied into the allocation unchanged


@dataclass(frozen=True, slots=True)
class DeviceClass:
    name: str
    selectors: tuple[DeviceSelector, ...] = ()
    config: tuple[OpaqueDeviceConfiguration | None, ...] = ()  # None: a config kind we do not know
    extended_resource_name: str | None = None
    uid: str = ""
    resource_version: str = ""


@dataclass(frozen=True, slots=True)
class DeviceToleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None

    def tolerates(self, taint: DeviceTaint) -> bool:
        """resourceclaim.ToleratesTaint, which is core/v1's (k8s_semantics.taints)."""
        return tolerates(self, taint)


@dataclass(frozen=True, slots=True)
class ExactDeviceRequest:
    device_class_name: str
    selectors: tuple[DeviceSelector, ...] = ()
    allocation_mode: str = ALLOCATION_MODE_EXACT_COUNT
    count: int = 1
    admin_access: bool | None = None
    tolerations: tuple[DeviceToleration, ...] = ()
    capacity_requests: Mapping[str, str] | None = None


@dataclass(frozen=True, slots=True)
class DeviceSubRequest:
    name: str
    device_class_name: str
    selectors: tuple[DeviceSelector, ...] = ()
    allocation_mode: str = ALLOCATION_MODE_EXACT_COUNT
    count: int = 1
    tolerations: tuple[DeviceToleration, ...] = ()
    capacity_requests: Mapping[str, str] | None = None


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """A request: ``exactly`` one kind of device, or the ``first_available`` of several alternatives."""

    name: str
    exactly: ExactDeviceRequest | None = None
    first_available: tuple[DeviceSubRequest, ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceConstraint:
    """``match_attribute`` or ``distinct_attribute`` (neither: a future kind, refused when used)."""

    requests: tuple[str, ...] = ()
    match_attribute: str | None = None
    distinct_attribute: str | None = None


@dataclass(frozen=True, slots=True)
class DeviceClaimConfiguration:
    requests: tuple[str, ...] = ()
    opaque: OpaqueDeviceConfiguration | None = None


@dataclass(frozen=True, slots=True)
class DeviceClaim:
    """``spec.devices`` of a ResourceClaim."""

    requests: tuple[DeviceRequest, ...] = ()
    constraints: tuple[DeviceConstraint, ...] = ()
    config: tuple[DeviceClaimConfiguration, ...] = ()


@dataclass(frozen=True, slots=True)
class ResourceClaimConsumer:
    """One ``status.reservedFor`` entry."""

    resource: str
    name: str
    uid: str
    api_group: str = ""


@dataclass(frozen=True, slots=True)
class DeviceRequestAllocationResult:
    """One allocated device (``status.allocation.devices.results[]``)."""

    request: str
    driver: str
    pool: str
    device: str
    admin_access: bool | None = None
    tolerations: tuple[DeviceToleration, ...] = ()
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()
    share_id: str | None = None
    consumed_capacity: Mapping[str, str] | None = None

    @property
    def id(self) -> DeviceID:
        return DeviceID(self.driver, self.pool, self.device)


@dataclass(frozen=True, slots=True)
class DeviceAllocationConfiguration:
    source: str  # FromClass | FromClaim
    requests: tuple[str, ...] = ()  # empty: applies to every request
    opaque: OpaqueDeviceConfiguration | None = None


@dataclass(frozen=True, slots=True)
class AllocationResult:
    """``status.allocation``. Go nests results and config under ``devices``; here they are flat.

    ``devices`` are the results in the order the search picked them; ``config`` has the class
    configs first, then the claim's; ``node_selector`` None means "available on every node".
    """

    devices: tuple[DeviceRequestAllocationResult, ...] = ()
    config: tuple[DeviceAllocationConfiguration, ...] = ()
    node_selector: NodeSelector | None = None
    allocation_timestamp: str | None = None

    @property
    def results(self) -> tuple[DeviceRequestAllocationResult, ...]:
        """Go's ``devices.results``."""
        return self.devices


@dataclass(frozen=True, slots=True)
class ResourceClaim:
    namespace: str
    name: str
    uid: str = ""
    resource_version: str = ""
    devices: DeviceClaim = field(default_factory=DeviceClaim)
    allocation: AllocationResult | None = None
    reserved_for: tuple[ResourceClaimConsumer, ...] = ()
    deleting: bool = False
    finalizers: tuple[str, ...] = ()
    owner_pod_uid: str | None = None  # the controlling ownerReference, when it is a Pod
    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def requests(self) -> tuple[DeviceRequest, ...]:
        return self.devices.requests

    @property
    def constraints(self) -> tuple[DeviceConstraint, ...]:
        return self.devices.constraints

    @property
    def config(self) -> tuple[DeviceClaimConfiguration, ...]:
        return self.devices.config


# ---------------------------------------------------------------------------------------- slices


class Attribute(NamedTuple):
    """A device attribute: ``kind`` is int | bool | string | version (or a list form: ints ...)."""

    kind: str
    value: Any


@dataclass(frozen=True, slots=True)
class DeviceCapacity:
    value: Fraction  # exact
    text: str  # as published, for display
    request_policy: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class DeviceTaint:
    key: str
    effect: str
    value: str = ""
    time_added: str | None = None

    @property
    def blocks(self) -> bool:
        """Only NoSchedule and NoExecute keep a device from being allocated (None and unknown ones do not)."""
        return self.effect in ("NoSchedule", "NoExecute")


@dataclass(frozen=True, slots=True)
class DeviceCounterConsumption:
    counter_set: str
    counters: Mapping[str, Fraction]


@dataclass(frozen=True, slots=True)
class CounterSet:
    name: str
    counters: Mapping[str, Fraction]


@dataclass(frozen=True, slots=True)
class Device:
    """One device of a ResourceSlice.

    ``unsupported`` says why this extender never allocates the device ("" if it may): it needs a
    feature we do not implement (shared counters, binding conditions, multiple allocations, list
    attributes), and allocating it without honouring that feature would be wrong.

    ``memo`` belongs to the allocator: CEL results for this device object, keyed by expression.
    A re-published slice is parsed into new Device objects, so results never outlive the data.
    """

    name: str
    attributes: Mapping[str, Attribute] = field(default_factory=dict)
    capacity: Mapping[str, DeviceCapacity] = field(default_factory=dict)
    consumes_counters: tuple[DeviceCounterConsumption, ...] = ()
    taints: tuple[DeviceTaint, ...] = ()
    binds_to_node: bool = False
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()
    allow_multiple_allocations: bool = False
    node_name: str | None = None
    node_selector: NodeSelector | None = None
    all_nodes: bool = False
    unsupported: str = ""
    memo: dict[object, Any] = field(default_factory=dict, compare=False, repr=False)

    def attribute(self, qualified_name: str, driver: str) -> Attribute | None:
        """upstream lookupAttribute: the fully qualified name, or the bare name in the driver's domain."""
        found = self.attributes.get(qualified_name)
        if found is not None:
            return found
        domain, sep, bare = qualified_name.partition("/")
        if sep and domain == driver:
            return self.attributes.get(bare)
        return None


@dataclass(frozen=True, slots=True)
class ResourcePool:
    name: str
    generation: int
    resource_slice_count: int
    priority: int = 0  # KEP-5773 pool priority (unset = 0)


@dataclass(frozen=True, slots=True)
class ResourceSlice:
    name: str
    driver: str
    pool: ResourcePool
    priority: int = 0  # KEP-5773 slice priority within its pool (unset = 0)
    node_name: str | None = None
    node_selector: NodeSelector | None = None
    all_nodes: bool = False
    per_device_node_selection: bool = False
    devices: tuple[Device, ...] = ()
    shared_counters: tuple[CounterSet, ...] = ()
    uid: str = ""
    resource_version: str = ""

    @property
    def node_local(self) -> bool:
        return self.node_name is not None


# ======================================================================================== parsing


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

    def seq(self, value: Any, path: str) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(path, f"must be a list, not {type(value).__name__}")
        return value

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
    for i, item in enumerate(o.seq(value, path)):
        sel = o.obj(item, f"{path}[{i}]")
        cel = sel.get("cel")
        if cel is None:
            out.append(DeviceSelector(None))
            continue
        cel = o.obj(cel, f"{path}[{i}].cel")
        out.append(DeviceSelector(o.text(cel, "expression", f"{path}[{i}].cel", required=True)))
    return tuple(out)


def _opaque(o: _Obj, value: Any, path: str) -> OpaqueDeviceConfiguration | None:
    if value is None:
        return None
    opaque = o.obj(value, path)
    return OpaqueDeviceConfiguration(o.text(opaque, "driver", path, required=True), opaque.get("parameters"))


def _tolerations(o: _Obj, value: Any, path: str) -> tuple[DeviceToleration, ...]:
    out = []
    for i, item in enumerate(o.seq(value, path)):
        p = f"{path}[{i}]"
        t = o.obj(item, p)
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


def _capacity_requests(o: _Obj, req: Mapping[str, Any], path: str) -> Mapping[str, str] | None:
    capacity = req.get("capacity")
    if capacity is None:
        return None
    requests = o.obj(capacity, f"{path}.capacity").get("requests")
    if requests is None:
        return None
    return {k: str(v) for k, v in o.obj(requests, f"{path}.capacity.requests").items()}


def parse_node_selector(value: Any, what: str = "NodeSelector", path: str = "nodeSelector") -> NodeSelector | None:
    """A core/v1 NodeSelector (``nodeSelectorTerms``); None when absent. Errors name ``what`` and ``path``."""
    return _node_selector(_Obj(what), value, path)


def _node_selector(o: _Obj, value: Any, path: str) -> NodeSelector | None:
    if value is None:
        return None
    sel = o.obj(value, path)
    terms = []
    for i, item in enumerate(o.seq(sel.get("nodeSelectorTerms"), f"{path}.nodeSelectorTerms")):
        tp = f"{path}.nodeSelectorTerms[{i}]"
        term = o.obj(item, tp)
        parts: list[tuple[NodeSelectorRequirement, ...]] = []
        for key in ("matchExpressions", "matchFields"):
            reqs = []
            for j, raw in enumerate(o.seq(term.get(key), f"{tp}.{key}")):
                rp = f"{tp}.{key}[{j}]"
                r = o.obj(raw, rp)
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
    for i, item in enumerate(o.seq(spec.get("config"), "spec.config")):
        config.append(_opaque(o, o.obj(item, f"spec.config[{i}]").get("opaque"), f"spec.config[{i}].opaque"))
    return DeviceClass(
        name=meta["name"],
        selectors=_selectors(o, spec.get("selectors"), "spec.selectors"),
        config=tuple(config),
        extended_resource_name=o.opt_text(spec, "extendedResourceName", "spec"),
        uid=o.text(meta, "uid", "metadata"),
        resource_version=o.text(meta, "resourceVersion", "metadata"),
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
    for j, raw in enumerate(o.seq(subs_raw, f"{path}.firstAvailable")):
        sp = f"{path}.firstAvailable[{j}]"
        sub = o.obj(raw, sp)
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
    for i, item in enumerate(o.seq(devices.get("results"), _join(prefix, "devices.results"))):
        p = _join(prefix, f"devices.results[{i}]")
        r = o.obj(item, p)
        share = r.get("shareID")
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
                share_id=None if share is None else str(share),
                consumed_capacity=None
                if consumed is None
                else {k: str(v) for k, v in o.obj(consumed, f"{p}.consumedCapacity").items()},
            )
        )
    config = []
    for i, item in enumerate(o.seq(devices.get("config"), _join(prefix, "devices.config"))):
        p = _join(prefix, f"devices.config[{i}]")
        c = o.obj(item, p)
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
        for i, item in enumerate(o.seq(devices.get("requests"), "spec.devices.requests"))
    )
    constraints = []
    for i, item in enumerate(o.seq(devices.get("constraints"), "spec.devices.constraints")):
        cp = f"spec.devices.constraints[{i}]"
        c = o.obj(item, cp)
        match, distinct = o.opt_text(c, "matchAttribute", cp), o.opt_text(c, "distinctAttribute", cp)
        if match is not None and distinct is not None:
            raise o.fail(cp, "must specify exactly one of matchAttribute or distinctAttribute")
        constraints.append(DeviceConstraint(o.strings(c.get("requests"), f"{cp}.requests"), match, distinct))
    config = []
    for i, item in enumerate(o.seq(devices.get("config"), "spec.devices.config")):
        cp = f"spec.devices.config[{i}]"
        c = o.obj(item, cp)
        config.append(
            DeviceClaimConfiguration(
                o.strings(c.get("requests"), f"{cp}.requests"), _opaque(o, c.get("opaque"), f"{cp}.opaque")
            )
        )

    status = o.obj(obj.get("status"), "status")
    allocation = None if status.get("allocation") is None else _allocation(o, status["allocation"], "status.allocation")
    reserved = []
    for i, item in enumerate(o.seq(status.get("reservedFor"), "status.reservedFor")):
        rp = f"status.reservedFor[{i}]"
        r = o.obj(item, rp)
        reserved.append(
            ResourceClaimConsumer(
                o.text(r, "resource", rp), o.text(r, "name", rp), o.text(r, "uid", rp), o.text(r, "apiGroup", rp)
            )
        )

    owner = None
    for i, item in enumerate(o.seq(meta.get("ownerReferences"), "metadata.ownerReferences")):
        ref = o.obj(item, f"metadata.ownerReferences[{i}]")
        if ref.get("controller") is True and ref.get("kind") == "Pod" and ref.get("apiVersion", "v1") == "v1":
            owner = o.text(ref, "uid", f"metadata.ownerReferences[{i}]")
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
    )


_ATTRIBUTE_KINDS = ("int", "bool", "string", "version", "ints", "bools", "strings", "versions")


def _attribute(o: _Obj, value: Any, path: str) -> Attribute:
    attr = o.obj(value, path)
    present = [kind for kind in _ATTRIBUTE_KINDS if attr.get(kind) is not None]
    if len(present) > 1:
        raise o.fail(path, f"must have exactly one value, has {', '.join(present)}")
    if not present:
        return Attribute("unknown", None)  # a future value type: the device is never allocated
    kind = present[0]
    raw = attr[kind]
    if kind == "int":
        return Attribute(kind, o.int64(raw, f"{path}.int"))
    if kind == "bool":
        if not isinstance(raw, bool):
            raise o.fail(f"{path}.bool", f"must be a boolean, not {type(raw).__name__}")
        return Attribute(kind, raw)
    if kind in ("string", "version"):
        if not isinstance(raw, str):
            raise o.fail(f"{path}.{kind}", f"must be a string, not {type(raw).__name__}")
        return Attribute(kind, raw)
    items = o.seq(raw, f"{path}.{kind}")
    if kind == "ints":
        return Attribute(kind, tuple(o.int64(v, f"{path}.ints[{i}]") for i, v in enumerate(items)))
    if kind == "bools":
        for i, v in enumerate(items):
            if not isinstance(v, bool):
                raise o.fail(f"{path}.bools[{i}]", f"must be a boolean, not {type(v).__name__}")
        return Attribute(kind, tuple(items))
    return Attribute(kind, o.strings(items, f"{path}.{kind}"))


def _counters(o: _Obj, value: Any, path: str) -> dict[str, Fraction]:
    out = {}
    for name, counter in o.obj(value, path).items():
        out[name] = o.quantity(o.obj(counter, f"{path}[{name!r}]").get("value"), f"{path}[{name!r}].value")
    return out


def _unsupported(
    attributes: Mapping[str, Attribute], counters: bool, binding_conditions: bool, multiple_allocations: bool
) -> str:
    """Why a device needs a feature this extender does not implement ("" if none)."""
    if counters:
        return "consumes shared counters (partitionable devices are not supported)"
    if binding_conditions:
        return "has binding conditions (not supported)"
    if multiple_allocations:
        return "allows multiple allocations (consumable capacity is not supported)"
    for name, attr in attributes.items():
        if attr.kind not in ("int", "bool", "string", "version"):
            return f"attribute {name} has a {attr.kind} value (list attributes are not supported)"
    return ""


def _device(o: _Obj, item: Any, path: str) -> Device:
    d = o.obj(item, path)
    attributes = {
        name: _attribute(o, value, f"{path}.attributes[{name!r}]")
        for name, value in o.obj(d.get("attributes"), f"{path}.attributes").items()
    }
    capacity = {}
    for name, value in o.obj(d.get("capacity"), f"{path}.capacity").items():
        cp = f"{path}.capacity[{name!r}]"
        cap = o.obj(value, cp)
        raw = cap.get("value")
        policy = cap.get("requestPolicy")
        capacity[name] = DeviceCapacity(
            o.quantity(raw, f"{cp}.value"), str(raw), None if policy is None else o.obj(policy, f"{cp}.requestPolicy")
        )
    consumes = []
    for i, raw in enumerate(o.seq(d.get("consumesCounters"), f"{path}.consumesCounters")):
        cp = f"{path}.consumesCounters[{i}]"
        c = o.obj(raw, cp)
        consumes.append(
            DeviceCounterConsumption(
                o.text(c, "counterSet", cp, required=True), _counters(o, c.get("counters"), f"{cp}.counters")
            )
        )
    taints = []
    for i, raw in enumerate(o.seq(d.get("taints"), f"{path}.taints")):
        tp = f"{path}.taints[{i}]"
        t = o.obj(raw, tp)
        taints.append(
            DeviceTaint(
                o.text(t, "key", tp, required=True),
                o.text(t, "effect", tp),
                o.text(t, "value", tp),
                o.opt_text(t, "timeAdded", tp),
            )
        )
    binding_conditions = o.strings(d.get("bindingConditions"), f"{path}.bindingConditions")
    multiple = bool(o.flag(d, "allowMultipleAllocations", path))
    return Device(
        name=o.text(d, "name", path, required=True),
        attributes=attributes,
        capacity=capacity,
        consumes_counters=tuple(consumes),
        taints=tuple(taints),
        binds_to_node=bool(o.flag(d, "bindsToNode", path)),
        binding_conditions=binding_conditions,
        binding_failure_conditions=o.strings(d.get("bindingFailureConditions"), f"{path}.bindingFailureConditions"),
        allow_multiple_allocations=multiple,
        node_name=o.text(d, "nodeName", path) or None,
        node_selector=_node_selector(o, d.get("nodeSelector"), f"{path}.nodeSelector"),
        all_nodes=bool(o.flag(d, "allNodes", path)),
        unsupported=_unsupported(attributes, bool(consumes), bool(binding_conditions), multiple),
    )


def parse_resource_slice(obj: Mapping[str, Any]) -> ResourceSlice:
    """A resource.k8s.io/v1 ResourceSlice, with KEP-5773 priorities from the spec or the annotations."""
    o, meta = _metadata(obj, "ResourceSlice", namespaced=False)
    annotations = o.string_map(meta.get("annotations"), "metadata.annotations")
    spec = o.obj(obj.get("spec"), "spec")
    driver = o.text(spec, "driver", "spec", required=True)
    pool = o.obj(spec.get("pool"), "spec.pool")
    if not pool:
        raise o.fail("spec.pool", "required")
    generation = o.int64(pool.get("generation", 0), "spec.pool.generation")
    count = o.int64(pool.get("resourceSliceCount", 0), "spec.pool.resourceSliceCount")
    if count < 1:
        raise o.fail("spec.pool.resourceSliceCount", "must be >= 1")
    resource_pool = ResourcePool(
        name=o.text(pool, "name", "spec.pool", required=True),
        generation=generation,
        resource_slice_count=count,
        priority=_priority(o, pool.get("priority"), "spec.pool.priority", annotations, POOL_PRIORITY_ANNOTATION),
    )
    shared = []
    for i, raw in enumerate(o.seq(spec.get("sharedCounters"), "spec.sharedCounters")):
        cp = f"spec.sharedCounters[{i}]"
        c = o.obj(raw, cp)
        shared.append(
            CounterSet(o.text(c, "name", cp, required=True), _counters(o, c.get("counters"), f"{cp}.counters"))
        )
    return ResourceSlice(
        name=meta["name"],
        driver=driver,
        pool=resource_pool,
        priority=_priority(o, spec.get("priority"), "spec.priority", annotations, PRIORITY_ANNOTATION),
        node_name=o.text(spec, "nodeName", "spec") or None,
        node_selector=_node_selector(o, spec.get("nodeSelector"), "spec.nodeSelector"),
        all_nodes=bool(o.flag(spec, "allNodes", "spec")),
        per_device_node_selection=bool(o.flag(spec, "perDeviceNodeSelection", "spec")),
        devices=tuple(
            _device(o, item, f"spec.devices[{i}]") for i, item in enumerate(o.seq(spec.get("devices"), "spec.devices"))
        ),
        shared_counters=tuple(shared),
        uid=o.text(meta, "uid", "metadata"),
        resource_version=o.text(meta, "resourceVersion", "metadata"),
    )
