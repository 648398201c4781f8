"""Pod request aggregation with Kubernetes semantics (component-helpers ``PodRequests``).

Amounts are integers in canonical units: cpu in millicores, everything else in whole units
(bytes, devices), both rounded up exactly as ``MilliValue()`` / ``Value()`` do.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from k8s_semantics.quantity import QuantityError, ceil_milli, ceil_value, parse_quantity, to_milli, to_value

__all__ = [
    "CPU",
    "DEFAULT_MEMORY_REQUEST",
    "DEFAULT_MILLI_CPU_REQUEST",
    "DEVICE_CLASS_RESOURCE_PREFIX",
    "EPHEMERAL_STORAGE",
    "MEMORY",
    "PODS",
    "ContainerExtendedRequest",
    "PodResources",
    "ResourceList",
    "container_extended_requests",
    "is_dra_extended_resource_name",
    "is_extended_resource_name",
    "is_scalar_resource_name",
    "is_scored_resource_name",
    "parse_resource_list",
    "pod_resources",
]

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"

# pkg/scheduler/util: what a container without a cpu / memory request counts as when scoring.
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024

# Pod-level requests (spec.resources) replace the container aggregate for these only.
_POD_LEVEL_RESOURCES = (CPU, MEMORY)

ResourceList = dict[str, int]


def is_scalar_resource_name(name: str) -> bool:
    """Extended (``domain/name`` outside kubernetes.io), hugepages, prefixed-native or attachable-volumes."""
    if name.startswith(("hugepages-", "attachable-volumes-")):
        return True
    if "kubernetes.io/" in name:  # prefixed native resource
        return True
    return "/" in name and not name.startswith("requests.")


# The implicit extended resource of every DeviceClass (DRAExtendedResource): this prefix + the class name.
DEVICE_CLASS_RESOURCE_PREFIX = "deviceclass.resource.kubernetes.io/"


def is_extended_resource_name(name: str) -> bool:
    """v1helper.IsExtendedResourceName: ``domain/name`` outside kubernetes.io, not ``requests.``-prefixed."""
    if "/" not in name or name.startswith("requests."):
        return False
    domain = name.split("/", 1)[0]
    return domain != "kubernetes.io" and not domain.endswith(".kubernetes.io")


def is_dra_extended_resource_name(name: str) -> bool:
    """schedutil.IsDRAExtendedResourceName: a resource a DeviceClass can serve (explicitly or implicitly)."""
    return is_extended_resource_name(name) or name.startswith(DEVICE_CLASS_RESOURCE_PREFIX)


@dataclass(frozen=True, slots=True)
class ContainerExtendedRequest:
    """One container's request of a resource DRA could serve, as upstream names its device request:
    ``container`` is the index in initContainers + containers, ``position`` the resource's index
    among the container's request names in sorted order."""

    container: int
    container_name: str
    resource: str
    amount: int
    position: int
    short_lived: bool  # an init container that is not a sidecar (restartPolicy Always)


def container_extended_requests(spec: Mapping[str, Any]) -> tuple[ContainerExtendedRequest, ...]:
    """Every integer request of a DRA-capable extended resource, per container (requests as the API
    stores them: limits defaulted into requests). Raises ``QuantityError`` like ``pod_resources``."""
    init_containers = spec.get("initContainers") or []
    containers = [*init_containers, *(spec.get("containers") or [])]
    out: list[ContainerExtendedRequest] = []
    for index, container in enumerate(containers):
        requests = _container_requests(container)
        names = sorted(requests)
        short_lived = index < len(init_containers) and container.get("restartPolicy") != "Always"
        for position, name in enumerate(names):
            amount = requests[name]
            if not is_dra_extended_resource_name(name) or amount <= 0 or amount.denominator != 1:
                continue
            label = str(container.get("name", ""))
            out.append(ContainerExtendedRequest(index, label, name, int(amount), position, short_lived))
    return tuple(out)


def is_scored_resource_name(name: str) -> bool:
    """Resources that NodeResourcesFitPlus and ScarceResourceAvoidance look at (never ``pods``)."""
    return name in (CPU, MEMORY, EPHEMERAL_STORAGE) or is_scalar_resource_name(name)


def parse_resource_list(raw: Mapping[str, Any] | None, field: str = "resources") -> ResourceList:
    """Convert a ``{name: quantity}`` map to canonical integers; cpu becomes millicores."""
    out: ResourceList = {}
    if not raw:
        return out
    for name, quantity in raw.items():
        try:
            out[name] = to_milli(quantity) if name == CPU else to_value(quantity)
        except QuantityError as exc:
            raise QuantityError(f"{field}[{name}]: {exc}") from None
    return out


# Aggregation works on exact quantities and rounds once per pod, as PodRequests sums Quantities
# and the scheduler calls MilliValue()/Value() on the total.
_Exact = dict[str, Fraction]


def _add(into: _Exact, other: Mapping[str, Fraction]) -> None:
    for name, amount in other.items():
        into[name] = into.get(name, Fraction(0)) + amount


