"""resource.k8s.io/v1 objects as the allocator needs them (parsed by ``allocator.parse``).

KEP-5773 priorities are a local extension: ``ResourceSlice.priority`` and ``ResourcePool.priority``
hold ``spec.priority`` / ``spec.pool.priority`` or their annotations (``PRIORITY_ANNOTATION``,
``POOL_PRIORITY_ANNOTATION``). Unset means 0; higher values are tried first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, NamedTuple

from k8s_semantics.nodeselector import NodeSelector, NodeSelectorRequirement, NodeSelectorTerm
from k8s_semantics.taints import Toleration

__all__ = [
    "ALLOCATION_MODE_ALL",
    "ALLOCATION_MODE_EXACT_COUNT",
    "ALLOCATION_RESULTS_MAX_SIZE",
    "CONFIG_SOURCE_CLAIM",
    "CONFIG_SOURCE_CLASS",
    "DEVICE_REQUESTS_MAX_SIZE",
    "POOL_PRIORITY_ANNOTATION",
    "PRIORITY_ANNOTATION",
    "RESOURCE_SLICE_MAX_ATTRIBUTES_AND_CAPACITIES_PER_DEVICE",
    "RESOURCE_SLICE_MAX_COUNTERS_PER_COUNTER_SET",
    "RESOURCE_SLICE_MAX_COUNTERS_PER_DEVICE_COUNTER_CONSUMPTION",
    "RESOURCE_SLICE_MAX_COUNTER_SETS",
    "RESOURCE_SLICE_MAX_DEVICES",
    "RESOURCE_SLICE_MAX_DEVICES_WITH_TAINTS_OR_CONSUMES_COUNTERS",
    "RESOURCE_SLICE_MAX_DEVICE_COUNTER_CONSUMPTIONS_PER_DEVICE",
    "AllocatedDeviceStatus",
    "AllocationResult",
    "Attribute",
    "CapacityRequestPolicy",
    "CapacityRequestPolicyRange",
    "CounterSet",
    "Device",
    "DeviceAllocationConfiguration",
    "DeviceCapacity",
    "DeviceClaim",
    "DeviceClaimConfiguration",
    "DeviceClass",
    "DeviceCondition",
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
    "ResourceClaim",
    "ResourceClaimConsumer",
    "ResourcePool",
    "ResourceSlice",
    "ScaledQuantity",
]

# resource.k8s.io/v1 limits of Kubernetes 1.36 (staging/src/k8s.io/api/resource/v1/types.go); the
# parsers refuse an object beyond them, as the API server would have.
ALLOCATION_RESULTS_MAX_SIZE = 32  # AllocationResultsMaxSize: status.allocation.devices.results per claim
DEVICE_REQUESTS_MAX_SIZE = ALLOCATION_RESULTS_MAX_SIZE  # DeviceRequestsMaxSize: spec.devices.requests
RESOURCE_SLICE_MAX_DEVICES = 128  # ResourceSliceMaxDevices
# ResourceSliceMaxDevicesWithTaintsOrConsumesCounters: when any device has taints or consumesCounters.
RESOURCE_SLICE_MAX_DEVICES_WITH_TAINTS_OR_CONSUMES_COUNTERS = 64
RESOURCE_SLICE_MAX_COUNTER_SETS = 8  # ResourceSliceMaxCounterSets: spec.sharedCounters
RESOURCE_SLICE_MAX_COUNTERS_PER_COUNTER_SET = 32  # ResourceSliceMaxCountersPerCounterSet
RESOURCE_SLICE_MAX_DEVICE_COUNTER_CONSUMPTIONS_PER_DEVICE = 2  # ...MaxDeviceCounterConsumptionsPerDevice
RESOURCE_SLICE_MAX_COUNTERS_PER_DEVICE_COUNTER_CONSUMPTION = 32  # ...MaxCountersPerDeviceCounterConsumption
RESOURCE_SLICE_MAX_ATTRIBUTES_AND_CAPACITIES_PER_DEVICE = 32  # ResourceSliceMaxAttributesAndCapacitiesPerDevice
ALLOCATION_MODE_EXACT_COUNT = "ExactCount"
ALLOCATION_MODE_ALL = "All"
CONFIG_SOURCE_CLASS = "FromClass"
CONFIG_SOURCE_CLAIM = "FromClaim"
PRIORITY_ANNOTATION = "dra.kube-gpu-extender.io/priority"
POOL_PRIORITY_ANNOTATION = "dra.kube-gpu-extender.io/pool-priority"


class ScaledQuantity(NamedTuple):
    """A resource.Quantity: its exact ``value`` and the ``text`` it was written as (copied into results)."""

    value: Fraction
    text: str


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
    creation_timestamp: str = ""  # RFC 3339 as the API server writes it (compares in time order)


@dataclass(frozen=True, slots=True)
class DeviceToleration(Toleration):
    """resource.k8s.io's toleration: core/v1's fields and matching, plus ``tolerationSeconds``."""

    toleration_seconds: int | None = None

    def tolerates(self, taint: DeviceTaint) -> bool:
        """upstream ``resourceclaim.ToleratesTaint``: an empty effect or key matches any; ``Exists``
        ignores the value, ``Equal`` (or no operator) compares it; any other operator (core/v1's
        ``Gt`` / ``Lt`` included) tolerates nothing."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator in ("", "Equal"):
            return self.value == taint.value
        return self.operator == "Exists"


@dataclass(frozen=True, slots=True)
class ExactDeviceRequest:
    device_class_name: str
    selectors: tuple[DeviceSelector, ...] = ()
    allocation_mode: str = ALLOCATION_MODE_EXACT_COUNT
    count: int = 1
    admin_access: bool | None = None
    tolerations: tuple[DeviceToleration, ...] = ()
    capacity_requests: Mapping[str, ScaledQuantity] | None = None  # capacity.requests (consumable capacity)


@dataclass(frozen=True, slots=True)
class DeviceSubRequest:
    name: str
    device_class_name: str
    selectors: tuple[DeviceSelector, ...] = ()
    allocation_mode: str = ALLOCATION_MODE_EXACT_COUNT
    count: int = 1
    tolerations: tuple[DeviceToleration, ...] = ()
    capacity_requests: Mapping[str, ScaledQuantity] | None = None


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
    share_id: str | None = None  # set for a share of a device that allows multiple allocations
    consumed_capacity: Mapping[str, str] | None = None  # capacity name -> quantity, every capacity of a share

    @property
    def id(self) -> DeviceID:
        return DeviceID(self.driver, self.pool, self.device)

    @property
    def shared(self) -> bool:
        """A share of a device (consumable capacity), not the whole device."""
        return self.share_id is not None


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
class DeviceCondition:
    """One ``status.devices[].conditions[]`` entry (a metav1.Condition): what binding conditions read."""

    type: str
    status: str  # True | False | Unknown
    reason: str = ""
    message: str = ""


@dataclass(frozen=True, slots=True)
class AllocatedDeviceStatus:
    """One ``status.devices[]`` entry, written by the device's driver (or a controller)."""

    driver: str
    pool: str
    device: str
    share_id: str | None = None
    conditions: tuple[DeviceCondition, ...] = ()

    def condition(self, kind: str) -> DeviceCondition | None:
        """apimeta.FindStatusCondition: the first condition of that type."""
        for found in self.conditions:
            if found.type == kind:
                return found
        return None


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
    device_statuses: tuple[AllocatedDeviceStatus, ...] = ()  # status.devices

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
class CapacityRequestPolicyRange:
    """``validRange``: requests below ``min`` round up to it, between steps up to ``min + n*step``."""

    min: ScaledQuantity
    max: ScaledQuantity | None = None
    step: ScaledQuantity | None = None


@dataclass(frozen=True, slots=True)
class CapacityRequestPolicy:
    """``requestPolicy`` of a capacity: ``default`` for requests that do not name the capacity, and at
    most one of ``valid_values`` (ascending) or ``valid_range``."""

    default: ScaledQuantity | None = None
    valid_values: tuple[ScaledQuantity, ...] = ()
    valid_range: CapacityRequestPolicyRange | None = None


@dataclass(frozen=True, slots=True)
class DeviceCapacity:
    value: Fraction  # exact
    text: str  # as published, for display
    request_policy: CapacityRequestPolicy | None = None


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
    feature we do not implement (binding conditions, list attributes), and allocating it without
    honouring that feature would be wrong.

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
