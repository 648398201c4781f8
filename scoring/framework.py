"""The small scheduling framework the plugins plug into: constants, snapshots, statuses, combination.

Names follow kube-scheduler (``MaxNodeScore``, ``MaxExtenderPriority``, ``Unschedulable``...) so a
reader who knows the in-tree framework can map every piece.
"""

from __future__ import annotations

import enum
import operator
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Protocol, TypeVar

from k8s_semantics.placement import PodPlacement
from scoring.errors import ScoringError
from scoring.resources import CPU, MEMORY, ContainerExtendedRequest, PodResources, is_scored_resource_name

__all__ = [
    "MAX_EXTENDER_PRIORITY",
    "MAX_NODE_DEVICES",
    "MAX_NODE_SCORE",
    "MILLI_DEVICES",
    "MIN_EXTENDER_PRIORITY",
    "MIN_NODE_SCORE",
    "SHARE_KIND",
    "SUCCESS",
    "ArgsError",
    "Code",
    "FilterPlugin",
    "NodeInfo",
    "PodClaimRef",
    "PodInfo",
    "ScorePlugin",
    "Status",
    "args_field",
    "combine_scores",
    "device_kind",
    "parse_choice",
    "reject_unknown_fields",
]

MIN_NODE_SCORE = 0
MAX_NODE_SCORE = 100  # framework.MaxNodeScore
MIN_EXTENDER_PRIORITY = 0
MAX_EXTENDER_PRIORITY = 10  # extenderv1.MaxExtenderPriority
# DRA devices counted as an extended resource are kept in milli-devices: a share of a device that
# allows multiple allocations is a fraction of it, and integer columns must hold it.
MILLI_DEVICES = 1000
# Per-device views (``NodeInfo.devices_free``) hold at most this many devices of one resource per node
# (a ResourceSlice holds at most 128); a device plugin advertising more is seen as this many.
MAX_NODE_DEVICES = 256
# A pod's kind for the devices of one resource (the FGD artifact's "GPU affinity"): a share of one
# device (SHARE_KIND), or n >= 1 whole devices (n). ``NodeInfo.pod_kinds`` counts pods per kind.
SHARE_KIND = 0

E = TypeVar("E", bound=enum.Enum)


@dataclass(frozen=True, slots=True)
class PodClaimRef:
    """One entry of ``pod.spec.resourceClaims``, resolved to the ResourceClaim it names.

    ``claim`` is the ResourceClaim's name: given directly, or generated from a template and read
    from ``pod.status.resourceClaimStatuses``. A generated claim must be owned by the pod.
    """

    name: str
    claim: str
    generated: bool = False


@dataclass(frozen=True, slots=True)
class PodInfo:
    """One pod as the scheduler sees it: identity, placement and aggregated requests."""

    uid: str
    namespace: str
    name: str
    resources: PodResources
    node_name: str = ""
    priority: int = 0
    terminal: bool = False
    # DRA: the pod's ResourceClaims in pod order, and why it cannot be scheduled yet when a
    # template's claim has not been created (the scheduler's PreEnqueue would hold it back).
    claims: tuple[PodClaimRef, ...] = ()
    claims_pending: str = ""
    # Container requests of extended resources a DeviceClass may serve (DRAExtendedResource), and
    # the special ResourceClaim kube-scheduler 1.36 records in status.extendedResourceClaimStatus.
    extended_requests: tuple[ContainerExtendedRequest, ...] = ()
    extended_claim: str = ""
    # Only the queue labels (kueue.x-k8s.io/queue-name, kai.scheduler/queue), as sorted pairs.
    queue_labels: tuple[tuple[str, str], ...] = ()
    # What queue policy reads from the API object (not the scheduler): when the cluster admitted the
    # pod (Unix seconds; 0 when not yet bound), its controller's UID, its gang ("" for none: a Kueue
    # pod group or a KAI PodGroup) and whether it is being deleted.
    admitted_at: float = 0.0
    owner_uid: str = ""
    pod_group: str = ""
    terminating: bool = False
    # Gangs (``pod_group`` names the group): the size a Kueue pod group declares on its pods (0: not
    # declared), the topology Kueue's topology-aware scheduling asks for (node label keys, "" for
    # none), and the spec's node constraints, kept for grouped pods only (the planner places members
    # that have not reached /filter yet).
    group_size: int = 0
    topology_required: str = ""
    topology_preferred: str = ""
    placement: PodPlacement | None = None
    # DRA: per extended resource, the devices the pod's unallocated ResourceClaims ask for through a
    # DeviceClass with that extendedResourceName, as (count, milli-devices each). Set per request by
    # the adapter (it reads the claims); scoring plugins read it through ``device_request``.
    claim_devices: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    # The API object's metadata.resourceVersion ("" when unknown): the same UID at the same version is
    # the same pod, so a request's copy need not be parsed again when the cache holds it.
    resource_version: str = ""
    # Soft preferences kube-scheduler's score plugins act on (``k8s_semantics.preferences``): a
    # tie-break that keeps a single node leaves such a pod's ties to kube-scheduler.
    soft_preferences: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def device_request(self, name: str) -> tuple[int, int]:
        """(devices, milli-devices each) the pod asks of ``name``: container requests are whole
        devices (device plugin, or DRA's extended-resource claim); else what its claims ask."""
        amount = self.resources.requests.get(name, 0)
        if amount > 0:
            return amount, MILLI_DEVICES
        return self.claim_devices.get(name, (0, 0))

    def on_node(self, node: str) -> PodInfo:
        """This pod with ``node_name`` ``node`` (``replace(pod, node_name=node)``: a bind makes one)."""
        return _pod_with(self, "node_name", node)

    def with_claim_devices(self, demand: Mapping[str, tuple[int, int]]) -> PodInfo:
        """This pod with ``claim_devices`` ``demand`` (``replace``; every request of a DRA pod makes one)."""
        return _pod_with(self, "claim_devices", demand)


