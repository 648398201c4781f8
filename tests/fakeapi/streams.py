"""The fake API server's ASGI layers: watch history entries and streams, the request gate (request
log, injected latency and failures), and the uvicorn server that says when it listens."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send

from tests.fakeapi.kinds import Obj, Requirement, json_response, matches, status_body, with_rv

if TYPE_CHECKING:
    from tests.fakeapi.server import FakeAPIServer


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
