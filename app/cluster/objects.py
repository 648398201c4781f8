"""Turning Kubernetes JSON objects (dicts) into the pure packages' snapshots.

Only the fields scheduling needs are read; everything else is dropped at the edge so the cache
holds small objects and never keeps whole Pods or Nodes.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeGuard, TypeVar

import msgspec

import allocator
from fairshare.errors import QueueConfigError
from fairshare.flavor import NodeSelectorRequirement, PodPlacement, parse_toleration
from k8s_semantics.placement import FILTERED_EFFECTS
from k8s_semantics.preferences import soft_preferences
from k8s_semantics.quantity import QuantityError
from k8s_semantics.taints import Taint
from scoring.framework import PodClaimRef, PodInfo
from scoring.resources import (
    ContainerExtendedRequest,
    PodResources,
    container_extended_requests,
    parse_resource_list,
    pod_resources,
)

__all__ = [
    "CONVERTERS",
    "KAI_POD_GROUP_ANNOTATION",
    "KUEUE_POD_GROUP_LABEL",
    "NodeObject",
    "ObjectError",
    "claim_from_obj",
    "device_class_from_obj",
    "node_from_obj",
    "parse_time",
    "pod_from_obj",
    "pod_placement",
    "slice_from_obj",
    "taint_rule_from_obj",
]

TERMINAL_PHASES = ("Succeeded", "Failed")
T = TypeVar("T")


class ObjectError(ValueError):
    """A Kubernetes object the extender cannot use; the message says which field is wrong."""


@dataclass(frozen=True, slots=True)
class NodeObject:
    name: str
    allocatable: Mapping[str, int]
    labels: Mapping[str, str]
    unschedulable: bool = False
    resource_version: str = ""
    taints: tuple[Taint, ...] = ()  # NoSchedule and NoExecute only: what filters pods
    # Has a PreferNoSchedule taint, which kube-scheduler's TaintToleration scores against.
    prefer_no_schedule: bool = False


def _is_map(value: Any) -> TypeGuard[Mapping[str, Any]]:
    """``isinstance(value, Mapping)``, quick for the dicts and Nones decoded JSON is made of (the ABC
    check costs several times a type check, and a pod event makes a dozen)."""
    return type(value) is dict or (value is not None and isinstance(value, Mapping))


def _metadata(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    if not _is_map(obj):
        raise ObjectError(f"{kind} must be a JSON object")
    metadata = obj.get("metadata")
    if not _is_map(metadata) or not isinstance(metadata.get("name"), str) or not metadata["name"]:
        raise ObjectError(f"{kind}.metadata.name is missing")
    return metadata


def node_from_obj(obj: Mapping[str, Any]) -> NodeObject:
    metadata = _metadata(obj, "Node")
    status = obj.get("status") or {}
    spec = obj.get("spec") or {}
    try:
        allocatable = parse_resource_list(status.get("allocatable"), "status.allocatable")
    except QuantityError as exc:
        raise ObjectError(f"Node {metadata['name']}: {exc}") from None
    return NodeObject(
        name=metadata["name"],
        allocatable=allocatable,
        labels=dict(metadata.get("labels") or {}),
        unschedulable=bool(spec.get("unschedulable")),
        resource_version=str(metadata.get("resourceVersion") or ""),
        taints=_taints(spec.get("taints")),
        prefer_no_schedule=_prefer_no_schedule(spec.get("taints")),
    )


def _prefer_no_schedule(raw: Any) -> bool:
    return isinstance(raw, list) and any(_is_map(t) and t.get("effect") == "PreferNoSchedule" for t in raw)


def _taints(raw: Any) -> tuple[Taint, ...]:
    """The node's NoSchedule and NoExecute taints (malformed entries are skipped: the API server
    validates taints, and a gang's planner only reads them to leave nodes out)."""
    if not isinstance(raw, list):
        return ()
    taints = []
    for taint in raw:
        if _is_map(taint) and taint.get("effect") in FILTERED_EFFECTS and isinstance(taint.get("key"), str):
            taints.append(Taint(key=taint["key"], value=str(taint.get("value") or ""), effect=taint["effect"]))
    return tuple(taints)


_REQUESTS_MEMO = 4096  # distinct pod templates whose parsed requests are kept
_requests_memo: OrderedDict[bytes, tuple[PodResources, tuple[ContainerExtendedRequest, ...]]] = OrderedDict()


