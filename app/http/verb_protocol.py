"""The extender verbs answered by a connection protocol of their own, in front of uvicorn's.

kube-scheduler calls /filter and /bind for every pod, often on a new connection (it keeps two idle
connections; concurrent binds open the rest: about one connection per two pods under load). On two
cores shared with kube-scheduler and the API server, every microsecond the server spends around the
verb's own work is taken from them. ``VerbProtocol`` is the connection's protocol until a request
is not a verb: it reads the request head itself (one search for its end, one split of its lines),
takes a Content-Length body by length, answers with one write, and keeps no per-request timer.

Anything it does not answer itself goes to uvicorn (``CoalescingHttpToolsProtocol``) with the
connection and the bytes of the request from its first byte, so uvicorn sees the connection as if
from the start: every other route, a path with a percent-escape, ``Expect: 100-continue``,
``Transfer-Encoding``, an upgrade, a method or HTTP version other than POST and 1.0 / 1.1, and any
head that is not plainly well formed (bare LF or CR, a NUL, obsolete line folding, a header line
without a colon, two Content-Lengths, a head over 64 KiB). uvicorn's parser then answers or refuses
it as it would without us. The connection stays with uvicorn afterwards.

Kept from uvicorn's rules: keep-alive for HTTP/1.1 unless ``Connection: close`` (HTTP/1.0 closes
after its answer); an idle connection closed after ``timeout_keep_alive`` (checked by one timer per
connection, re-armed when it fires, not one per request); a graceful shutdown answers the request in
progress, then closes, and waits for a bind's task (``server_state.tasks``); a task cut at the end of
the grace period answers a bare 500. A request that arrives while the one before it is unanswered
(pipelining, which Go's client never does) waits in a buffer, and reading pauses while it is large,
or while the client does not read its answers (the transport's write buffer is full).
A body over ``server.maxRequestBytes`` is counted, not kept, and answered with the verb's error.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, ClassVar

from uvicorn import Config
from uvicorn.server import ServerState

from app.http.coalesce import CoalescingHttpToolsProtocol
from app.http.server import ExtenderVerbs, Verb

__all__ = ["VerbProtocol", "verb_head", "verb_protocol"]

_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\nserver-timing: %s\r\n%s\r\n"
_CLOSE = b"connection: close\r\n"
# Answers this long go out in two writes, head then body: a copy of the body behind the head costs more
# than the second send (a 5,000-node HostPriorityList is about 300 KB).
_APART_MIN = 64 * 1024
_CANCELLED = (
    b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: 21\r\n"
    b"connection: close\r\n\r\nInternal Server Error"
)
HEAD_LIMIT = 64 * 1024  # a head longer than this is uvicorn's to judge
BUFFERED_LIMIT = 256 * 1024  # pipelined bytes held while an answer is pending, before reading pauses
_HANDED_OVER_HEADERS = (b"transfer-encoding", b"expect", b"upgrade")


def verb_head(head: bytes, route: Any) -> tuple[Verb, int, bool] | None:
    """(verb, Content-Length, keep-alive) of a request head (its bytes up to the empty line), when
    it is a plain, well-formed POST to a verb route; ``None`` for anything uvicorn must judge."""
    if head.count(b"\n") != head.count(b"\r\n") or head.count(b"\r") != head.count(b"\n") or b"\0" in head:
        return None
    request_line, _, fields = head.partition(b"\r\n")
    method, _, rest = request_line.partition(b" ")
    target, _, version = rest.partition(b" ")
    path = target.partition(b"?")[0]
    if method != b"POST" or not path.startswith(b"/") or b"%" in path or not target.isascii():
        return None
    if version == b"HTTP/1.1":
        keep_alive = True
    elif version == b"HTTP/1.0":
        keep_alive = False  # answered, then closed (as uvicorn does with 1.0)
    else:
        return None
    verb = route(path.decode("ascii"))
    if verb is None:
        return None
    length = -1
    for line in fields.split(b"\r\n") if fields else ():
        name, colon, value = line.partition(b":")
        if not colon or not name or name[0] in b" \t" or name[-1] in b" \t":
            return None  # no colon, obsolete folding, space before the colon
        name = name.lower()
        if name == b"content-length":
            value = value.strip(b" \t")
            if length >= 0 or not value.isdigit():
                return None
            length = int(value)
        elif name == b"connection":
            tokens = {token.strip(b" \t").lower() for token in value.split(b",")}
            if b"upgrade" in tokens:
                return None
            if b"close" in tokens:
                keep_alive = False
        elif name in _HANDED_OVER_HEADERS:
            return None
    return verb, max(length, 0), keep_alive


class _Request:
    """The verb request being read or answered on a connection."""

    __slots__ = ("chunks", "disconnected", "keep_alive", "missing", "over", "size", "started", "verb")

    def __init__(self, verb: Verb, length: int, keep_alive: bool, limit: int) -> None:
        self.verb = verb
        self.keep_alive = keep_alive
        self.started = time.perf_counter()
        self.size = length
        self.over = length > limit  # counted as it arrives, not kept
        self.missing = length
        self.chunks: list[bytes] = []
        self.disconnected = False


class VerbProtocol(asyncio.Protocol):
    """A connection's protocol answering the extender verbs itself (module docstring)."""

    verbs: ClassVar[ExtenderVerbs]  # set on the subclass ``verb_protocol`` makes
    handover: ClassVar[type[asyncio.Protocol]] = CoalescingHttpToolsProtocol

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        if not config.loaded:
            config.load()
        self.config = config
        self.server_state = server_state
        self.app_state = app_state
        self.loop = _loop or asyncio.get_event_loop()
        self.connections = server_state.connections
        self.tasks = server_state.tasks
        self.route = self.verbs.route
        self.limit = self.verbs.limit
        self.keep_alive_timeout = float(config.timeout_keep_alive)
        self.transport: asyncio.Transport | None = None
        self.buffer = b""  # received, not yet a whole head (or held while an answer is pending)
        self.searched = 0  # how much of ``buffer`` is known to hold no end of head
        self.request: _Request | None = None
        self.last_active = 0.0
        self.timer: asyncio.TimerHandle | None = None
        self.closing = False  # a graceful shutdown: answer what is in progress, then close
        self.paused = False  # reading paused: pipelined bytes held past BUFFERED_LIMIT
        self.writing_paused = False  # reading paused: the client does not read its answers

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a stream transport (uvloop's is no subclass)
        self.connections.add(self)  # type: ignore[arg-type]  # uvicorn types its connections as its own protocols
        self.last_active = self.loop.time()
        self.timer = self.loop.call_later(self.keep_alive_timeout, self._idle_check)

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.discard(self)
        if self.request is not None:
            self.request.disconnected = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.buffer = b""

    def eof_received(self) -> bool | None:
        return None  # the transport closes; an answer still pending is not written

    def data_received(self, data: bytes) -> None:
        request = self.request
        if request is not None:
            if not request.missing:  # an answer is pending: hold what follows (pipelining)
                self._hold(data)
                return
            data = self._body_received(request, data)
            if not data or self.request is not None:
                if data:
                    self._hold(data)
                return
        elif self.buffer:
            data = self.buffer + data
            self.buffer = b""
        self._read(data)

    def pause_writing(self) -> None:
        """The client does not read its answers: read no more requests until it does."""
        self.writing_paused = True
        if self.transport is not None and not self.paused:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.writing_paused = False
        if self.transport is not None and not self.paused:
            self.transport.resume_reading()

    def shutdown(self) -> None:
        """uvicorn's graceful shutdown: close now when idle, else after the answer in progress."""
        self.closing = True
        if self.request is None and self.transport is not None:
            self.transport.close()

    # reading

    def _hold(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) > BUFFERED_LIMIT and not self.paused and self.transport is not None:
            self.paused = True
            if not self.writing_paused:
                self.transport.pause_reading()

    def _body_received(self, request: _Request, data: bytes) -> bytes:
        """Take what of ``data`` belongs to the body; run the verb once it is whole. The rest is returned."""
        missing = request.missing
        part, rest = (data, b"") if len(data) <= missing else (data[:missing], data[missing:])
        request.missing = missing - len(part)
        if not request.over:
            request.chunks.append(part)
        if not request.missing:
            self._run(request)
        return rest

    def _read(self, data: bytes) -> None:
        """Requests in ``data``, in order, until one must wait (its body's rest, or a pending answer)."""
        while data:
            if self.request is not None or self.transport is None or self.transport.is_closing():
                if self.request is not None:
                    self._hold(data)
                return
            end = data.find(b"\r\n\r\n", max(self.searched - 3, 0))
            if end < 0:
                if len(data) > HEAD_LIMIT:
                    self._hand_over(data)
                    return
                self.buffer, self.searched = data, len(data)
                return
            self.searched = 0
            parsed = verb_head(data[:end], self.route) if end <= HEAD_LIMIT else None
            if parsed is None:
                self._hand_over(data)
                return
            verb, length, keep_alive = parsed
            request = _Request(verb, length, keep_alive and not self.closing, self.limit)
            self.request = request
            start = end + 4
            if length == 0:
                data = data[start:]
                self._run(request)
            else:
                data = self._body_received(request, data[start:] if start else data)

    def _hand_over(self, data: bytes) -> None:
        """Give the connection to uvicorn with ``data``, the bytes from the current request's first."""
        transport = self.transport
        assert transport is not None
        protocol = self.handover(  # type: ignore[call-arg]
            config=self.config, server_state=self.server_state, app_state=self.app_state, _loop=self.loop
        )
        self.connection_lost(None)  # ours ends here: out of the server's connections, timer cancelled
        transport.set_protocol(protocol)
        if self.paused or self.writing_paused:
            self.paused = False
            transport.resume_reading()  # uvicorn's flow control takes over
        protocol.connection_made(transport)
        protocol.data_received(data)

    # answering

    def _run(self, request: _Request) -> None:
        verbs, verb = self.verbs, request.verb
        read = time.perf_counter()
        if request.over:
            result = verbs.too_large(
                verb, f"request body of {request.size} bytes exceeds the limit of {self.limit} bytes"
            )
        else:
            chunks = request.chunks
            body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            request.chunks = []
            result = verbs.start(verb, body)
            if getattr(type(result), "__await__", None) is not None:  # inspect.isawaitable, without its ABC check
                task = self.loop.create_task(self._finish(request, result, read))
                task.add_done_callback(self.tasks.discard)
                self.tasks.add(task)  # a graceful shutdown waits for it
                return
        self._respond(request, result, read)

    async def _finish(self, request: _Request, pending: Any, read: float) -> None:
        try:
            result = await pending
        except Exception as exc:  # the service must answer, whatever happened
            result = self.verbs.failed(request.verb, exc)
        except asyncio.CancelledError:
            # Cut by the end of the shutdown grace period: a bare 500, as uvicorn answers a cancelled
            # ASGI task (kube-scheduler counts the bind as failed and retries the pod elsewhere).
            transport = self.transport
            if not request.disconnected and transport is not None and not transport.is_closing():
                transport.write(_CANCELLED)
                transport.close()
            raise
        self._respond(request, result, read)
        if self.request is None and self.buffer and not request.disconnected:
            data, self.buffer = self.buffer, b""  # what arrived while the answer was pending
            if self.paused and self.transport is not None:
                self.paused = False
                if not self.writing_paused:
                    self.transport.resume_reading()
            self._read(data)

    def _respond(self, request: _Request, result: Any, read: float) -> None:
        payload, timing = self.verbs.answer(request.verb, result, request.started, read)
        self.request = None
        self.server_state.total_requests += 1
        transport = self.transport
        if request.disconnected or transport is None or transport.is_closing():
            return
        keep_alive = request.keep_alive and not self.closing
        head = _HEAD % (len(payload), timing, b"" if keep_alive else _CLOSE)
        if len(payload) < _APART_MIN:
            transport.write(head + payload)
        else:  # a long answer (a HostPriorityList of thousands) is not copied behind its head
            transport.write(head)
            transport.write(payload)
        if keep_alive:
            self.last_active = self.loop.time()
        else:
            transport.close()

    def _idle_check(self) -> None:
        """Close the connection once idle for ``timeout_keep_alive``; else look again when it could be."""
        self.timer = None
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        wait = self.keep_alive_timeout
        if self.request is None and not self.buffer:
            wait = self.last_active + self.keep_alive_timeout - self.loop.time()
            if wait <= 0:
                transport.close()
                return
        self.timer = self.loop.call_later(wait, self._idle_check)


def verb_protocol(verbs: ExtenderVerbs) -> type[VerbProtocol]:
    """The protocol class uvicorn builds per connection, answering ``verbs``' routes."""
    return type("ExtenderVerbProtocol", (VerbProtocol,), {"verbs": verbs})
