"""A thin async Kubernetes API client for list, watch, get, update and Binding, on aiohttp + msgspec.

The ``kubernetes`` package loads kubeconfig / in-cluster credentials (including token refresh);
requests go through aiohttp because the package's typed models cost 400-750 ms per 5,000-node list
and its watch helper retries a 410 with the same expired resourceVersion. We own the loop instead.
aiohttp rather than httpx: on the same keep-alive TLS connection a request costs the client about a
quarter of the CPU (C HTTP parser, TLS on the event loop's transport). The Binding, sent for every
pod, has connections of its own (``app.cluster.api_connections``): cheaper still than aiohttp's.
"""

from __future__ import annotations

import contextlib
import logging
import ssl
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import aiohttp
import msgspec

from app.cluster.api_connections import ApiConnections, ConnectError, Disconnected

__all__ = ["ApiError", "CredentialsError", "GoneError", "KubeClient", "watch_query"]

_decode = msgspec.json.Decoder().decode
# One line per API request at DEBUG (``--log-level debug``), worded as httpx words it.
log = logging.getLogger("kube_gpu_extender.api")
# The API server answers 415 to a POST or PUT without a JSON Content-Type.
_HEADERS = {
    "Accept": "application/json",
    "Content-Type": "application/json",
    "User-Agent": "kube-gpu-extender/0.1.0",
}
_STRATEGIC_PATCH = "application/strategic-merge-patch+json"
_MERGE_PATCH = "application/merge-patch+json"


class CredentialsError(Exception):
    """The kubeconfig or the in-cluster credentials cannot be loaded; the message says which and why."""


class ApiError(Exception):
    """A non-success answer from the API server (a Kubernetes Status), or a transport failure."""

    def __init__(self, message: str, *, status: int = 0, reason: str = "", retry_after: float | None = None):
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.retry_after = retry_after


class GoneError(ApiError):
    """410 Gone: the resourceVersion is too old; the caller must relist."""


def _failure(exc: BaseException) -> str:
    """A transport failure as operators read it: what went wrong ("ConnectError", "ReadTimeout", ...),
    then the detail."""
    if isinstance(exc, aiohttp.ClientConnectorError | ConnectError):  # proxy connection failures included
        kind = "ConnectError"
    elif isinstance(exc, TimeoutError):  # aiohttp's timeouts are TimeoutErrors
        kind = "ReadTimeout"
    elif isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError | Disconnected):
        kind = "RemoteProtocolError"
    else:
        kind = type(exc).__name__
    detail = str(exc) or "no detail"
    return f"{kind}: {detail}"


def tls_context(cfg: Any) -> ssl.SSLContext:
    """TLS for a ``kubernetes.client.Configuration``: its CA (or the system's), its client certificate
    whether or not the server is verified, and no verification with ``insecure-skip-tls-verify``."""
    context = _verifying(ssl.create_default_context(cafile=cfg.ssl_ca_cert or None), cfg.verify_ssl)
    if cfg.cert_file and cfg.key_file:
        context.load_cert_chain(cfg.cert_file, cfg.key_file)
    return context


def _verifying(context: ssl.SSLContext, verify: bool) -> ssl.SSLContext:
    """``context`` as it is, or without any verification of the server (``verify`` False)."""
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def _logged(response: aiohttp.ClientResponse) -> None:
    if log.isEnabledFor(logging.DEBUG):
        version = f"{response.version.major}.{response.version.minor}" if response.version else "1.1"
        log.debug(
            'HTTP Request: %s %s "HTTP/%s %d %s"',
            response.method,
            response.url,
            version,
            response.status,
            response.reason or "",
        )


def _error(status: int, phrase: str, headers: Mapping[str, str], body: bytes) -> ApiError:
    message, reason = phrase, ""
    with contextlib.suppress(msgspec.DecodeError, AttributeError):
        answer = _decode(body)
        message, reason = answer.get("message") or message, answer.get("reason") or ""
    retry_after: float | None = None
    header = headers.get("retry-after")
    if header and header.isdigit():
        retry_after = float(header)
    cls = GoneError if status == 410 else ApiError
    return cls(f"{status} {message}", status=status, reason=reason, retry_after=retry_after)


# The loaders' refresh hook (``auth_settings()``) runs the kubeconfig loader again on every call: about
# 0.1 ms, on every Binding POST. Tokens rotate over minutes (the in-cluster loader re-reads its file
# once a minute; the kubelet renews a projected token at 80 % of at least 10 minutes), so the header
# is kept this many seconds.
AUTHORIZATION_TTL = 5.0


