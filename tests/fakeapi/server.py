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
import copy
import json
import socket
import threading
import uuid
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

import uvicorn
from starlette.requests import Request
from starlette.responses import Response

from tests.fakeapi.kinds import (
    API_VERSIONS,
    LIST_KINDS,
    NAMESPACED,
    RESOURCES,
    TRUE_VALUES,
    APIError,
    Key,
    Obj,
    Requirement,
    decode_continue,
    encode_continue,
    json_response,
    list_item,
    matches,
    parse_field_selector,
    status_body,
    with_rv,
)
from tests.fakeapi.routes import build_app
from tests.fakeapi.streams import Change, Gate, UvicornServer, Watcher, WatchStream


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
        self._app = Gate(build_app(self), self)

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
