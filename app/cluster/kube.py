"""A thin async Kubernetes API client for list, watch, get, update and Binding, on httpx + msgspec.

The ``kubernetes`` package loads kubeconfig / in-cluster credentials (including token refresh);
requests go through httpx because the package's typed models cost 400-750 ms per 5,000-node list
and its watch helper retries a 410 with the same expired resourceVersion. We own the loop instead.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import msgspec

__all__ = ["ApiError", "GoneError", "KubeClient"]

_decode = msgspec.json.Decoder().decode


class ApiError(Exception):
    """A non-success answer from the API server (a Kubernetes Status), or a transport failure."""

    def __init__(self, message: str, *, status: int = 0, reason: str = "", retry_after: float | None = None):
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.retry_after = retry_after


class GoneError(ApiError):
    """410 Gone: the resourceVersion is too old; the caller must relist."""


class _HeaderAuth(httpx.Auth):
    """Sets the credential header (name, value) the source gives for each request, if any."""

    def __init__(self, source: Callable[[], tuple[str, str] | None]) -> None:
        self._source = source

    def auth_flow(self, request: httpx.Request):  # type: ignore[no-untyped-def]
        header = self._source()
        if header:
            request.headers[header[0]] = header[1]
        yield request


def tls_context(cfg: Any) -> ssl.SSLContext:
    """TLS for a ``kubernetes.client.Configuration``: its CA (or the system's), its client certificate
    whether or not the server is verified, and no verification with ``insecure-skip-tls-verify``."""
    context = ssl.create_default_context(cafile=cfg.ssl_ca_cert or None)
    if not cfg.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if cfg.cert_file and cfg.key_file:
        context.load_cert_chain(cfg.cert_file, cfg.key_file)
    return context


def _error(response: httpx.Response, body: bytes) -> ApiError:
    message, reason = response.reason_phrase, ""
    with contextlib.suppress(msgspec.DecodeError, AttributeError):
        status = _decode(body)
        message, reason = status.get("message") or message, status.get("reason") or ""
    retry_after: float | None = None
    header = response.headers.get("retry-after")
    if header and header.isdigit():
        retry_after = float(header)
    cls = GoneError if response.status_code == 410 else ApiError
    return cls(f"{response.status_code} {message}", status=response.status_code, reason=reason, retry_after=retry_after)


class KubeClient:
    def __init__(
        self,
        base_url: str,
        *,
        authorization: Callable[[], tuple[str, str] | None] | None = None,
        verify: ssl.SSLContext | bool = True,
        timeout: float = 30.0,
        proxy: str | None = None,
    ) -> None:
        """``authorization`` gives the credential header (name, value) for each request, or None."""
        self.base_url = base_url.rstrip("/")
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            auth=_HeaderAuth(authorization) if authorization else None,
            verify=verify,
            proxy=proxy,
            timeout=httpx.Timeout(timeout),
            # The API server answers 415 to a POST or PUT without a JSON Content-Type.
            headers={
                "Accept": "application/json",
                "Content-Type": "application/json",
                "User-Agent": "kube-gpu-extender/0.1.0",
            },
        )

    @classmethod
    def from_kubeconfig(cls, path: str | None) -> KubeClient:
        """From a kubeconfig file, or from the in-cluster ServiceAccount when ``path`` is None."""
        from kubernetes import client, config  # imported lazily: only cluster mode needs it

        cfg = client.Configuration()
        if path:
            config.load_kube_config(config_file=path, client_configuration=cfg)  # type: ignore[no-untyped-call]
        else:
            config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        return cls.from_configuration(cfg)

    @classmethod
    def from_configuration(cls, cfg: Any) -> KubeClient:
        """From a loaded ``kubernetes.client.Configuration``: every credential its loaders support.

        The bearer token (static, token file, exec plugin, in-cluster with rotation) is read through
        ``auth_settings()`` on every request, which runs the loader's refresh hook and hides where the
        client keeps it (``api_key["authorization"]`` before 36.0.3, ``api_key["BearerToken"]`` since).
        """

        def authorization() -> tuple[str, str] | None:
            setting = cfg.auth_settings().get("BearerToken")
            return (setting["key"], setting["value"]) if setting and setting.get("value") else None

        return cls(cfg.host, authorization=authorization, verify=tls_context(cfg), proxy=cfg.proxy or None)

    async def close(self) -> None:
        await self._http.aclose()

    async def list(self, path: str, *, field_selector: str = "", limit: int = 500) -> tuple[list[dict[str, Any]], str]:
        """All items (paginated) and the list's resourceVersion."""
        items: list[dict[str, Any]] = []
        params: dict[str, Any] = {"limit": limit}
        if field_selector:
            params["fieldSelector"] = field_selector
        while True:
            try:
                response = await self._http.get(path, params=params)
            except httpx.HTTPError as exc:
                raise ApiError(f"list {path}: {type(exc).__name__}: {exc}") from exc
            body = response.content
            if response.status_code != 200:
                raise _error(response, body)
            page = _decode(body)
            items.extend(page.get("items") or [])
            metadata = page.get("metadata") or {}
            if not metadata.get("continue"):
                return items, str(metadata.get("resourceVersion", ""))
            params["continue"] = metadata["continue"]

    @contextlib.asynccontextmanager
    async def watch(
        self, path: str, resource_version: str, *, field_selector: str = "", timeout_seconds: int = 300
    ) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        """Open a watch; entering means the server accepted it. Yields an iterator of events."""
        params: dict[str, Any] = {
            "watch": "1",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": timeout_seconds,
        }
        if field_selector:
            params["fieldSelector"] = field_selector
        # No read timeout on the stream beyond the server-side timeout plus slack.
        timeout = httpx.Timeout(30.0, read=timeout_seconds + 30.0)
        try:
            async with self._http.stream("GET", path, params=params, timeout=timeout) as response:
                if response.status_code != 200:
                    raise _error(response, await response.aread())
                yield self._events(response)
        except httpx.HTTPError as exc:
            raise ApiError(f"watch {path}: {type(exc).__name__}: {exc}") from exc

    @staticmethod
    async def _events(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
        async for line in response.aiter_lines():
            if line.strip():
                try:
                    event = _decode(line)
                except msgspec.DecodeError as exc:
                    raise ApiError(f"undecodable watch event: {exc}") from exc
                if isinstance(event, dict):
                    yield event

    async def get(self, path: str) -> dict[str, Any]:
        """One object; an ApiError with ``status`` 404 when it does not exist."""
        return await self._call("GET", path)

    async def put(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Update (optimistically: the object's resourceVersion is the precondition; 409 on conflict)."""
        return await self._call("PUT", path, msgspec.json.encode(obj))

    async def _send(self, method: str, path: str, content: bytes | None, where: str) -> httpx.Response:
        """One request answered 200 or 201. Otherwise an ApiError: the server's status, or a timeout or
        transport failure (status 0: the request may have been applied) whose message starts with ``where``."""
        try:
            response = await self._http.request(method, path, content=content)
        except httpx.TimeoutException as exc:
            failure = f"timed out: {exc}"
            raise ApiError(f"{where} {failure}" if where else failure, reason="Timeout") from exc
        except httpx.HTTPError as exc:
            failure = f"{type(exc).__name__}: {exc}"
            raise ApiError(f"{where}: {failure}" if where else failure, reason="Transport") from exc
        if response.status_code not in (200, 201):
            raise _error(response, response.content)
        return response

    async def _call(self, method: str, path: str, content: bytes | None = None) -> dict[str, Any]:
        response = await self._send(method, path, content, f"{method} {path}")
        obj = _decode(response.content)
        if not isinstance(obj, dict):
            raise ApiError(f"{method} {path}: the answer is not an object", status=response.status_code)
        return obj

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        """POST a v1 Binding with the pod UID as precondition (a re-created pod is refused)."""
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        path = f"/api/v1/namespaces/{namespace}/pods/{name}/binding"
        # No prefix on a transport failure: the service's message names the pod and the node.
        await self._send("POST", path, msgspec.json.encode(binding), "")