def _requests_key(spec: Mapping[str, Any]) -> bytes:
    """What ``pod_resources`` and ``container_extended_requests`` read of a spec, and nothing else.

    Whole containers would make nearly every pod a miss: each one carries fields of its own (the
    ServiceAccount token's volumeMount ``kube-api-access-<random>``). b"" for a malformed spec, which
    is parsed without the memo so that its error names the field.
    """
    parts: list[Any] = [spec.get("overhead"), spec.get("resources")]
    for field, init in (("containers", False), ("initContainers", True)):
        listed = spec.get(field) or []
        if not isinstance(listed, list):
            return b""
        for container in listed:
            if not _is_map(container):
                return b""
            restart = container.get("restartPolicy") if init else None
            parts.append((field, container.get("name"), container.get("resources"), restart))
    try:
        return msgspec.json.encode(parts)
    except (TypeError, msgspec.EncodeError):
        return b""


def _requests_of(spec: Mapping[str, Any]) -> tuple[PodResources, tuple[ContainerExtendedRequest, ...]]:
    """The pod's requests, parsed once per distinct set of container requests (the replicas of one
    template, and every watch event of one pod, share them): quantities are exact fractions and costly."""
    key = _requests_key(spec)
    found = _requests_memo.get(key) if key else None
    if found is not None:
        _requests_memo.move_to_end(key)
        return found
    found = pod_resources(spec), container_extended_requests(spec)
    if key:
        _requests_memo[key] = found
        if len(_requests_memo) > _REQUESTS_MEMO:
            _requests_memo.popitem(last=False)
    return found


def pod_from_obj(obj: Mapping[str, Any]) -> PodInfo:
    """Build a PodInfo; a pod without a UID (hand-written snapshots) is keyed by namespace/name."""
    metadata = _metadata(obj, "Pod")
    spec = obj.get("spec")
    if not _is_map(spec):
        raise ObjectError("Pod.spec is missing")
    namespace = str(metadata.get("namespace") or "default")
    name = metadata["name"]
    try:
        resources, extended_requests = _requests_of(spec)
    except QuantityError as exc:
        raise ObjectError(f"Pod {namespace}/{name}: {exc}") from None
    except (AttributeError, TypeError) as exc:
        raise ObjectError(f"Pod {namespace}/{name}: malformed spec ({exc})") from None
    status = obj.get("status") or {}
    if not _is_map(status):
        raise ObjectError(f"Pod {namespace}/{name}: status must be an object")
    phase = status.get("phase", "")
    priority = spec.get("priority") or 0
    controller = _controller(metadata.get("ownerReferences"))
    try:
        claims, claims_pending = _pod_claims(f"{namespace}/{name}", spec, status)
    except (AttributeError, TypeError) as exc:
        raise ObjectError(f"Pod {namespace}/{name}: malformed resourceClaims ({exc})") from None
    return PodInfo(
        uid=str(metadata.get("uid") or f"{namespace}/{name}"),
        namespace=namespace,
        name=name,
        resources=resources,
        node_name=str(spec.get("nodeName") or ""),
        priority=priority if isinstance(priority, int) else 0,
        terminal=phase in TERMINAL_PHASES,
        claims=claims,
        claims_pending=claims_pending,
        extended_requests=extended_requests,
        extended_claim=_extended_claim(status),
        queue_labels=_queue_labels(metadata.get("labels")),
        admitted_at=_admitted_at(metadata, spec, status),
        owner_uid=str(controller.get("uid") or ""),  # what a Kueue Workload names as its owner
        soft_preferences=soft_preferences(spec, str(controller.get("kind") or "")),
        terminating=bool(metadata.get("deletionTimestamp")),
        resource_version=str(metadata.get("resourceVersion") or ""),
        **_group_fields(namespace, metadata, spec, obj),
    )


def _extended_claim(status: Mapping[str, Any]) -> str:
    """status.extendedResourceClaimStatus.resourceClaimName, "" when absent or malformed."""
    recorded = status.get("extendedResourceClaimStatus")
    name = recorded.get("resourceClaimName") if _is_map(recorded) else None
    return name if isinstance(name, str) else ""


