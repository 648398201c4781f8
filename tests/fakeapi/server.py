"""A fake Kubernetes API server for tests of the list/watch and binding paths.

The server runs uvicorn in a background thread on 127.0.0.1 and serves the
core/v1 subset the extender uses: list, watch and get for Nodes and Pods, and
the ``pods/binding`` subresource; the resource.k8s.io/v1 DRA kinds; list and
watch of Kueue's ResourceFlavors, Cohorts, ClusterQueues and LocalQueues
(kueue.x-k8s.io/v1beta2, absent with ``kueue=False``). Tests drive the cluster state from their own
thread (``add``/``update``/``delete``) and inject faults (``compact``,
``drop_watches``, ``fail_next``, ``set_latency``).

Semantics follow the real API server where it matters for a reflector:

* one global, monotonically increasing resourceVersion (RV) shared by all kinds;
* full change history since the last ``compact()``; a list or watch that asks
  for an RV older than the compaction point is answered with 410 Expired
  (an HTTP 410 for lists, a single ERROR event for watches);
* watch streams are newline-delimited JSON events; with a ``fieldSelector`` an
  object that stops matching arrives as DELETED (its previous state, stamped
  with the new RV) and one that starts matching arrives as ADDED;
* a watch without an RV (or with RV "0") starts with synthetic ADDED events
  for the current state;
* paginated lists serve every page from the snapshot taken for the first page.

Stored objects are never mutated in place: every change stores a fresh copy,
so history entries and queued events can share references safely.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import copy
import json
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import Any
from urllib.parse import unquote

import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

Obj = dict[str, Any]
Key = tuple[str, str, str]  # (kind, namespace, name); namespace is "" for Nodes

LIST_KINDS = {
    "Node": "NodeList",
    "Pod": "PodList",
    "DeviceClass": "DeviceClassList",
    "ResourceClaim": "ResourceClaimList",
    "ResourceSlice": "ResourceSliceList",
    "ResourceFlavor": "ResourceFlavorList",
    "Cohort": "CohortList",
    "ClusterQueue": "ClusterQueueList",
    "LocalQueue": "LocalQueueList",
    "Workload": "WorkloadList",
}
NAMESPACED = {
    "Node": False,
    "Pod": True,
    "DeviceClass": False,
    "ResourceClaim": True,
    "ResourceSlice": False,
    "ResourceFlavor": False,
    "Cohort": False,
    "ClusterQueue": False,
    "LocalQueue": True,
    "Workload": True,
}
RESOURCES = {
    "Node": "nodes",
    "Pod": "pods",
    "DeviceClass": "deviceclasses",
    "ResourceClaim": "resourceclaims",
    "ResourceSlice": "resourceslices",
    "ResourceFlavor": "resourceflavors",
    "Cohort": "cohorts",
    "ClusterQueue": "clusterqueues",
    "LocalQueue": "localqueues",
    "Workload": "workloads",
}
DRA = "/apis/resource.k8s.io/v1"
KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
KUEUE_KINDS = ("ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue", "Workload")
API_VERSIONS = {
    kind: "v1" if kind in ("Node", "Pod") else "kueue.x-k8s.io/v1beta2" if kind in KUEUE_KINDS else "resource.k8s.io/v1"
    for kind in LIST_KINDS
}
# Field labels the real server accepts for these kinds (others answer 400).
FIELD_LABELS = {
    "Node": {"metadata.name", "spec.unschedulable"},
    "Pod": {
        "metadata.name",
        "metadata.namespace",
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    },
    "DeviceClass": {"metadata.name"},
    "ResourceClaim": {"metadata.name", "metadata.namespace"},
    "ResourceSlice": {"metadata.name", "spec.nodeName", "spec.driver"},
    # Custom resources: only the metadata fields.
    "ResourceFlavor": {"metadata.name"},
    "Cohort": {"metadata.name"},
    "ClusterQueue": {"metadata.name"},
    "LocalQueue": {"metadata.name", "metadata.namespace"},
    "Workload": {"metadata.name", "metadata.namespace"},
}
BOOL_FIELDS = {"spec.unschedulable", "spec.hostNetwork"}
REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}
TRUE_VALUES = {"1", "true"}


def status_body(code: int, message: str, reason: str | None = None, details: Obj | None = None) -> Obj:
    """Build a v1 Status object describing a failure."""
    body: Obj = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason or REASONS.get(code, "Unknown"),
        "code": code,
    }
    if details:
        body["details"] = details
    return body


def json_response(body: Obj, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(json.dumps(body), status_code=status, media_type="application/json", headers=headers)


class APIError(Exception):
    """Raised by handlers; rendered as a Status response with the same code."""

    def __init__(self, code: int, message: str, reason: str | None = None, details: Obj | None = None) -> None:
        super().__init__(message)
        self.body = status_body(code, message, reason, details)
        self.code = code


@dataclass(frozen=True)
class Requirement:
    """One term of a field selector: ``field=value`` or ``field!=value``."""

    field: str
    equal: bool
    value: str


def parse_field_selector(kind: str, raw: str) -> list[Requirement]:
    """Parse a comma-separated (AND) field selector with =, == and != terms."""
    reqs: list[Requirement] = []
    for term in filter(None, (t.strip() for t in raw.split(","))):
        for op in ("!=", "==", "="):
            name, sep, value = term.partition(op)
            if sep:
                break
        else:
            raise APIError(400, f'invalid selector: "{raw}"; can\'t understand "{term}"')
        name = name.strip()
        if name not in FIELD_LABELS[kind]:
            raise APIError(400, f"field label not supported: {name}")
        reqs.append(Requirement(name, op != "!=", value.strip()))
    return reqs


def field_value(obj: Obj, path: str) -> str:
    """Value of a dotted field as the API server renders it for selectors."""
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    if isinstance(cur, bool) or path in BOOL_FIELDS:
        return "true" if cur else "false"
    return "" if cur is None else str(cur)


def matches(obj: Obj, selector: list[Requirement]) -> bool:
    return all((field_value(obj, r.field) == r.value) == r.equal for r in selector)


def list_item(obj: Obj) -> Obj:
    """List items omit kind/apiVersion, like the real server's lists."""
    return {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}