# PodInfo has no __post_init__ and every field is an __init__ argument: a copy of its fields with one
# changed is what ``dataclasses.replace`` makes, in about half its time (it checks each field's
# flags and calls __init__ with keywords).
_POD_FIELDS = tuple(f.name for f in fields(PodInfo))
_pod_values = operator.attrgetter(*_POD_FIELDS)
_set_field = object.__setattr__  # PodInfo is frozen


def _pod_with(pod: PodInfo, name: str, value: object) -> PodInfo:
    copy = object.__new__(PodInfo)
    for field_name, field_value in zip(_POD_FIELDS, _pod_values(pod), strict=True):
        _set_field(copy, field_name, field_value)
    _set_field(copy, name, value)
    return copy


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """An immutable per-node snapshot: allocatable and what bound + assumed pods request.

    ``requested`` is the plain sum of requests; ``non_zero_cpu`` / ``non_zero_memory`` are the
    scheduler's NonZeroRequested (containers without a request count 100m / 200Mi). The cache builds
    a new snapshot whenever a pod on the node changes, so scoring never sums pods.
    """

    name: str
    allocatable: Mapping[str, int]
    requested: Mapping[str, int] = field(default_factory=dict)
    non_zero_cpu: int = 0
    non_zero_memory: int = 0
    pod_count: int = 0
    # Scored resource types with allocatable > 0 (the set N of ScarceResourceAvoidance).
    allocatable_types: frozenset[str] = frozenset()
    # Extended resources served by DRA devices (a DeviceClass with extendedResourceName) on a node
    # that does not advertise them through a device plugin, in MILLI_DEVICES: devices published for
    # the node and how much of them claims and in-flight binds hold. Only scoring reads these.
    dra_allocatable: Mapping[str, int] = field(default_factory=dict)
    dra_requested: Mapping[str, int] = field(default_factory=dict)
    # Per DRA-served extended resource: milli-devices in use of each device, in the allocator's
    # search order (what fragmentation-aware plugins place a pod onto, first fit).
    dra_devices: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    # Per extended resource, the pods counted here that use its devices, by kind (``device_kind``):
    # kind -> pods (only kinds with pods). Kept by the cache as pods and their claims change.
    pod_kinds: Mapping[str, Mapping[int, int]] = field(default_factory=dict)
    # The Node's labels (plugins that read one, such as the GPU model, get it per row from the table).
    labels: Mapping[str, str] = field(default_factory=dict)

    @staticmethod
    def types_of(allocatable: Mapping[str, int], dra_allocatable: Mapping[str, int] | None = None) -> frozenset[str]:
        types = frozenset(n for n, v in allocatable.items() if v > 0 and is_scored_resource_name(n))
        if dra_allocatable:
            types |= {n for n, v in dra_allocatable.items() if v > 0 and is_scored_resource_name(n)}
        return types

    def requested_for_scoring(self, name: str) -> int:
        """NonZeroRequested for cpu and memory, plain requests for everything else."""
        if name == CPU:
            return self.non_zero_cpu
        if name == MEMORY:
            return self.non_zero_memory
        return self.requested.get(name, 0)

    def fit_amounts(self, name: str, pod_amount: int) -> tuple[int, int]:
        """(requested including the pod's ``pod_amount``, allocatable) as NodeResourcesFitPlus scores
        ``name``: in milli-devices where DRA serves it on this node, the plain amounts otherwise."""
        dra = self.dra_allocatable.get(name, 0)
        if dra > 0:
            return self.dra_requested.get(name, 0) + pod_amount * MILLI_DEVICES, dra
        return self.requested_for_scoring(name) + pod_amount, self.allocatable.get(name, 0)

    def devices_free(self, name: str) -> tuple[int, ...]:
        """Free milli-devices of each device of ``name`` in search order. Where DRA serves it, from the
        per-device use; for a device plugin (whole devices, no per-device view) the requested devices
        count as full and come first, the rest are free."""
        if self.dra_allocatable.get(name, 0) > 0:
            return tuple(MILLI_DEVICES - used for used in self.dra_devices.get(name, ())[:MAX_NODE_DEVICES])
        total = min(max(self.allocatable.get(name, 0), 0), MAX_NODE_DEVICES)
        used = min(max(self.requested.get(name, 0), 0), total)
        return (0,) * used + (MILLI_DEVICES,) * (total - used)