def _kept_for(
    seconds: float, read: Callable[[], tuple[str, str] | None], clock: Callable[[], float] = time.monotonic
) -> Callable[[], tuple[str, str] | None]:
    """``read`` called at most once per ``seconds``; its last answer in between."""
    kept: tuple[float, tuple[str, str] | None] | None = None

    def current() -> tuple[str, str] | None:
        nonlocal kept
        now = clock()
        if kept is None or now - kept[0] >= seconds:
            kept = (now, read())
        return kept[1]

    return current


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
        self._authorization = authorization
        self._ssl: ssl.SSLContext | bool = verify
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._proxy = proxy
        self._session: aiohttp.ClientSession | None = None  # made on first use, inside the event loop
        self._posts: ApiConnections | None = None  # the Binding POST's connections (without a proxy)

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                headers=_HEADERS,
                connector=aiohttp.TCPConnector(ssl=self._ssl, limit=100),
                timeout=self._timeout,
                # Watch lines carry whole objects (a ResourceSlice can be large): no line limit applies,
                # lines are split here, but reads come in chunks of this size.
                read_bufsize=2**18,
            )
        return self._session

    def _credential(self) -> tuple[str, str] | None:
        """The credential header (name, value) to send now, if any."""
        return self._authorization() if self._authorization else None

    def _headers(self) -> dict[str, str] | None:
        header = self._credential()
        return {header[0]: header[1]} if header else None

    @classmethod
    def from_kubeconfig(cls, path: str | None) -> KubeClient:
        """From a kubeconfig file, or from the in-cluster ServiceAccount when ``path`` is None."""
        from kubernetes import client, config  # imported lazily: only cluster mode needs it

        cfg = client.Configuration()
        try:
            if path:
                config.load_kube_config(config_file=path, client_configuration=cfg)  # type: ignore[no-untyped-call]
            else:
                config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        except Exception as exc:  # the loaders raise their own, yaml's and OS errors: all mean "unusable"
            source = f"kubeconfig {path}" if path else "the in-cluster ServiceAccount"
            raise CredentialsError(f"cannot load credentials from {source}: {exc}".replace("\n", " ")) from None
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

        return cls(
            cfg.host,
            authorization=_kept_for(AUTHORIZATION_TTL, authorization),
            verify=tls_context(cfg),
            proxy=cfg.proxy or None,
        )

    async def close(self) -> None:
        if self._posts is not None:
            self._posts.close()
        if self._session is not None:
            await self._session.close()

    async def list_pages(
        self, path: str, *, field_selector: str = "", limit: int = 500
    ) -> AsyncIterator[tuple[list[dict[str, Any]], str]]:
        """The list page by page, each with the list's resourceVersion once it is known (the last
        page's): a caller that converts each page as it comes never holds 150,000 raw pods at once."""
        params: dict[str, Any] = {"limit": limit}
        if field_selector:
            params["fieldSelector"] = field_selector
        while True:
            try:
                async with self._http().get(
                    self.base_url + path, params=params, headers=self._headers(), proxy=self._proxy
                ) as response:
                    _logged(response)
                    body = await response.read()
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise ApiError(f"list {path}: {_failure(exc)}") from exc
            if response.status != 200:
                raise _error(response.status, response.reason or "", response.headers, body)
            page = _decode(body)
            del body
            metadata = page.get("metadata") or {}
            if not metadata.get("continue"):
                yield page.get("items") or [], str(metadata.get("resourceVersion", ""))
                return
            yield page.get("items") or [], ""
            params["continue"] = metadata["continue"]

    async def list(self, path: str, *, field_selector: str = "", limit: int = 500) -> tuple[list[dict[str, Any]], str]:
        """All items (paginated) and the list's resourceVersion."""
        items: list[dict[str, Any]] = []
        resource_version = ""
        async for page, version in self.list_pages(path, field_selector=field_selector, limit=limit):
            items.extend(page)
            resource_version = version
        return items, resource_version

    @contextlib.asynccontextmanager
    async def watch(
        self, path: str, resource_version: str, *, field_selector: str = "", timeout_seconds: int = 300
    ) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        """Open a watch; entering means the server accepted it. Yields an iterator of events."""
        params = watch_query(resource_version, field_selector, timeout_seconds)
        # No read timeout on the stream beyond the server-side timeout plus slack.
        timeout = aiohttp.ClientTimeout(total=None, connect=30.0, sock_read=timeout_seconds + 30.0)
        try:
            async with self._http().get(
                self.base_url + path, params=params, headers=self._headers(), proxy=self._proxy, timeout=timeout
            ) as response:
                _logged(response)
                if response.status != 200:
                    raise _error(response.status, response.reason or "", response.headers, await response.read())
                yield self._events(response)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ApiError(f"watch {path}: {_failure(exc)}") from exc

    @staticmethod
    async def _events(response: aiohttp.ClientResponse) -> AsyncIterator[dict[str, Any]]:
        pending = b""
        async for chunk in response.content.iter_any():
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            for line in lines:
                event = _event(line)
                if event is not None:
                    yield event
        event = _event(pending)
        if event is not None:
            yield event

    async def get(self, path: str) -> dict[str, Any]:
        """One object; an ApiError with ``status`` 404 when it does not exist."""
        return await self._call("GET", path)

    async def put(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Update (optimistically: the object's resourceVersion is the precondition; 409 on conflict)."""
        return await self._call("PUT", path, msgspec.json.encode(obj))

    async def post(self, path: str, obj: dict[str, Any]) -> None:
        """Create (an Eviction, an Event); the answer's body is not needed."""
        await self._send("POST", path, msgspec.json.encode(obj), f"POST {path}")

    async def create(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Create and return the object as stored (its generated name, UID, resourceVersion)."""
        return await self._call("POST", path, msgspec.json.encode(obj))

    async def delete(self, path: str, uid: str = "") -> None:
        """Delete, with the object's UID as precondition when given (404 when it is gone)."""
        body = None
        if uid:
            options = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
            body = msgspec.json.encode(options)
        await self._send("DELETE", path, body, f"DELETE {path}")

    async def merge_patch(self, path: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A JSON merge patch (RFC 7386)."""
        return await self._call("PATCH", path, msgspec.json.encode(patch), _MERGE_PATCH)

    async def strategic_patch(self, path: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A strategic merge patch: lists with a merge key (a pod's conditions, by type) are merged."""
        return await self._call("PATCH", path, msgspec.json.encode(patch), _STRATEGIC_PATCH)

    async def _send(
        self, method: str, path: str, content: bytes | None, where: str, content_type: str | None = None
    ) -> tuple[int, bytes]:
        """One request answered 200 or 201: its status and body. Otherwise an ApiError: the server's
        status, or a timeout or transport failure (status 0: the request may have been applied) whose
        message starts with ``where``."""
        try:
            headers = self._headers()
            if content_type is not None:
                headers = {**(headers or {}), "Content-Type": content_type}
            async with self._http().request(
                method, self.base_url + path, data=content, headers=headers, proxy=self._proxy
            ) as response:
                _logged(response)
                body = await response.read()
        except TimeoutError as exc:  # aiohttp's ServerTimeoutError included
            failure = f"timed out: {exc or 'no answer in time'}"
            raise ApiError(f"{where} {failure}" if where else failure, reason="Timeout") from exc
        except aiohttp.ClientError as exc:
            failure = _failure(exc)
            raise ApiError(f"{where}: {failure}" if where else failure, reason="Transport") from exc
        if response.status not in (200, 201):
            raise _error(response.status, response.reason or "", response.headers, body)
        return response.status, body

    async def _call(
        self, method: str, path: str, content: bytes | None = None, content_type: str | None = None
    ) -> dict[str, Any]:
        status, body = await self._send(method, path, content, f"{method} {path}", content_type)
        obj = _decode(body)
        if not isinstance(obj, dict):
            raise ApiError(f"{method} {path}: the answer is not an object", status=status)
        return obj

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        """POST a v1 Binding with the pod UID as precondition (a re-created pod is refused). Sent for
        every pod: on ``ApiConnections`` unless a proxy is configured (app/cluster/api_connections.py)."""
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        path = f"/api/v1/namespaces/{namespace}/pods/{name}/binding"
        if self._proxy:
            # No prefix on a transport failure: the service's message names the pod and the node.
            await self._send("POST", path, msgspec.json.encode(binding), "")
            return
        if self._posts is None:
            context = self._ssl
            if not isinstance(context, ssl.SSLContext):  # what aiohttp takes for ssl=True (the system's CAs) or False
                context = _verifying(ssl.create_default_context(), context)
            self._posts = ApiConnections(self.base_url, context, self._timeout.total or 30.0, _HEADERS)
        try:
            answer = await self._posts.post(path, msgspec.json.encode(binding), self._credential())
        except TimeoutError as exc:
            raise ApiError("timed out: no answer in time", reason="Timeout") from exc
        except OSError as exc:  # ConnectError, Disconnected, TLS errors
            raise ApiError(_failure(exc), reason="Transport") from exc
        if log.isEnabledFor(logging.DEBUG):
            log.debug('HTTP Request: POST %s%s "HTTP/1.1 %d %s"', self.base_url, path, answer.status, answer.phrase)
        if answer.status not in (200, 201):
            raise _error(answer.status, answer.phrase, answer.headers, answer.body)


def watch_query(resource_version: str, field_selector: str = "", timeout_seconds: int = 300) -> dict[str, str]:
    """The query of a watch from ``resource_version``, with bookmarks, ended by the server after
    ``timeout_seconds``."""
    query = {
        "watch": "1",
        "resourceVersion": resource_version,
        "allowWatchBookmarks": "true",
        "timeoutSeconds": str(timeout_seconds),
    }
    if field_selector:
        query["fieldSelector"] = field_selector
    return query


def _event(line: bytes) -> dict[str, Any] | None:
    """One watch event from its line; None for a blank line or a non-object."""
    if not line.strip():
        return None
    try:
        event = _decode(line)
    except msgspec.DecodeError as exc:
        raise ApiError(f"undecodable watch event: {exc}") from exc
    return event if isinstance(event, dict) else None