def parse_time(value: Any) -> float | None:
    """An RFC 3339 timestamp (metav1.Time) as Unix seconds; None when absent or unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        return None


def _admitted_at(metadata: Mapping[str, Any], spec: Mapping[str, Any], status: Mapping[str, Any]) -> float:
    """When the cluster admitted the pod, as the object records it: the PodScheduled=True condition's
    lastTransitionTime (the API server sets it on the Binding, ours or kube-scheduler's), else, for a
    pod created with spec.nodeName, its creationTimestamp; 0 for a pod not bound yet."""
    if not spec.get("nodeName"):
        return 0.0
    for condition in status.get("conditions") or ():
        if _is_map(condition) and (condition.get("type"), condition.get("status")) == (
            "PodScheduled",
            "True",
        ):
            at = parse_time(condition.get("lastTransitionTime"))
            if at is not None:
                return at
    at = parse_time(metadata.get("creationTimestamp"))
    return at if at is not None else 0.0


def _controller(refs: Any) -> Mapping[str, Any]:
    """The pod's controller reference (a Job, a JobSet, a ReplicaSet...), {} for none."""
    for ref in refs if isinstance(refs, list) else ():
        if _is_map(ref) and ref.get("controller"):
            return ref
    return {}


KUEUE_POD_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
KUEUE_POD_GROUP_TOTAL = "kueue.x-k8s.io/pod-group-total-count"
KUEUE_REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
COSCHEDULING_LABEL = "scheduling.x-k8s.io/pod-group"
KAI_POD_GROUP_ANNOTATION = "pod-group-name"


def _pod_group(namespace: str, metadata: Mapping[str, Any], spec: Mapping[str, Any]) -> str:
    """The pod's gang, namespaced, by its source: a Kubernetes 1.36 PodGroup (spec.schedulingGroup),
    a scheduler-plugins coscheduling PodGroup (label), a Kueue pod group (label) or a KAI PodGroup
    (annotation); "" for none."""
    group = spec.get("schedulingGroup")
    name = group.get("podGroupName") if _is_map(group) else None
    if isinstance(name, str) and name:
        return f"podgroup:{namespace}/{name}"
    labels = metadata.get("labels")
    if _is_map(labels):
        if labels.get(COSCHEDULING_LABEL):
            return f"coscheduling:{namespace}/{labels[COSCHEDULING_LABEL]}"
        if labels.get(KUEUE_POD_GROUP_LABEL):
            return f"kueue:{namespace}/{labels[KUEUE_POD_GROUP_LABEL]}"
    annotations = metadata.get("annotations")
    if _is_map(annotations) and annotations.get(KAI_POD_GROUP_ANNOTATION):
        return f"kai:{namespace}/{annotations[KAI_POD_GROUP_ANNOTATION]}"
    return ""


def _group_fields(
    namespace: str, metadata: Mapping[str, Any], spec: Mapping[str, Any], obj: Mapping[str, Any]
) -> dict[str, Any]:
    """What a gang's planner reads of a pod: its group, Kueue's size and topology annotations, and,
    for a grouped pod, its node constraints. Malformed annotations count as absent."""
    group = _pod_group(namespace, metadata, spec)
    if not group:
        return {}
    annotations = metadata.get("annotations")
    annotations = annotations if _is_map(annotations) else {}
    total = annotations.get(KUEUE_POD_GROUP_TOTAL)
    size = int(total) if isinstance(total, str) and total.isdigit() else 0
    required = annotations.get(KUEUE_REQUIRED_TOPOLOGY)
    preferred = annotations.get(KUEUE_PREFERRED_TOPOLOGY)
    return {
        "pod_group": group,
        "group_size": size,
        "topology_required": required if isinstance(required, str) else "",
        "topology_preferred": preferred if isinstance(preferred, str) else "",
        "placement": pod_placement(obj),
    }


def _pod_claims(key: str, spec: Mapping[str, Any], status: Mapping[str, Any]) -> tuple[tuple[PodClaimRef, ...], str]:
    """Resolve ``spec.resourceClaims``: direct names as-is, templates through the pod's status.

    A template entry without a status entry means the claim is not created yet (the pod must
    wait); an entry whose name is null means nothing was needed, so it is skipped.
    """
    refs = spec.get("resourceClaims") or []
    if not isinstance(refs, list):
        raise ObjectError(f"Pod {key}: spec.resourceClaims must be a list")
    generated: dict[str, str | None] = {}
    for entry in status.get("resourceClaimStatuses") or []:
        if _is_map(entry) and isinstance(entry.get("name"), str):
            generated[entry["name"]] = entry.get("resourceClaimName")
    claims: list[PodClaimRef] = []
    pending = ""
    for index, ref in enumerate(refs):
        where = f"Pod {key}: spec.resourceClaims[{index}]"
        if not _is_map(ref) or not isinstance(ref.get("name"), str) or not ref["name"]:
            raise ObjectError(f"{where}.name is missing")
        name = ref["name"]
        if ref.get("resourceClaimName"):
            claims.append(PodClaimRef(name, str(ref["resourceClaimName"])))
        elif ref.get("resourceClaimTemplateName"):
            if name not in generated:
                pending = pending or f"waiting for the ResourceClaim of pod claim {name!r} to be created"
            elif generated[name]:
                claims.append(PodClaimRef(name, str(generated[name]), generated=True))
        else:
            raise ObjectError(f"{where}: one of resourceClaimName or resourceClaimTemplateName is required")
    return tuple(claims), pending


def _dra(parse: Callable[[Mapping[str, Any]], T]) -> Callable[[Mapping[str, Any]], T]:
    """The allocator's resource.k8s.io/v1 parsers, with their errors as ObjectError."""

    def convert(obj: Mapping[str, Any]) -> T:
        if not _is_map(obj):
            raise ObjectError("resource.k8s.io object must be a JSON object")
        try:
            return parse(obj)
        except allocator.ParseError as exc:
            raise ObjectError(str(exc)) from None

    return convert


device_class_from_obj = _dra(allocator.parse_device_class)
claim_from_obj = _dra(allocator.parse_resource_claim)
slice_from_obj = _dra(allocator.parse_resource_slice)
taint_rule_from_obj = _dra(allocator.parse_device_taint_rule)

# The kinds the cache keeps, each with its converter: how a file of mixed objects is sorted out.
CONVERTERS: Mapping[str, Callable[[Mapping[str, Any]], object]] = {
    "Node": node_from_obj,
    "Pod": pod_from_obj,
    "DeviceClass": device_class_from_obj,
    "ResourceClaim": claim_from_obj,
    "ResourceSlice": slice_from_obj,
}


QUEUE_LABELS = ("kai.scheduler/queue", "kueue.x-k8s.io/queue-name")


def _queue_labels(labels: Any) -> tuple[tuple[str, str], ...]:
    if not _is_map(labels):
        return ()
    return tuple((k, str(labels[k])) for k in QUEUE_LABELS if k in labels)


def pod_placement(obj: Mapping[str, Any]) -> PodPlacement:
    """nodeSelector, required node affinity and tolerations: what decides which flavors a pod may use.

    Read only for pods that belong to a queue, when the request is served, so the cache keeps none of it.
    """
    spec = obj.get("spec")
    if not _is_map(spec):
        raise ObjectError("Pod.spec is missing")
    selector = spec.get("nodeSelector") or {}
    if not _is_map(selector):
        raise ObjectError("Pod.spec.nodeSelector: must be a map of strings")
    tolerations_raw = spec.get("tolerations") or []
    if not isinstance(tolerations_raw, list):
        raise ObjectError("Pod.spec.tolerations: must be a list")
    try:
        tolerations = tuple(parse_toleration(t, f"Pod.spec.tolerations[{i}]") for i, t in enumerate(tolerations_raw))
    except QueueConfigError as exc:
        raise ObjectError(str(exc)) from None
    return PodPlacement(
        node_selector={str(k): str(v) for k, v in selector.items()},
        affinity_terms=_required_terms(spec.get("affinity")),
        tolerations=tolerations,
    )


_TERMS_PATH = "Pod.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"


def _required_terms(affinity: Any) -> tuple[tuple[NodeSelectorRequirement, ...], ...]:
    node_affinity = affinity.get("nodeAffinity") if _is_map(affinity) else None
    if not _is_map(node_affinity):
        return ()
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    terms_raw = required.get("nodeSelectorTerms") if _is_map(required) else None
    if terms_raw is None:
        return ()
    if not isinstance(terms_raw, list):
        raise ObjectError(f"{_TERMS_PATH}: must be a list")
    terms = []
    for i, term in enumerate(terms_raw):
        expressions = term.get("matchExpressions") if _is_map(term) else None
        if not isinstance(expressions, list | None):
            raise ObjectError(f"{_TERMS_PATH}[{i}].matchExpressions: must be a list")
        requirements = []
        for j, expr in enumerate(expressions or []):
            if not _is_map(expr) or not isinstance(expr.get("key"), str):
                raise ObjectError(f"{_TERMS_PATH}[{i}].matchExpressions[{j}]: must have a key")
            values = expr.get("values") or []
            if not isinstance(values, list):
                raise ObjectError(f"{_TERMS_PATH}[{i}].matchExpressions[{j}].values: must be a list")
            requirements.append(
                NodeSelectorRequirement(expr["key"], str(expr.get("operator", "")), tuple(str(v) for v in values))
            )
        terms.append(tuple(requirements))
    return tuple(terms)