def with_rv(obj: Obj, rv: int) -> Obj:
    out = copy.deepcopy(obj)
    out["metadata"]["resourceVersion"] = str(rv)
    return out


@dataclass(frozen=True)
class Change:
    """One history entry: ``old`` is None for creations, ``new`` None for deletions."""

    rv: int
    kind: str
    namespace: str
    old: Obj | None
    new: Obj | None


@dataclass(eq=False)
class Watcher:
    """An open watch stream; events reach it through its asyncio queue."""

    kind: str
    namespace: str | None
    selector: list[Requirement]
    bookmarks: bool
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[Obj | None]
    last_rv: int

    def wants(self, change: Change) -> bool:
        return change.kind == self.kind and self.namespace in (None, change.namespace)

    def event_for(self, change: Change) -> Obj | None:
        """Translate a change into the event this watcher sees (or None)."""
        if not self.wants(change):
            return None
        was = change.old is not None and matches(change.old, self.selector)
        now = change.new is not None and matches(change.new, self.selector)
        if now:
            return {"type": "MODIFIED" if was else "ADDED", "object": change.new}
        if was:
            assert change.old is not None
            return {"type": "DELETED", "object": with_rv(change.old, change.rv)}
        return None

    def push(self, item: Obj | None) -> None:
        """Thread-safe enqueue; None is the close sentinel."""
        with contextlib.suppress(RuntimeError):  # RuntimeError: event loop already closed
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)


