"""GPU sharing in the simulated cluster: how trace GPUs and GPU pods look to the extender.

``--sharing dra`` (the default): every GPU of a node is a DRA device that allows multiple
allocations (consumable capacity) with ``gpu.nvidia.com/gpu-milli: 1000``, whose requestPolicy
accepts any whole value 1..1000; the node publishes them in one ResourceSlice and the DeviceClass
``gpu.nvidia.com`` names ``extendedResourceName: nvidia.com/gpu``, so scoring counts them per node
in milli-devices (``app.cluster.dra_extended``). A GPU pod gets a ResourceClaim of its own: a
sharing pod (``gpu_milli`` < 1000) one device with ``capacity.requests`` of its milli-GPUs, a
whole-GPU pod ``count: num_gpu`` devices that each consume all 1000. The claims live in the
cache as real objects; the DynamicResources participant allocates them at /bind as in a cluster.

``--sharing none``: the device plugin's integer ``nvidia.com/gpu`` (node allocatable, pod
requests), so a sharing pod takes a whole GPU, as before this module existed.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import msgspec

from allocator import DeviceID, ResourceClaim, ResourceSlice
from app.cluster.objects import claim_from_obj, device_class_from_obj, slice_from_obj
from k8s_semantics.quantity import to_value
from simulator.trace import GPU, GPU_PRODUCT_LABEL, SimNode, SimPod

__all__ = [
    "DEVICE_CLASS",
    "DRIVER",
    "MILLI",
    "SHARING",
    "allocated_milli",
    "claim_name",
    "device_class",
    "gpu_label",
    "node_slice",
    "pod_claim",
    "with_claim",
    "without_gpu_allocatable",
]

SHARING = ("dra", "none")
DRIVER = DEVICE_CLASS = "gpu.nvidia.com"
MILLI = "gpu-milli"  # the capacity every simulated GPU has 1000 of
_WHOLE = 1000

_encode = msgspec.json.encode
_decode = msgspec.json.decode


def device_class() -> Any:
    """The DeviceClass whose devices count as ``nvidia.com/gpu`` in scoring."""
    return device_class_from_obj(
        {
            "kind": "DeviceClass",
            "metadata": {"name": DEVICE_CLASS},
            "spec": {
                "selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}],
                "extendedResourceName": GPU,
            },
        }
    )


def _device(index: int, model: str) -> dict[str, Any]:
    policy = {"default": str(_WHOLE), "validRange": {"min": "1", "max": str(_WHOLE), "step": "1"}}
    device: dict[str, Any] = {
        "name": f"gpu-{index}",
        "allowMultipleAllocations": True,
        "capacity": {MILLI: {"value": str(_WHOLE), "requestPolicy": policy}},
    }
    if model:
        device["attributes"] = {"model": {"string": model}}
    return device


_TEMPLATES: dict[tuple[int, str], ResourceSlice] = {}


def node_slice(node: SimNode) -> ResourceSlice | None:
    """The node's GPUs as one ResourceSlice (pool = node name), or None for a node without GPUs.
    Nodes of one shape share the parsed devices (immutable; their memos depend on content only)."""
    if not node.gpus:
        return None
    template = _TEMPLATES.get((node.gpus, node.model))
    if template is None:
        template = _TEMPLATES[(node.gpus, node.model)] = _parse_slice(node)
    return replace(
        template,
        name=f"{node.name}-{DRIVER}",
        node_name=node.name,
        pool=replace(template.pool, name=node.name),
    )


def _parse_slice(node: SimNode) -> ResourceSlice:
    return slice_from_obj(
        {
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node.name}-{DRIVER}"},
            "spec": {
                "driver": DRIVER,
                "nodeName": node.name,
                "pool": {"name": node.name, "generation": 1, "resourceSliceCount": 1},
                "devices": [_device(i, node.model) for i in range(node.gpus)],
            },
        }
    )


def without_gpu_allocatable(node: SimNode) -> dict[str, int]:
    """The node's allocatable without the device plugin's ``nvidia.com/gpu`` (DRA serves the GPUs:
    with both, scoring would count the device plugin's figure only)."""
    return {name: value for name, value in node.allocatable.items() if name != GPU}


def claim_name(pod: SimPod) -> str:
    return f"{pod.name}-gpu"


# Kept per pod (SimPod is frozen, so hashable): a pod is tried once per run, and the runs of an
# experiment in one process share the trace's pods.
_KEPT_PER_POD = 100_000


@functools.lru_cache(maxsize=_KEPT_PER_POD)
def pod_claim(pod: SimPod) -> ResourceClaim | None:
    """The pod's ResourceClaim (None for a CPU-only pod; a claim is immutable, so one object serves
    every run)."""
    if not pod.gpus:
        return None
    shape = (pod.namespace, pod.gpus, pod.gpu_milli if pod.shares_gpu else None)
    parsed = _claims.get(shape)
    if parsed is None:  # claims of one shape differ only in name and uid: parsed once
        parsed = _claims[shape] = _parse_claim(pod)
    return replace(parsed, name=claim_name(pod), uid=f"{pod.uid}-gpu")


_claims: dict[tuple[str, int, int | None], ResourceClaim] = {}


def _parse_claim(pod: SimPod) -> ResourceClaim:
    exactly: dict[str, Any] = {"deviceClassName": DEVICE_CLASS, "allocationMode": "ExactCount", "count": pod.gpus}
    if pod.shares_gpu:
        exactly["capacity"] = {"requests": {MILLI: str(pod.gpu_milli)}}
    return claim_from_obj(
        {
            "kind": "ResourceClaim",
            "metadata": {
                "name": claim_name(pod),
                "namespace": pod.namespace,
                "uid": f"{pod.uid}-gpu",
                "resourceVersion": "1",
            },
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
        }
    )


@functools.lru_cache(maxsize=_KEPT_PER_POD)
def with_claim(pod: SimPod) -> SimPod:
    """``pod`` asking for its GPUs through its ResourceClaim instead of ``nvidia.com/gpu`` requests."""
    return _with_claim(pod) if pod.gpus else pod


def _with_claim(pod: SimPod) -> SimPod:
    body = _decode(pod.body)
    spec = body["spec"]
    spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim_name(pod)}]
    container = spec["containers"][0]
    resources = container.setdefault("resources", {})
    for part in ("requests", "limits"):
        amounts = resources.get(part)
        if amounts is not None:
            amounts.pop(GPU, None)
            if not amounts:
                del resources[part]
    resources["claims"] = [{"name": "gpu"}]
    return replace(pod, body=_encode(body))


def allocated_milli(claim: ResourceClaim | None) -> dict[DeviceID, int]:
    """Milli-GPUs the claim's allocation takes per device (a result without consumedCapacity
    holds its device whole)."""
    out: dict[DeviceID, int] = {}
    if claim is None or claim.allocation is None:
        return out
    for result in claim.allocation.devices:
        consumed: Mapping[str, str] | None = result.consumed_capacity
        amount = to_value(consumed[MILLI]) if consumed and MILLI in consumed else _WHOLE
        out[result.id] = out.get(result.id, 0) + amount
    return out


def gpu_label(node: SimNode) -> dict[str, str]:
    return {GPU_PRODUCT_LABEL: node.model} if node.model else {}