def _max(into: _Exact, other: Mapping[str, Fraction]) -> None:
    for name, amount in other.items():
        into[name] = max(into.get(name, amount), amount)


def _with_defaults(requests: _Exact, defaults: Mapping[str, Fraction] | None) -> _Exact:
    if not defaults:
        return requests
    filled = dict(requests)
    for name, amount in defaults.items():
        filled.setdefault(name, amount)  # an explicit 0 is "set" and stays 0
    return filled


def _exact_list(raw: Mapping[str, Any] | None, field: str) -> _Exact:
    out: _Exact = {}
    if not raw:
        return out
    if not isinstance(raw, Mapping):
        raise QuantityError(f"{field}: must be a map of resource name to quantity")
    for name, quantity in raw.items():
        try:
            out[name] = parse_quantity(quantity)
        except QuantityError as exc:
            raise QuantityError(f"{field}[{name}]: {exc}") from None
    return out


def _canonical(exact: Mapping[str, Fraction]) -> ResourceList:
    return {name: ceil_milli(v) if name == CPU else ceil_value(v) for name, v in exact.items()}


def _container_requests(container: Mapping[str, Any]) -> _Exact:
    if not isinstance(container, Mapping):
        raise QuantityError("containers must be objects")
    resources = container.get("resources") or {}
    name = container.get("name", "?")
    requests = _exact_list(resources.get("requests"), f"container {name!r} requests")
    # API-server defaulting: a resource with a limit but no request is requested at its limit.
    # Pods from the API already carry it; hand-written snapshots may not.
    for resource, limit in _exact_list(resources.get("limits"), f"container {name!r} limits").items():
        requests.setdefault(resource, limit)
    return requests


def _aggregate(
    containers: Iterable[Mapping[str, Any]],
    init_containers: Iterable[Mapping[str, Any]],
    pod_level: _Exact,
    overhead: _Exact,
    defaults: Mapping[str, Fraction] | None,
) -> ResourceList:
    """KEP-753 aware aggregation: regular + sidecars summed, init containers by max, then overhead."""
    total: _Exact = {}
    for container in containers:
        _add(total, _with_defaults(_container_requests(container), defaults))
    sidecars: _Exact = {}
    init_peak: _Exact = {}
    for container in init_containers:
        requests = _with_defaults(_container_requests(container), defaults)
        if container.get("restartPolicy") == "Always":
            _add(total, requests)
            _add(sidecars, requests)
            effective = dict(sidecars)
        else:
            effective = dict(requests)
            _add(effective, sidecars)  # a regular init container runs beside the sidecars started before it
        _max(init_peak, effective)
    _max(total, init_peak)
    for name in _POD_LEVEL_RESOURCES:
        if name in pod_level:
            total[name] = pod_level[name]
    _add(total, overhead)
    return _canonical(total)


_NON_ZERO_DEFAULTS = {
    CPU: Fraction(DEFAULT_MILLI_CPU_REQUEST, 1000),
    MEMORY: Fraction(DEFAULT_MEMORY_REQUEST),
}


@dataclass(frozen=True, slots=True)
class PodResources:
    """What a pod asks for, computed once per pod version.

    ``requests`` has no defaults (it decides *which* resources a pod requests); ``non_zero_cpu`` and
    ``non_zero_memory`` apply the per-container 100m / 200Mi defaults that scoring uses as amounts.
    """

    requests: Mapping[str, int]
    non_zero_cpu: int
    non_zero_memory: int
    # Scored resource names with a request > 0 (the set P of the plugins), derived once.
    requested_names: frozenset[str] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        names = frozenset(n for n, v in self.requests.items() if v > 0 and is_scored_resource_name(n))
        object.__setattr__(self, "requested_names", names)

    def amount(self, name: str) -> int:
        """The amount scoring adds for this pod: non-zero defaults for cpu and memory."""
        if name == CPU:
            return self.non_zero_cpu
        if name == MEMORY:
            return self.non_zero_memory
        return self.requests.get(name, 0)


def pod_resources(spec: Mapping[str, Any]) -> PodResources:
    """Aggregate a pod spec (the JSON ``spec`` object) the way kube-scheduler does.

    Raises ``QuantityError`` naming the container and resource when a quantity is invalid.
    """
    containers = spec.get("containers") or []
    init_containers = spec.get("initContainers") or []
    if not isinstance(containers, list) or not isinstance(init_containers, list):
        raise QuantityError("spec.containers and spec.initContainers must be lists")
    pod_level = _exact_list((spec.get("resources") or {}).get("requests"), "spec.resources.requests")
    overhead = _exact_list(spec.get("overhead"), "spec.overhead")
    requests = _aggregate(containers, init_containers, pod_level, overhead, None)
    non_zero = _aggregate(containers, init_containers, pod_level, overhead, _NON_ZERO_DEFAULTS)
    return PodResources(
        requests=requests,
        non_zero_cpu=non_zero.get(CPU, 0),
        non_zero_memory=non_zero.get(MEMORY, 0),
    )
