"""API writes of /bind: the claims' allocation and reservation (PreBind), then the Binding."""

from __future__ import annotations

import re
from typing import Any

from allocator import (
    AllocationResult,
    ParseError,
    ResourceClaim,
    allocation_to_obj,
    parse_allocation,
    parse_resource_claim,
)
from app.dynamicresources import ClaimWriteError
from app.kube import ApiError, KubeClient
from app.service import BindError
from scoring.framework import PodInfo

__all__ = ["FINALIZER", "ApiBinder", "ApiClaimWriter"]

_ALREADY_ASSIGNED = re.compile(r'is already assigned to node "([^"]+)"')


class ApiBinder:
    def __init__(self, client: KubeClient) -> None:
        self.client = client

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        try:
            await self.client.bind(namespace, name, uid, node)
        except ApiError as exc:
            if exc.status == 0:
                # Timeout or lost connection: the Binding may have been applied. Keep the assumption
                # (the watch or its TTL settles it) and let kube-scheduler retry.
                raise BindError(str(exc), kind="unreachable", definite=False) from exc
            if exc.status == 409:
                match = _ALREADY_ASSIGNED.search(str(exc))
                raise BindError(str(exc), kind="conflict", bound_to=match[1] if match else None) from exc
            if exc.status == 404:
                raise BindError(str(exc), kind="not-found") from exc
            if exc.status == 429 or exc.status >= 500:
                raise BindError(str(exc), kind="api-unavailable") from exc
            raise BindError(str(exc), kind="refused") from exc


FINALIZER = "resource.kubernetes.io/delete-protection"
_CONFLICT_RETRIES = 3


def _claim_path(claim: ResourceClaim) -> str:
    return f"/apis/resource.k8s.io/v1/namespaces/{claim.namespace}/resourceclaims/{claim.name}"


def _consumer(pod: PodInfo) -> dict[str, str]:
    return {"resource": "pods", "name": pod.name, "uid": pod.uid}


def _write_error(claim: ResourceClaim, step: str, exc: ApiError) -> ClaimWriteError:
    # A timeout or lost connection may have been applied; anything the API answered was not.
    return ClaimWriteError(f"resourceclaim {claim.key}: {step}: {exc}", definite=exc.status != 0)


def _same_allocation(stored: Any, ours: AllocationResult) -> bool:
    """Whether a claim's ``status.allocation`` is ours: the same devices for the same requests.

    Compared by results, not as raw JSON, because the API server may add fields we do not write
    (``allocationTimestamp``) or drop empty ones.
    """
    if not isinstance(stored, dict):
        return False
    try:
        theirs = parse_allocation(stored)
    except ParseError:
        return False
    key = lambda r: (r.request, r.driver, r.pool, r.device)  # noqa: E731
    return sorted(map(key, theirs.devices)) == sorted(map(key, ours.devices))


class ApiClaimWriter:
    """PreBind's claim writes against the API server, with the claim's resourceVersion as precondition.

    Each write starts from a fresh GET: the claim may have changed since the cache saw it (another
    pod reserved a shared claim). A 409 Conflict restarts from the GET, a bounded number of times.
    """

    def __init__(self, client: KubeClient) -> None:
        self.client = client

    async def _fresh(self, claim: ResourceClaim) -> dict[str, Any] | None:
        try:
            obj = await self.client.get(_claim_path(claim))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise _write_error(claim, "read", exc) from exc
        if (obj.get("metadata") or {}).get("uid") != claim.uid:
            return None  # deleted and re-created: not the claim we decided on
        return obj

    async def _put(self, claim: ResourceClaim, obj: dict[str, Any], status: bool) -> dict[str, Any]:
        return await self.client.put(_claim_path(claim) + ("/status" if status else ""), obj)

    async def allocate(self, claim: ResourceClaim, allocation: AllocationResult, pod: PodInfo) -> ResourceClaim:
        wanted = allocation_to_obj(allocation)
        for attempt in range(_CONFLICT_RETRIES):
            obj = await self._fresh(claim)
            if obj is None:
                raise ClaimWriteError(f"resourceclaim {claim.key} no longer exists")
            step = "read"
            try:
                current = (obj.get("status") or {}).get("allocation")
                if current is not None and not _same_allocation(current, allocation):
                    raise ClaimWriteError(f"resourceclaim {claim.key} was allocated meanwhile by someone else")
                metadata = obj.setdefault("metadata", {})
                if FINALIZER not in (metadata.get("finalizers") or []):
                    step = "add finalizer"
                    metadata["finalizers"] = [*(metadata.get("finalizers") or []), FINALIZER]
                    obj = await self._put(claim, obj, status=False)
                status = obj.setdefault("status", {})
                reserved = status.get("reservedFor") or []
                if current is None or all(r.get("uid") != pod.uid for r in reserved):
                    step = "write status"
                    status["allocation"] = wanted
                    if all(r.get("uid") != pod.uid for r in reserved):
                        status["reservedFor"] = [*reserved, _consumer(pod)]
                    obj = await self._put(claim, obj, status=True)
                return parse_resource_claim(obj)
            except ApiError as exc:
                if exc.status == 409 and attempt + 1 < _CONFLICT_RETRIES:
                    continue
                raise _write_error(claim, step, exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def reserve(self, claim: ResourceClaim, pod: PodInfo) -> ResourceClaim:
        for attempt in range(_CONFLICT_RETRIES):
            obj = await self._fresh(claim)
            if obj is None:
                raise ClaimWriteError(f"resourceclaim {claim.key} no longer exists")
            status = obj.setdefault("status", {})
            if status.get("allocation") is None:
                raise ClaimWriteError(f"resourceclaim {claim.key} was deallocated meanwhile")
            reserved = status.get("reservedFor") or []
            if any(r.get("uid") == pod.uid for r in reserved):
                return parse_resource_claim(obj)
            status["reservedFor"] = [*reserved, _consumer(pod)]
            try:
                return parse_resource_claim(await self._put(claim, obj, status=True))
            except ApiError as exc:
                if exc.status == 409 and attempt + 1 < _CONFLICT_RETRIES:
                    continue
                raise _write_error(claim, "write status", exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def release(
        self, claim: ResourceClaim, pod: PodInfo, allocation: AllocationResult | None
    ) -> ResourceClaim | None:
        """Remove the pod's reservation; deallocate (and drop the finalizer) if we allocated it."""
        for attempt in range(_CONFLICT_RETRIES):
            obj = await self._fresh(claim)
            if obj is None:
                return None
            step = "write status"
            try:
                status = obj.setdefault("status", {})
                reserved = status.get("reservedFor") or []
                remaining = [r for r in reserved if r.get("uid") != pod.uid]
                deallocate = (
                    allocation is not None and not remaining and _same_allocation(status.get("allocation"), allocation)
                )
                if remaining != reserved or deallocate:
                    status["reservedFor"] = remaining or None
                    if deallocate:
                        status.pop("allocation", None)
                    obj = await self._put(claim, obj, status=True)
                metadata = obj.setdefault("metadata", {})
                if allocation is not None and (obj.get("status") or {}).get("allocation") is None:
                    finalizers = metadata.get("finalizers") or []
                    if FINALIZER in finalizers:
                        step = "remove finalizer"
                        metadata["finalizers"] = [f for f in finalizers if f != FINALIZER]
                        obj = await self._put(claim, obj, status=False)
                return parse_resource_claim(obj)
            except ApiError as exc:
                if exc.status == 409 and attempt + 1 < _CONFLICT_RETRIES:
                    continue
                raise _write_error(claim, step, exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover
