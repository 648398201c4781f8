"""The special ResourceClaim behind extended resources served by DRA (DRAExtendedResource, 1.36).

A pod that asks for ``nvidia.com/gpu: 1`` in a container, on a node that does not advertise
``nvidia.com/gpu`` through a device plugin, gets its devices from the DeviceClass that serves the
name: explicitly (``spec.extendedResourceName``) or implicitly
(``deviceclass.resource.kubernetes.io/<class>``). kube-scheduler's DynamicResources plugin puts
them in one claim per pod, created at PreBind with a generated name, owned by the pod and
annotated ``resource.kubernetes.io/extended-resource-claim: "true"``; the pod's
``status.extendedResourceClaimStatus`` maps each container's resource to a request of it.

This module builds that claim as upstream does (``createRequestsAndMappings``):

* one request per container and resource, named ``container-<i>-request-<j>`` (``i`` the index in
  initContainers + containers, ``j`` the resource's index among the container's sorted request
  names), ExactCount of the container's amount;
* an init container that is not a sidecar first reuses the requests of the long-lived containers
  after it; only what they do not cover becomes its own request, and of all such requests only the
  largest is kept, the others' mappings pointing to it;
* requests sorted by name; mappings: long-lived containers, then init containers, per resource in
  name order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from allocator.extended import extended_resource_classes
from allocator.types import DeviceClass
from scoring.resources import DEVICE_CLASS_RESOURCE_PREFIX, ContainerExtendedRequest

__all__ = [
    "EXTENDED_RESOURCE_CLAIM_ANNOTATION",
    "ExtendedClaimPlan",
    "RequestMapping",
    "claim_object",
    "device_class_mapping",
    "is_extended_resource_claim",
    "plan_extended_claim",
]

EXTENDED_RESOURCE_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"


@dataclass(frozen=True, slots=True)
class RequestMapping:
    """One entry of ``status.extendedResourceClaimStatus.requestMappings``."""

    container_name: str
    resource_name: str
    request_name: str


@dataclass(frozen=True, slots=True)
class ExtendedClaimPlan:
    """The special claim's requests ``(name, class, count)`` and the pod's request mappings."""

    requests: tuple[tuple[str, str, int], ...]
    mappings: tuple[RequestMapping, ...]


def device_class_mapping(classes: Iterable[DeviceClass]) -> dict[str, str]:
    """Extended resource name -> the name of the DeviceClass that serves it: the implicit name of
    every class, and each explicit ``extendedResourceName`` (the newest class naming it)."""
    classes = list(classes)
    out = {DEVICE_CLASS_RESOURCE_PREFIX + c.name: c.name for c in classes}
    out.update({name: c.name for name, c in extended_resource_classes(classes).items()})
    return out


def is_extended_resource_claim(annotations: Mapping[str, str]) -> bool:
    return annotations.get(EXTENDED_RESOURCE_CLAIM_ANNOTATION) == "true"


@dataclass(slots=True)
class _Request:
    name: str
    count: int


def _request_name(request: ContainerExtendedRequest) -> str:
    return f"container-{request.container}-request-{request.position}"


def plan_extended_claim(
    requests: Sequence[ContainerExtendedRequest], classes: Mapping[str, str]
) -> ExtendedClaimPlan | None:
    """The claim for the resources in ``classes`` (resource -> class name); None if no container asks."""
    device_requests: list[tuple[str, str, int]] = []
    mappings: list[RequestMapping] = []
    for resource in sorted(classes):
        asking = [r for r in requests if r.resource == resource]
        long_lived = {r.container: _Request(_request_name(r), r.amount) for r in asking if not r.short_lived}
        long_mappings = [
            RequestMapping(r.container_name, resource, long_lived[r.container].name)
            for r in asking
            if not r.short_lived
        ]
        short_mappings: list[RequestMapping] = []
        largest: _Request | None = None
        short_names: set[str] = set()
        for r in (r for r in asking if r.short_lived):
            covered = 0
            own: _Request | None = None
            for index in sorted(i for i in long_lived if i >= r.container):
                reused = long_lived[index]
                covered += reused.count
                short_mappings.append(RequestMapping(r.container_name, resource, reused.name))
                if covered >= r.amount:
                    break
            else:
                own = _Request(_request_name(r), r.amount - covered)
                short_mappings.append(RequestMapping(r.container_name, resource, own.name))
            if own is not None:
                short_names.add(own.name)
                if largest is None or largest.count < own.count:
                    largest = own
        if largest is not None and len(short_names) > 1:
            replaced = short_names - {largest.name}
            short_mappings = [
                RequestMapping(m.container_name, m.resource_name, largest.name) if m.request_name in replaced else m
                for m in short_mappings
            ]
        if largest is not None:
            device_requests.append((largest.name, classes[resource], largest.count))
        device_requests.extend((long_lived[i].name, classes[resource], long_lived[i].count) for i in sorted(long_lived))
        mappings.extend(long_mappings)
        mappings.extend(short_mappings)
    if not device_requests:
        return None
    return ExtendedClaimPlan(tuple(sorted(device_requests)), tuple(mappings))


def claim_object(namespace: str, pod_name: str, pod_uid: str, plan: ExtendedClaimPlan) -> dict[str, Any]:
    """The ResourceClaim to create (``generateName``; the API server names it)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "namespace": namespace,
            "generateName": f"{pod_name}-extended-resources-",
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": pod_uid, "controller": True}
            ],
            "annotations": {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"},
        },
        "spec": {
            "devices": {
                "requests": [
                    {"name": name, "exactly": {"deviceClassName": cls, "allocationMode": "ExactCount", "count": count}}
                    for name, cls, count in plan.requests
                ]
            }
        },
    }