async def wait_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class WatchStream:
    """ASGI response streaming watch events until timeout, close or disconnect."""

    def __init__(self, api: FakeAPIServer, watcher: Watcher | None, initial: list[Obj], timeout: float | None) -> None:
        self.api, self.watcher, self.initial, self.timeout = api, watcher, initial, timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(b"content-type", b"application/json"), (b"cache-control", b"no-cache, private")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        disconnected = asyncio.ensure_future(wait_disconnect(receive))
        try:
            for event in self.initial:
                await self.send_event(send, event)
            if self.watcher is not None:
                await self.pump(self.watcher, send, disconnected)
            if not disconnected.done():
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:  # client went away mid-write
            pass
        finally:
            disconnected.cancel()
            if self.watcher is not None:
                self.api._unregister(self.watcher)

    async def pump(self, watcher: Watcher, send: Send, disconnected: asyncio.Future[None]) -> None:
        loop = asyncio.get_running_loop()
        deadline = None if self.timeout is None else loop.time() + self.timeout
        while True:
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                return
            getter = asyncio.ensure_future(watcher.queue.get())
            waiters: set[asyncio.Future[Any]] = {getter, disconnected}
            done, _ = await asyncio.wait(waiters, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            if getter not in done:  # timeoutSeconds elapsed or client disconnected
                getter.cancel()
                return
            item = getter.result()
            if item is None:
                return
            await self.send_event(send, item)

    @staticmethod
    async def send_event(send: Send, event: Obj) -> None:
        body = json.dumps(event, separators=(",", ":")).encode() + b"\n"
        await send({"type": "http.response.body", "body": body, "more_body": True})


class Gate:
    """Outer ASGI layer: request log, injected latency and injected failures."""

    def __init__(self, app: ASGIApp, api: FakeAPIServer) -> None:
        self.app, self.api = app, api

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        query = unquote(scope.get("query_string", b"").decode("latin-1"))  # logged decoded, for readable asserts
        target = scope["path"] + (f"?{query}" if query else "")
        self.api.requests.append((scope["method"], target))
        self.api.request_log.append((time.monotonic(), scope["method"], target))
        if self.api._latency > 0:
            await asyncio.sleep(self.api._latency)
        fault = self.api._take_fault(target)
        if fault is None:
            late = self.api._take_late(target)
            await self.app(scope, receive, send if late is None else _delayed(send, late))
            return
        code, retry_after = fault
        details = {"retryAfterSeconds": retry_after} if retry_after is not None else None
        headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
        body = status_body(code, f"injected failure ({code})", details=details)
        await json_response(body, code, headers)(scope, receive, send)


def _delayed(send: Send, seconds: float) -> Send:
    """A send that holds the response back: the request has been applied, the answer is late."""

    async def delayed(message: Any) -> None:
        if message["type"] == "http.response.start":
            await asyncio.sleep(seconds)
        await send(message)

    return delayed


class UvicornServer(uvicorn.Server):
    """uvicorn.Server that signals an Event once its sockets are listening."""

    def __init__(self, config: uvicorn.Config, ready: threading.Event) -> None:
        super().__init__(config)
        self.ready = ready

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        self.ready.set()


class FakeAPIServer:
    """In-process fake kube-apiserver; see the module docstring for semantics."""

    def __init__(self, *, kueue: bool = True) -> None:
        """``kueue=False``: the kueue.x-k8s.io group is not served (CRDs not installed), its paths are 404."""
        self.url = ""
        self.kueue = kueue
        self.requests: list[tuple[str, str]] = []
        self.request_log: list[tuple[float, str, str]] = []  # (time.monotonic() on arrival, method, target)
        self.bindings: list[Obj] = []
        self.updates: list[tuple[str, str, str]] = []  # (kind, namespace/name, "object" | "status"), in order
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._objects: dict[Key, Obj] = {}
        self._history: list[Change] = []
        self._rv = 0
        self._compacted_rv = 0
        self._snapshots: dict[str, tuple[int, list[Obj]]] = {}
        self._watchers: list[Watcher] = []
        self._faults: list[list[Any]] = []  # [remaining, status, retry_after, path_contains]
        self._late: list[list[Any]] = []  # [remaining, seconds, path_contains]
        self._short_watches = 0
        self._latency = 0.0
        self._closing = False
        self._server: UvicornServer | None = None
        self._thread: threading.Thread | None = None
        self._app = Gate(self._build_app(), self)

    # ------------------------------------------------------------ lifecycle
    def start(self, port: int = 0) -> str:
        """Serve on ``port`` (0: an ephemeral one); return the base URL once it accepts connections.

        After ``stop()``, ``start(port)`` with the previous port is an API server restart: the
        stored objects and their history survive, open watches do not.
        """
        if self._thread is not None:
            raise RuntimeError("fake API server already started")
        self._closing = False
        config = uvicorn.Config(
            self._app, host="127.0.0.1", port=port, log_level="warning", lifespan="off", timeout_graceful_shutdown=1
        )
        ready = threading.Event()
        server = UvicornServer(config, ready)

        def run() -> None:
            try:
                server.run()
            finally:
                ready.set()  # unblock start() if startup failed

        self._server = server
        self._thread = threading.Thread(target=run, name="fake-kube-apiserver", daemon=True)
        self._thread.start()
        if not ready.wait(10) or not server.started:
            self.stop()
            raise RuntimeError("fake API server failed to start")
        port = server.servers[0].sockets[0].getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # readiness check: the listener accepts a TCP connection
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    def stop(self) -> None:
        """Close open watches, shut uvicorn down and join its thread."""
        if self._thread is None or self._server is None:
            return
        with self._lock:
            self._closing = True
            self._close_watchers_locked()
        self._server.should_exit = True
        self._thread.join(timeout=5)
        if self._thread.is_alive():
            self._server.force_exit = True
            self._thread.join(timeout=5)
        self._thread = None
        self._server = None

    def __enter__(self) -> FakeAPIServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # --------------------------------------------------------- state control
    def add(self, obj: Obj) -> Obj:
        """Create an object (ADDED). RV is always assigned; uid/creationTimestamp if missing."""
        new = self._normalise(obj)
        meta = new["metadata"]
        key = self._key(new["kind"], meta["name"], meta.get("namespace"))
        with self._lock:
            if key in self._objects:
                raise ValueError(f"{new['kind']} {key[1]}/{key[2]} already exists")
            self._rv += 1
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
            meta["resourceVersion"] = str(self._rv)
            self._commit(key, None, new)
        return copy.deepcopy(new)

    def update(self, obj: Obj) -> Obj:
        """Replace an existing object (MODIFIED); keeps uid/creationTimestamp if omitted."""
        new = self._normalise(obj)
        meta = new["metadata"]
        key = self._key(new["kind"], meta["name"], meta.get("namespace"))
        with self._lock:
            old = self._objects.get(key)
            if old is None:
                raise KeyError(f"{new['kind']} {key[1]}/{key[2]} not found")
            self._rv += 1
            for field in ("uid", "creationTimestamp"):
                if field in old["metadata"]:
                    meta.setdefault(field, old["metadata"][field])
            meta["resourceVersion"] = str(self._rv)
            self._commit(key, old, new)
        return copy.deepcopy(new)

    def delete(self, kind: str, name: str, namespace: str | None = None) -> None:
        """Remove an object (DELETED carries its last state with the new RV)."""
        key = self._key(kind, name, namespace)
        with self._lock:
            old = self._objects.get(key)
            if old is None:
                raise KeyError(f"{kind} {key[1]}/{name} not found")
            self._rv += 1
            self._commit(key, with_rv(old, self._rv), None)

    def get(self, kind: str, name: str, namespace: str | None = None) -> Obj | None:
        with self._lock:
            obj = self._objects.get(self._key(kind, name, namespace))
            return copy.deepcopy(obj) if obj is not None else None

    def current_rv(self) -> int:
        with self._lock:
            return self._rv

    def compact(self) -> None:
        """Forget history; older RVs get 410 and open watches get an ERROR then close."""
        with self._lock:
            self._compacted_rv = self._rv
            self._history.clear()
            self._snapshots = {k: v for k, v in self._snapshots.items() if v[0] >= self._rv}
            for w in self._watchers:
                w.push({"type": "ERROR", "object": self._too_old(w.last_rv)})
            self._close_watchers_locked()

    def send_bookmarks(self) -> None:
        """Send a BOOKMARK at the current RV to watches that allowed bookmarks."""
        with self._lock:
            for w in self._watchers:
                if w.bookmarks:
                    obj = {"kind": w.kind, "apiVersion": "v1", "metadata": {"resourceVersion": str(self._rv)}}
                    w.push({"type": "BOOKMARK", "object": obj})
                    w.last_rv = self._rv

    def drop_watches(self) -> None:
        """End every open watch stream without an ERROR event."""
        with self._lock:
            self._close_watchers_locked()

    def fail_next(
        self, n: int, status: int = 500, retry_after: int | None = None, path_contains: str | None = None
    ) -> None:
        """Answer the next n requests whose path+query contains path_contains with a Status error."""
        with self._lock:
            self._faults.append([n, status, retry_after, path_contains])

    def answer_late(self, n: int, seconds: float, path_contains: str | None = None) -> None:
        """Apply the next n matching requests, but hold their answers back ``seconds`` (a client timing out
        after the server succeeded)."""
        with self._lock:
            self._late.append([n, seconds, path_contains])

    def end_watches_at_once(self, n: int) -> None:
        """Accept the next n watches (200) but end each at once, before any event (a proxy that cuts
        streams, an overloaded server)."""
        with self._lock:
            self._short_watches = n

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def set_latency(self, seconds: float) -> None:
        self._latency = seconds

    def open_watch_count(self) -> int:
        with self._lock:
            return len(self._watchers)

    def wait_for_watchers(self, n: int, timeout: float = 5.0) -> None:
        """Block until at least n watch streams are open, else raise TimeoutError."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self._watchers) >= n, timeout):
                raise TimeoutError(f"expected {n} open watches, have {len(self._watchers)}")

    # --------------------------------------------------------- internals
    def _normalise(self, obj: Obj) -> Obj:
        kind = obj.get("kind")
        if kind not in LIST_KINDS:
            raise ValueError(f"unsupported kind {kind!r}; expected one of {sorted(LIST_KINDS)}")
        new = copy.deepcopy(obj)
        new["apiVersion"] = API_VERSIONS[kind]
        meta = new.setdefault("metadata", {})
        if not meta.get("name"):
            raise ValueError("metadata.name is required")
        if NAMESPACED[kind]:
            meta["namespace"] = meta.get("namespace") or "default"
        else:
            meta.pop("namespace", None)
        return new

    @staticmethod
    def _key(kind: str, name: str, namespace: str | None) -> Key:
        if kind not in LIST_KINDS:
            raise ValueError(f"unsupported kind {kind!r}")
        return (kind, (namespace or "default") if NAMESPACED[kind] else "", name)

    def _commit(self, key: Key, old: Obj | None, new: Obj | None) -> None:
        """Store the change, append it to history and fan it out (lock held)."""
        if new is None:
            del self._objects[key]
        else:
            self._objects[key] = new
        change = Change(self._rv, key[0], key[1], old, new)
        self._history.append(change)
        for w in self._watchers:
            event = w.event_for(change)
            if event is not None:
                w.push(event)
                w.last_rv = change.rv

    def _close_watchers_locked(self) -> None:
        for w in self._watchers:
            w.push(None)
        self._watchers.clear()
        self._cond.notify_all()

    def _unregister(self, watcher: Watcher) -> None:
        with self._lock:
            if watcher in self._watchers:
                self._watchers.remove(watcher)
                self._cond.notify_all()

    def _take_fault(self, target: str) -> tuple[int, int | None] | None:
        with self._lock:
            for fault in self._faults:
                if fault[3] is None or fault[3] in target:
                    fault[0] -= 1
                    if fault[0] <= 0:
                        self._faults.remove(fault)
                    return fault[1], fault[2]
        return None

    def _take_late(self, target: str) -> float | None:
        with self._lock:
            for late in self._late:
                if late[2] is None or late[2] in target:
                    late[0] -= 1
                    if late[0] <= 0:
                        self._late.remove(late)
                    return float(late[1])
        return None

    def _too_old(self, rv: int) -> Obj:
        return status_body(410, f"too old resource version: {rv} ({self._compacted_rv})", "Expired")

    def _check_rv(self, raw: str) -> int | None:
        """Parse a resourceVersion parameter (lock held); None means "" or "0"."""
        if raw in ("", "0"):
            return None
        try:
            rv = int(raw)
        except ValueError:
            raise APIError(400, f'invalid resource version "{raw}"') from None
        if rv < self._compacted_rv:
            raise APIError(410, self._too_old(rv)["message"], "Expired")
        return rv

    # --------------------------------------------------------- HTTP
    def _build_app(self) -> Starlette:
        async def nodes(request: Request) -> Response | WatchStream:
            return self._collection(request, "Node", None)

        async def all_pods(request: Request) -> Response | WatchStream:
            return self._collection(request, "Pod", None)

        async def ns_pods(request: Request) -> Response | WatchStream:
            return self._collection(request, "Pod", request.path_params["namespace"])

        async def node(request: Request) -> Response:
            return self._get_one("Node", request.path_params["name"], None)

        async def pod(request: Request) -> Response:
            return self._get_one("Pod", request.path_params["name"], request.path_params["namespace"])

        async def api_error(request: Request, exc: Exception) -> Response:
            assert isinstance(exc, APIError)
            return json_response(exc.body, exc.code)

        async def http_error(request: Request, exc: Exception) -> Response:
            assert isinstance(exc, HTTPException)
            message = "the server could not find the requested resource" if exc.status_code == 404 else exc.detail
            return json_response(status_body(exc.status_code, message), exc.status_code)

        async def server_error(request: Request, exc: Exception) -> Response:
            return json_response(status_body(500, f"internal error: {exc!r}"), 500)

        def collection(kind: str) -> Any:
            async def handle(request: Request) -> Response | WatchStream:
                return self._collection(request, kind, request.path_params.get("namespace"))

            return handle

        async def claim(request: Request) -> Response:
            name, namespace = request.path_params["name"], request.path_params["namespace"]
            if request.method == "PUT":
                return await self._put(request, "ResourceClaim", name, namespace, status=False)
            return self._get_one("ResourceClaim", name, namespace)

        async def claim_status(request: Request) -> Response:
            name, namespace = request.path_params["name"], request.path_params["namespace"]
            if request.method == "PUT":
                return await self._put(request, "ResourceClaim", name, namespace, status=True)
            return self._get_one("ResourceClaim", name, namespace)

        routes = [
            Route(f"{DRA}/deviceclasses", collection("DeviceClass")),
            Route(f"{DRA}/resourceslices", collection("ResourceSlice")),
            Route(f"{DRA}/resourceclaims", collection("ResourceClaim")),
            Route(f"{DRA}/namespaces/{{namespace}}/resourceclaims", collection("ResourceClaim")),
            Route(f"{DRA}/namespaces/{{namespace}}/resourceclaims/{{name}}", claim, methods=["GET", "PUT"]),
            Route(
                f"{DRA}/namespaces/{{namespace}}/resourceclaims/{{name}}/status", claim_status, methods=["GET", "PUT"]
            ),
            Route("/api/v1/nodes", nodes),
            Route("/api/v1/nodes/{name}", node),
            Route("/api/v1/pods", all_pods),
            Route("/api/v1/namespaces/{namespace}/pods", ns_pods),
            Route("/api/v1/namespaces/{namespace}/pods/{name}", pod),
            Route("/api/v1/namespaces/{namespace}/pods/{name}/binding", self._bind, methods=["POST"]),
        ]
        if self.kueue:  # read-only: list and watch, cluster-wide and (LocalQueues) per namespace
            routes += [Route(f"{KUEUE}/{RESOURCES[kind]}", collection(kind)) for kind in KUEUE_KINDS]
            routes.append(Route(f"{KUEUE}/namespaces/{{namespace}}/localqueues", collection("LocalQueue")))
        handlers = {APIError: api_error, HTTPException: http_error, Exception: server_error}
        return Starlette(routes=routes, exception_handlers=handlers)

    def _collection(self, request: Request, kind: str, namespace: str | None) -> Response | WatchStream:
        query = request.query_params
        selector = parse_field_selector(kind, query.get("fieldSelector", ""))
        if query.get("watch", "").lower() in TRUE_VALUES:
            return self._watch(kind, namespace, selector, request)
        return self._list(kind, namespace, selector, request)

    def _get_one(self, kind: str, name: str, namespace: str | None) -> Response:
        obj = self.get(kind, name, namespace)
        if obj is None:
            resource = RESOURCES[kind]
            raise APIError(404, f'{resource} "{name}" not found', details={"name": name, "kind": resource})
        return json_response(obj)

    def _list(self, kind: str, namespace: str | None, selector: list[Requirement], request: Request) -> Response:
        query = request.query_params
        try:
            limit = int(query.get("limit") or 0)
        except ValueError:
            raise APIError(400, f'invalid limit "{query.get("limit")}"') from None
        token = query.get("continue", "")
        with self._lock:
            if token:
                snapshot_id, offset = decode_continue(token)
                snapshot = self._snapshots.get(snapshot_id)
                if snapshot is None:
                    raise APIError(
                        410,
                        "The provided continue parameter is too old to display a consistent list result. "
                        "You can start a new list without the continue parameter.",
                        "Expired",
                    )
                snap_rv, items = snapshot
            else:
                self._check_rv(query.get("resourceVersion", ""))
                snapshot_id, offset, snap_rv = uuid.uuid4().hex, 0, self._rv
                items = [
                    list_item(obj)
                    for key, obj in sorted(self._objects.items())
                    if key[0] == kind and namespace in (None, key[1]) and matches(obj, selector)
                ]
            page = items[offset : offset + limit] if limit > 0 else items[offset:]
            meta: Obj = {"resourceVersion": str(snap_rv)}
            end = offset + len(page)
            if limit > 0 and end < len(items):
                self._snapshots[snapshot_id] = (snap_rv, items)
                meta["continue"] = encode_continue(snapshot_id, end)
                meta["remainingItemCount"] = len(items) - end
        return json_response(
            {"kind": LIST_KINDS[kind], "apiVersion": API_VERSIONS[kind], "metadata": meta, "items": page}
        )

    def _watch(self, kind: str, namespace: str | None, selector: list[Requirement], request: Request) -> WatchStream:
        query = request.query_params
        bookmarks = query.get("allowWatchBookmarks", "").lower() in TRUE_VALUES
        timeout: float | None = None
        if query.get("timeoutSeconds"):
            try:
                timeout = float(query["timeoutSeconds"])
            except ValueError:
                raise APIError(400, f'invalid timeoutSeconds "{query["timeoutSeconds"]}"') from None
            if timeout <= 0:
                timeout = None
        raw_rv = query.get("resourceVersion", "")
        with self._lock:
            loop = asyncio.get_running_loop()
            watcher = Watcher(kind, namespace, selector, bookmarks, loop, asyncio.Queue(), self._rv)
            try:
                start = self._check_rv(raw_rv)
            except APIError as err:
                if err.code != 410:
                    raise
                return WatchStream(self, None, [{"type": "ERROR", "object": err.body}], None)
            if start is None:  # "" / "0": synthetic ADDED events for the current state
                history = [Change(self._rv, k[0], k[1], None, obj) for k, obj in sorted(self._objects.items())]
            else:
                history = [change for change in self._history if change.rv > start]
            initial = [event for change in history if (event := watcher.event_for(change)) is not None]
            if self._closing:
                return WatchStream(self, None, initial, None)
            if self._short_watches > 0:
                self._short_watches -= 1
                return WatchStream(self, None, [], None)
            self._watchers.append(watcher)
            self._cond.notify_all()
        return WatchStream(self, watcher, initial, timeout)

    async def _put(self, request: Request, kind: str, name: str, namespace: str, *, status: bool) -> Response:
        """Update with the real server's optimistic concurrency: the body's resourceVersion must be current.

        The main resource ignores ``status`` changes and the status subresource ignores everything
        but ``status`` (and metadata it never takes from a status write), as the API server does.
        """
        try:
            body = json.loads(await request.body())
        except ValueError:
            raise APIError(400, "request body is not valid JSON") from None
        if not isinstance(body, dict):
            raise APIError(400, "request body must be an object")
        meta = body.get("metadata") or {}
        if meta.get("name") not in (None, name):
            raise APIError(400, "the name of the object does not match the name on the URL")
        key = self._key(kind, name, namespace)
        with self._lock:
            old = self._objects.get(key)
            resource = RESOURCES[kind]
            if old is None:
                raise APIError(404, f'{resource} "{name}" not found', details={"name": name, "kind": resource})
            if meta.get("uid") not in (None, old["metadata"].get("uid")):
                raise APIError(409, f"Precondition failed: UID in precondition: {meta.get('uid')}")
            if str(meta.get("resourceVersion", "")) != old["metadata"]["resourceVersion"]:
                message = (
                    f'Operation cannot be fulfilled on {resource}.resource.k8s.io "{name}": the object has been '
                    "modified; please apply your changes to the latest version and try again"
                )
                raise APIError(409, message, details={"name": name, "kind": resource})
            new = copy.deepcopy(old)
            if status:
                new["status"] = copy.deepcopy(body.get("status") or {})
            else:
                new["metadata"]["finalizers"] = copy.deepcopy(meta.get("finalizers") or [])
                if not new["metadata"]["finalizers"]:
                    del new["metadata"]["finalizers"]
                new["spec"] = copy.deepcopy(body.get("spec", old.get("spec")))
            self._rv += 1
            new["metadata"]["resourceVersion"] = str(self._rv)
            if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
                self._commit(key, old, None)  # the last finalizer of a deleted object is gone
                self.updates.append((kind, f"{namespace}/{name}", "status" if status else "object"))
                return json_response(new)
            self._commit(key, old, new)
            self.updates.append((kind, f"{namespace}/{name}", "status" if status else "object"))
        return json_response(new)

    async def _bind(self, request: Request) -> Response:
        namespace, name = request.path_params["namespace"], request.path_params["name"]
        try:
            binding = json.loads(await request.body())
        except ValueError:
            raise APIError(400, "request body is not valid JSON") from None
        if not isinstance(binding, dict):
            raise APIError(400, "request body must be a Binding object")
        meta = binding.get("metadata") or {}
        if meta.get("name", name) != name:
            raise APIError(400, "name in URL does not match name in Binding object")
        if meta.get("namespace") not in (None, "", namespace):
            raise APIError(400, "the namespace of the provided object does not match the namespace sent on the request")
        target = binding.get("target") or {}
        node_name = target.get("name")
        if not node_name or target.get("kind") not in (None, "", "Node"):
            raise APIError(422, f'Binding "{name}" is invalid: target: must name a Node', details={"name": name})
        self._assign(namespace, name, meta.get("uid"), node_name, meta.get("annotations") or {})
        stored = copy.deepcopy(binding)
        stored.setdefault("metadata", {})["namespace"] = namespace
        with self._lock:
            self.bindings.append(stored)
        success = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
        return json_response(success, 201)

    def _assign(self, namespace: str, name: str, uid: str | None, node_name: str, annotations: dict[str, str]) -> None:
        """Apply a binding to a pod with the real server's checks, in its order."""
        key: Key = ("Pod", namespace, name)
        details = {"name": name, "kind": "pods/binding"}
        prefix = f'Operation cannot be fulfilled on pods/binding "{name}": '
        with self._lock:
            pod = self._objects.get(key)
            if pod is None:
                raise APIError(404, f'pods "{name}" not found', details={"name": name, "kind": "pods"})
            meta, spec = pod["metadata"], pod.get("spec") or {}
            if uid and uid != meta.get("uid"):
                message = f"Precondition failed: UID in precondition: {uid}, UID in object meta: {meta.get('uid')}"
                raise APIError(409, prefix + message, details=details)
            if meta.get("deletionTimestamp"):
                message = f"pod {name} is being deleted, cannot be assigned to a host"
                raise APIError(409, prefix + message, details=details)
            if spec.get("nodeName"):
                message = f'pod {name} is already assigned to node "{spec["nodeName"]}"'
                raise APIError(409, prefix + message, details=details)
            new = copy.deepcopy(pod)
            new.setdefault("spec", {})["nodeName"] = node_name
            if annotations:
                new["metadata"].setdefault("annotations", {}).update(annotations)
            status = new.setdefault("status", {})
            conditions = [c for c in status.get("conditions", []) if c.get("type") != "PodScheduled"]
            status["conditions"] = [*conditions, {"type": "PodScheduled", "status": "True"}]
            self._rv += 1
            new["metadata"]["resourceVersion"] = str(self._rv)
            self._commit(key, pod, new)


def encode_continue(snapshot_id: str, offset: int) -> str:
    """Opaque continue token naming a stored list snapshot and a position in it."""
    raw = json.dumps({"snapshot": snapshot_id, "offset": offset}).encode()
    return base64.urlsafe_b64encode(raw).decode()


def decode_continue(token: str) -> tuple[str, int]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        return str(data["snapshot"]), int(data["offset"])
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise APIError(400, "continue key is not valid") from None
