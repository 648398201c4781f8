"""API writes of /bind: the claims' allocation and reservation (PreBind), then the Binding."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

from allocator import (
    AllocationResult,
    ParseError,
    RequestMapping,
    ResourceClaim,
    allocation_to_obj,
    parse_allocation,
    parse_resource_claim,
)
from app.cluster.kube import ApiError, KubeClient
from app.cluster.writes import BindError, ClaimWriteError
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
    """Whether a claim's ``status.allocation`` is ours: the same devices (and shares) for the same requests.

    Compared by results, not as raw JSON, because the API server may add fields we do not write
    (``allocationTimestamp``) or drop empty ones.
    """
    if not isinstance(stored, dict):
        return False
    try:
        theirs = parse_allocation(stored)
    except ParseError:
        return False
    key = lambda r: (r.request, r.driver, r.pool, r.device, r.share_id or "")  # noqa: E731
    return sorted(map(key, theirs.devices)) == sorted(map(key, ours.devices))


class _WriteFailed(Exception):
    """An API write of one step of a claim update failed."""

    def __init__(self, step: str, error: ApiError) -> None:
        super().__init__(step)
        self.step = step
        self.error = error


_Change = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


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

    async def _put(self, claim: ResourceClaim, obj: dict[str, Any], step: str, *, status: bool) -> dict[str, Any]:
        try:
            return await self.client.put(_claim_path(claim) + ("/status" if status else ""), obj)
        except ApiError as exc:
            raise _WriteFailed(step, exc) from exc

    async def _update(self, claim: ResourceClaim, change: _Change, *, gone_ok: bool = False) -> ResourceClaim | None:
        """Apply ``change`` to a fresh read of the claim; a 409 Conflict starts again from a new read."""
        for attempt in range(_CONFLICT_RETRIES):
            obj = await self._fresh(claim)
            if obj is None:
                if gone_ok:
                    return None
                raise ClaimWriteError(f"resourceclaim {claim.key} no longer exists")
            try:
                return parse_resource_claim(await change(obj))
            except _WriteFailed as failed:
                if failed.error.status == 409 and attempt + 1 < _CONFLICT_RETRIES:
                    continue
                raise _write_error(claim, failed.step, failed.error) from failed.error
        raise AssertionError("unreachable")  # pragma: no cover

    async def allocate(self, claim: ResourceClaim, allocation: AllocationResult, pod: PodInfo) -> ResourceClaim:
        async def change(obj: dict[str, Any]) -> dict[str, Any]:
            current = (obj.get("status") or {}).get("allocation")
            if current is not None and not _same_allocation(current, allocation):
                raise ClaimWriteError(f"resourceclaim {claim.key} was allocated meanwhile by someone else")
            metadata = obj.setdefault("metadata", {})
            if FINALIZER not in (metadata.get("finalizers") or []):
                metadata["finalizers"] = [*(metadata.get("finalizers") or []), FINALIZER]
                obj = await self._put(claim, obj, "add finalizer", status=False)
            status = obj.setdefault("status", {})
            reserved = status.get("reservedFor") or []
            if current is None or all(r.get("uid") != pod.uid for r in reserved):
                status["allocation"] = allocation_to_obj(allocation)
                if all(r.get("uid") != pod.uid for r in reserved):
                    status["reservedFor"] = [*reserved, _consumer(pod)]
                obj = await self._put(claim, obj, "write status", status=True)
            return obj

        stored = await self._update(claim, change)
        assert stored is not None
        return stored

    async def reserve(self, claim: ResourceClaim, pod: PodInfo) -> ResourceClaim:
        async def change(obj: dict[str, Any]) -> dict[str, Any]:
            status = obj.setdefault("status", {})
            if status.get("allocation") is None:
                raise ClaimWriteError(f"resourceclaim {claim.key} was deallocated meanwhile")
            reserved = status.get("reservedFor") or []
            if any(r.get("uid") == pod.uid for r in reserved):
                return obj
            status["reservedFor"] = [*reserved, _consumer(pod)]
            return await self._put(claim, obj, "write status", status=True)

        stored = await self._update(claim, change)
        assert stored is not None
        return stored

    async def create(self, obj: dict[str, Any]) -> ResourceClaim:
        """Create a claim (the special claim of extended resources); the API server names it."""
        namespace = obj["metadata"]["namespace"]
        path = f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"
        try:
            stored = await self.client.create(path, obj)
        except ApiError as exc:
            base = obj["metadata"].get("generateName", "")
            raise ClaimWriteError(
                f"creating resourceclaim {namespace}/{base}*: {exc}", definite=exc.status != 0
            ) from exc
        try:
            return parse_resource_claim(stored)
        except ParseError as exc:  # the API server's own answer: not expected, but not a crash either
            raise ClaimWriteError(f"the created resourceclaim is unreadable: {exc}", definite=False) from exc

    async def delete(self, claim: ResourceClaim) -> None:
        """Drop our finalizer, then delete the claim (by UID); gone already is fine."""

        async def change(obj: dict[str, Any]) -> dict[str, Any]:
            metadata = obj.setdefault("metadata", {})
            finalizers = metadata.get("finalizers") or []
            if FINALIZER not in finalizers:
                return obj
            metadata["finalizers"] = [f for f in finalizers if f != FINALIZER]
            return await self._put(claim, obj, "remove finalizer", status=False)

        if await self._update(claim, change, gone_ok=True) is None:
            return
        try:
            await self.client.delete(_claim_path(claim), claim.uid)
        except ApiError as exc:
            if exc.status not in (404, 409):  # 409: the UID precondition, a claim re-created meanwhile
                raise _write_error(claim, "delete", exc) from exc

    async def record_extended_claim(self, pod: PodInfo, claim: str, mappings: tuple[RequestMapping, ...]) -> None:
        """``status.extendedResourceClaimStatus`` of the pod: the claim and which request serves which
        container's resource (the kubelet reads it to hand the devices to the containers)."""
        recorded = {
            "resourceClaimName": claim,
            "requestMappings": [
                {"containerName": m.container_name, "resourceName": m.resource_name, "requestName": m.request_name}
                for m in mappings
            ],
        }
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status"
        try:
            await self.client.merge_patch(path, {"status": {"extendedResourceClaimStatus": recorded}})
        except ApiError as exc:
            message = f"pod {pod.key}: recording extended-resource claim {claim}: {exc}"
            raise ClaimWriteError(message, definite=exc.status != 0) from exc

    async def release(
        self, claim: ResourceClaim, pod: PodInfo, allocation: AllocationResult | None
    ) -> ResourceClaim | None:
        """Remove the pod's reservation; deallocate (and drop the finalizer) if we allocated it."""

        async def change(obj: dict[str, Any]) -> dict[str, Any]:
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
                    status.pop("devices", None)  # device statuses must name allocated devices
                obj = await self._put(claim, obj, "write status", status=True)
            metadata = obj.setdefault("metadata", {})
            if allocation is not None and (obj.get("status") or {}).get("allocation") is None:
                finalizers = metadata.get("finalizers") or []
                if FINALIZER in finalizers:
                    metadata["finalizers"] = [f for f in finalizers if f != FINALIZER]
                    obj = await self._put(claim, obj, "remove finalizer", status=False)
            return obj

        return await self._update(claim, change, gone_ok=True)