def device_kind(count: int, share: bool) -> int | None:
    """The kind of a pod that takes ``count`` devices, ``share`` when it takes part of each: None for
    no device, SHARE_KIND for a share of one device, else ``count`` (several shares count as their
    devices: the artifact has no such pods)."""
    if count <= 0:
        return None
    return SHARE_KIND if count == 1 and share else count


class ArgsError(ScoringError):
    """Invalid plugin args; the message starts with the offending field's path."""


def args_field(raw: Any, path: str, name: str, expected: str) -> Any:
    """Check that ``raw`` is a mapping holding only ``name`` and return that field's value."""
    if not isinstance(raw, Mapping):
        raise ArgsError(f"{path}: must be a mapping with a {name!r} field ({expected})")
    reject_unknown_fields(raw, path, (name,))
    return raw.get(name)


def int_arg(
    raw: Mapping[str, Any],
    name: str,
    path: str,
    *,
    low: int | None = None,
    above: int | None = None,
    high: int | None = None,
    default: int | None = None,
    unit: str = "",
) -> int:
    """``raw[name]`` (``default`` when absent) as an integer ``>= low`` (or ``> above``) and ``<= high``;
    a bool is not an integer. The error names the field, the range and the value."""
    value = raw.get(name, default)
    minimum = low if low is not None else None if above is None else above + 1
    too_low = minimum is not None and isinstance(value, int) and value < minimum
    too_high = high is not None and isinstance(value, int) and value > high
    if isinstance(value, bool) or not isinstance(value, int) or too_low or too_high:
        bounds = [f">= {low}"] if low is not None else [f"> {above}"] if above is not None else []
        bounds += [f"<= {high}"] if high is not None else []
        expected = " ".join(["must be an integer", " and ".join(bounds)]) if bounds else "must be an integer"
        raise ArgsError(f"{path}.{name}: {expected}{unit}, got {value!r}")
    return value


def reject_unknown_fields(raw: Mapping[Any, Any], path: str, known: Iterable[str]) -> None:
    """kube-scheduler decodes its configuration strictly: a field it does not know is an error."""
    unknown = sorted(set(raw) - set(known), key=str)
    if unknown:
        raise ArgsError(f"{path}: unknown field(s) {unknown}")


def parse_choice(choices: type[E], value: Any, path: str) -> E:
    """``value`` as one of an enum's values (a strategy type); the error lists the allowed ones."""
    try:
        return choices(value)
    except ValueError:
        allowed = ", ".join(str(choice.value) for choice in choices)
        raise ArgsError(f"{path}: {value!r} is not one of {allowed}") from None


class Code(enum.Enum):
    """Filter outcome, as kube-scheduler's framework.Code."""

    SUCCESS = "Success"
    UNSCHEDULABLE = "Unschedulable"  # preemption may help -> FailedNodes
    UNSCHEDULABLE_AND_UNRESOLVABLE = "UnschedulableAndUnresolvable"  # it cannot -> FailedAndUnresolvableNodes


@dataclass(frozen=True, slots=True)
class Status:
    code: Code = Code.SUCCESS
    reason: str = ""

    @property
    def passed(self) -> bool:
        return self.code is Code.SUCCESS


SUCCESS = Status()


class FilterPlugin(Protocol):
    name: str

    def filter(self, pod: PodInfo, node: NodeInfo) -> Status: ...

    def filter_batch(self, pod: PodInfo, batch: Any) -> Any:
        """``scoring.table.BatchVerdicts`` for a ``scoring.table.Batch``; identical verdicts to ``filter``."""
        ...


class ScorePlugin(Protocol):
    """A Score plugin. It may also define ``applies(pod) -> bool``: False leaves it out for that pod
    (kube-scheduler's PreScore Skip), see ``scoring.profile``."""

    name: str

    def score(self, pod: PodInfo, node: NodeInfo) -> int:
        """A score in MIN_NODE_SCORE..MAX_NODE_SCORE."""
        ...

    def score_batch(self, pod: PodInfo, batch: Any) -> Any:
        """Scores for every node of a ``scoring.table.Batch`` (an int64 array), or None to fall back."""
        ...


class RowScorer(Protocol):
    """A Score plugin whose batch score of a node depends only on the node's table row (its
    resources: not its name or labels) and a key derived from the pod (``scoring.row_memo``).
    ``scoring.profile`` then memoises the profile's combined score per row, calling ``score_rows``
    only for rows written since into a state the key has not met."""

    def row_key(self, pod: PodInfo) -> Hashable: ...

    def score_rows(self, key: Any, batch: Any) -> Any:
        """``score_batch`` without a memo, for the pod ``key`` came from (an int64 array, or None
        when these rows cannot be scored in a batch: the caller scores one by one)."""
        ...


def combine_scores(weighted: Iterable[tuple[int, int]]) -> int:
    """Integer weighted mean of (weight, 0..100 score) pairs, truncated like kube-scheduler."""
    total = weight_sum = 0
    for weight, score in weighted:
        total += weight * score
        weight_sum += weight
    if weight_sum == 0:
        return MIN_NODE_SCORE
    return total // weight_sum
