"""Turning API-server answers to a Binding into the extender's bind outcomes."""

from __future__ import annotations

import re

from app.kube import ApiError, KubeClient
from app.service import BindError

__all__ = ["ApiBinder"]

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
