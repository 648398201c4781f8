"""What a pod asks of its queue, in the queue system's units.

Container requests plus, per Kueue's deviceClassMappings, the devices its ResourceClaims request from
a mapped DeviceClass. Kueue counts cpu in cores; KAI in millicores, memory in MB (10^6 bytes) and any
``*/gpu`` extended resource as ``gpu``.
"""

from __future__ import annotations

from collections.abc import Mapping

from allocator.types import ALLOCATION_MODE_EXACT_COUNT, ResourceClaim
from fairshare.config import QueueConfig
from scoring.framework import PodInfo

__all__ = ["kai_amounts", "kueue_amounts", "queue_requests"]


def kueue_amounts(requests: Mapping[str, int]) -> dict[str, float]:
    """Requests (milli-CPU, bytes, units) in Kueue's units: cpu in cores; zero amounts left out."""
    return {r: (a / 1000.0 if r == "cpu" else float(a)) for r, a in requests.items() if a}


def queue_requests(
    pod: PodInfo, config: QueueConfig, claims: Mapping[str, ResourceClaim]
) -> tuple[dict[str, int], str]:
    """What a pod asks of its queue: its container requests plus, per Kueue's deviceClassMappings,
    the devices its ResourceClaims request from a mapped DeviceClass (ExactCount's count, or what
    was allocated). The second value says why the devices cannot be counted ("" when they can)."""
    requests = dict(pod.resources.requests)
    if not config.device_classes or not pod.claims:
        return requests, ""
    for ref in pod.claims:
        claim = claims.get(f"{pod.namespace}/{ref.claim}")
        if claim is None:
            continue  # not created yet: the DRA check holds the pod back anyway
        allocated: dict[str, int] = {}
        for result in claim.allocation.devices if claim.allocation is not None else ():
            allocated[result.request] = allocated.get(result.request, 0) + 1
        for request in claim.devices.requests:
            if request.exactly is not None:
                choices = [
                    (
                        request.name,
                        request.exactly.device_class_name,
                        request.exactly.allocation_mode,
                        request.exactly.count,
                    )
                ]
            else:  # firstAvailable: the alternative allocated, or else the first (preferred) one
                choices = [
                    (f"{request.name}/{sub.name}", sub.device_class_name, sub.allocation_mode, sub.count)
                    for sub in request.first_available
                ]
                chosen = [c for c in choices if c[0] in allocated]
                choices = chosen or choices[:1]
            for name, device_class, mode, count in choices:
                resource = config.device_classes.get(device_class)
                if resource is None:
                    continue
                if name in allocated:
                    count = allocated[name]
                elif mode != ALLOCATION_MODE_EXACT_COUNT:
                    return requests, (
                        f"ResourceClaim {claim.key} request {name}: allocationMode {mode} of mapped "
                        f"DeviceClass {device_class} cannot be counted against a queue before allocation"
                    )
                requests[resource] = requests.get(resource, 0) + count
    return requests, ""


def kai_amounts(requests: Mapping[str, int]) -> dict[str, float]:
    """Requests (milli-CPU, bytes, units) in KAI's units and names."""
    out: dict[str, float] = {}
    for name, amount in requests.items():
        if not amount:
            continue
        if name == "cpu":
            key, value = "cpu", float(amount)
        elif name == "memory":
            key, value = "memory", amount / 1e6
        elif name.endswith("/gpu"):
            key, value = "gpu", float(amount)
        else:
            key, value = name, float(amount)
        out[key] = out.get(key, 0.0) + value
    return out
