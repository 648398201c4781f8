"""Kept-alive HTTP/1.1 connections to the API server for the request the extender sends for every
pod: the Binding POST (``KubeClient.bind``). Every other request goes through aiohttp.

Why: through a real kube-scheduler, aiohttp's request machinery (URL, headers, timers, response
objects, stream readers) took 0.3 to 0.45 ms of the extender's CPU per pod, more than any other part
of its work but scoring; the request written as one prebuilt buffer on a kept-alive connection and
the answer read by httptools' C parser take about a quarter of that (docs/performance.md,
``bench.throughput --cpu-profile``). A proxy in the kubeconfig keeps the POST on aiohttp.

One request at a time on a connection. A connection the server closed, answered with
``Connection: close``, left unfinished (a timeout, a cancellation) or kept idle for ``IDLE_SECONDS``
is not used again. Nothing is retried: a POST without an answer may have been applied, and the
caller decides what that means.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httptools

__all__ = ["IDLE_SECONDS", "Answer", "ApiConnections", "ConnectError", "Disconnected"]

IDLE_SECONDS = 15.0  # a connection idle this long is closed, not reused (aiohttp's keep-alive default)


class ConnectError(ConnectionError):
    """No connection to the API server (refused, unreachable, TLS handshake failed)."""


class Disconnected(ConnectionError):
    """The connection ended before the whole answer came."""


@dataclass(slots=True)
class Answer:
    status: int
    phrase: str
    headers: dict[str, str] = field(default_factory=dict)  # names in lower case
    body: bytes = b""


class _Connection(asyncio.Protocol):
    """One connection: writes a request, parses its answer with httptools, hands it to the waiter."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.waiter: asyncio.Future[Answer] | None = None
        self.answer = Answer(0, "")
        self.chunks: list[bytes] = []
        self.reusable = True
        self.idle_since = 0.0
        self.deadline = 0.0  # the event loop's time by which the answer must have come

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(Disconnected(f"unreadable answer: {exc}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.reusable = False
        self._fail(Disconnected(f"the API server closed the connection{f': {exc}' if exc else ''}"))

    # httptools callbacks
    def on_status(self, status: bytes) -> None:
        self.answer.phrase = status.decode("latin-1")

    def on_header(self, name: bytes, value: bytes) -> None:
        self.answer.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        answer, self.answer = self.answer, Answer(0, "")
        answer.status = self.parser.get_status_code()
        answer.body = b"".join(self.chunks)
        self.chunks = []
        if not self.parser.should_keep_alive():
            self.reusable = False
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(answer)

    # ours
    def send(self, data: bytes) -> asyncio.Future[Answer]:
        assert self.transport is not None
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(data)
        return self.waiter

    def close(self) -> None:
        self.reusable = False
        if self.transport is not None:
            self.transport.close()

    def expire(self, timeout: float) -> None:
        """The answer did not come within ``timeout`` seconds: the waiter gets a ``TimeoutError``."""
        self._fail(TimeoutError(f"no answer within {timeout:g} s"))
        self.close()

    def _fail(self, exc: Exception) -> None:
        self.reusable = False
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc)


class ApiConnections:
    """POSTs to the API server at ``base_url`` over kept-alive connections (``ssl``: the client's TLS
    context for https), each answered within ``timeout`` seconds or a ``TimeoutError``."""

    def __init__(
        self,
        base_url: str,
        ssl_context: ssl.SSLContext | None,
        timeout: float,
        headers: Mapping[str, str],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL of a server: {base_url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.ssl = (ssl_context or ssl.create_default_context()) if parts.scheme == "https" else None
        self.prefix = parts.path.rstrip("/")  # a server behind a path (a proxy's URL for the cluster)
        self.timeout = timeout
        self.clock = clock
        fixed = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        self._fixed = f"Host: {parts.netloc.rpartition('@')[2]}\r\n{fixed}".encode("latin-1")
        self._idle: list[_Connection] = []
        self._busy: dict[_Connection, None] = {}  # waiting for an answer, oldest first
        self._expiry: asyncio.TimerHandle | None = None  # set for the nearest of their deadlines
        self._expiry_at = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None  # the connections' loop

    async def post(self, path: str, body: bytes, authorization: tuple[str, str] | None = None) -> Answer:
        """The answer to POST ``path`` (from the server's root) with ``body`` (JSON)."""
        head = b"POST %s HTTP/1.1\r\n%s" % ((self.prefix + path).encode("ascii"), self._fixed)
        if authorization is not None:
            head += f"{authorization[0]}: {authorization[1]}\r\n".encode("latin-1")
        request = head + b"Content-Length: %d\r\n\r\n" % len(body) + body
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # a client used again under a new event loop: the old one's are gone
            self._idle.clear()
            self._busy.clear()
            self._expiry = None
            self._loop = loop
        deadline = loop.time() + self.timeout
        connection = self._take()
        try:
            if connection is None:
                async with asyncio.timeout_at(deadline):
                    connection = await self._open()
            connection.deadline = deadline
            self._busy[connection] = None
            if self._expiry is None or deadline < self._expiry_at:  # (later than the one set: the common case)
                self._expire_at(deadline)
            answer = await connection.send(request)
        except BaseException:
            if connection is not None:
                connection.close()  # an unfinished exchange: its answer may still come
            raise
        finally:
            if connection is not None:
                self._busy.pop(connection, None)
        if connection.reusable:
            connection.idle_since = self.clock()
            self._idle.append(connection)
        else:
            connection.close()
        self._drop_stale()
        return answer

    def _expire(self) -> None:
        """Fail the exchanges past their deadline (their connections are not used again) and set the
        timer for the next one: one timer for every exchange in flight, not one per request."""
        assert self._loop is not None
        self._expiry = None
        now, nearest = self._loop.time(), None
        for connection in list(self._busy):
            if connection.deadline <= now:
                del self._busy[connection]
                connection.expire(self.timeout)
            elif nearest is None or connection.deadline < nearest:
                nearest = connection.deadline
        if nearest is not None:
            self._expire_at(nearest)

    def _expire_at(self, deadline: float) -> None:
        assert self._loop is not None
        if self._expiry is not None:
            self._expiry.cancel()
        self._expiry, self._expiry_at = self._loop.call_at(deadline, self._expire), deadline

    def close(self) -> None:
        for connection in self._idle:
            connection.close()
        self._idle.clear()

    def _take(self) -> _Connection | None:
        """The most recently used idle connection still fit to carry a request."""
        self._drop_stale()
        while self._idle:
            connection = self._idle.pop()
            transport = connection.transport
            if connection.reusable and transport is not None and not transport.is_closing():
                return connection
            connection.close()
        return None

    def _drop_stale(self) -> None:
        """Close the connections idle for ``IDLE_SECONDS`` (the oldest come first)."""
        now = self.clock()
        stale = 0
        while stale < len(self._idle) and now - self._idle[stale].idle_since >= IDLE_SECONDS:
            self._idle[stale].close()
            stale += 1
        del self._idle[:stale]

    async def _open(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            _, connection = await loop.create_connection(_Connection, self.host, self.port, ssl=self.ssl)
        except OSError as exc:  # refused, unreachable, a failed TLS handshake (ssl.SSLError)
            raise ConnectError(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
        return connection
