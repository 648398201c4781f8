"""The extender verbs answered in uvicorn's HTTP protocol itself, without the ASGI layer.

kube-scheduler calls /filter and /bind for every pod (and /prioritize for many). Through ASGI each
call builds a scope, a request-response cycle with its event, a task, receive and send messages and
a header check per header, before and after the few hundred microseconds of real work; on two cores
shared with kube-scheduler and the API server that is CPU taken from them. ``VerbHttpProtocol`` is
uvicorn's httptools protocol (``CoalescingHttpToolsProtocol``: one write per response) that
recognises a POST to a verb path when its headers are parsed, collects the body itself, and answers
as soon as the body is complete: in the same turn of the event loop when the answer is ready
(filter, prioritize, preempt), from a task when it must wait (bind; a filter that waits for the
cache). A body with a Content-Length is taken past the HTTP parser once its headers are parsed (the
parser copies every chunk it hands on, and a NodeList body is 10 MB); the connection's next request
gets a new parser. The answer is the same bytes the ASGI route sends (``ExtenderVerbs.answer``); everything else
(an ``Expect: 100-continue``, an upgrade, every other path) goes through ASGI as before.

Keep-alive, graceful shutdown (uvicorn waits for the verb's task and closes the connection after its
answer) and the keep-alive timeout follow uvicorn's own rules; a request that arrives while the one
before it on the connection is unanswered (HTTP pipelining, which Go's client never does) goes
through ASGI, which queues it.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from typing import Any

import httptools

from app.http.coalesce import CoalescingHttpToolsProtocol
from app.http.server import ExtenderVerbs, Verb

__all__ = ["VerbHttpProtocol", "verb_protocol"]

_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\nserver-timing: %s\r\n%s\r\n"
_CLOSE = b"connection: close\r\n"
# Answers this long go out in two writes, head then body: a copy of the body behind the head costs more
# than the second send (a 5,000-node HostPriorityList is about 300 KB).
_APART_MIN = 64 * 1024
_CANCELLED = (
    b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: 21\r\n"
    b"connection: close\r\n\r\nInternal Server Error"
)


class _Unwatched:
    """The cycle's ``message_event``: uvicorn sets it when the connection is lost; nothing waits on it."""

    def set(self) -> None:
        pass


_UNWATCHED = _Unwatched()


class _VerbCycle:
    """One verb request on a connection: what uvicorn's protocol reads of its ``RequestResponseCycle``
    (``response_complete``, ``keep_alive``, ``disconnected``, ``message_event``), plus the body."""

    def __init__(self, verb: Verb, keep_alive: bool, limit: int) -> None:
        self.verb = verb
        self.keep_alive = keep_alive
        self.limit = limit
        self.started = time.perf_counter()
        self.chunks: list[bytes] = []
        self.size = 0
        self.declared = 0  # a Content-Length over the limit
        self.missing = 0  # bytes of a declared body not yet received, read past the HTTP parser
        self.response_complete = False
        self.disconnected = False
        self.message_event = _UNWATCHED


class VerbHttpProtocol(CoalescingHttpToolsProtocol):
    """uvicorn's httptools protocol that answers the extender verbs directly (module docstring)."""

    verbs: ExtenderVerbs  # set on the subclass ``verb_protocol`` makes

    def on_message_begin(self) -> None:
        # uvicorn builds the ASGI scope here; a verb never needs it, so it is built only for the others.
        self.url = b""
        self.expect_100_continue = False
        self.headers = []

    def on_headers_complete(self) -> None:
        verb = None
        previous = self.cycle
        if (
            (previous is None or previous.response_complete)  # pipelined requests: uvicorn queues them
            and not self.expect_100_continue
            and not self.parser.should_upgrade()
            and self.parser.get_method() == b"POST"
        ):
            path = self.url.partition(b"?")[0]
            if b"%" not in path:
                verb = self.verbs.route(path.decode("ascii", "replace"))
        if verb is None:
            url, headers, expect = self.url, self.headers, self.expect_100_continue
            super().on_message_begin()  # the scope, for the ASGI app (it resets what was parsed)
            self.url, self.headers, self.expect_100_continue = url, headers, expect
            self.scope["headers"] = headers
            super().on_headers_complete()
            return
        keep_alive = self.parser.get_http_version() != "1.0" and self.parser.should_keep_alive()
        cycle = _VerbCycle(verb, keep_alive, self.verbs.limit)
        length, chunked = 0, False
        for name, value in self.headers:
            if name == b"content-length" and value.isdigit():
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = True
        if length > cycle.limit:
            cycle.declared = length  # refused once complete, without buffering it
        elif not chunked:
            cycle.missing = length
        self.cycle = cycle  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        cycle = self.cycle
        if isinstance(cycle, _VerbCycle) and cycle.missing:
            self._body_received(cycle, data)
        else:
            super().data_received(data)

    def _body_received(self, cycle: _VerbCycle, data: bytes) -> None:
        """The rest of a verb's body, taken as it arrives: the HTTP parser would hand each chunk on as
        a copy (a NodeList body is 10 MB). Once the body is complete the parser, still inside it, is
        replaced by a new one for the connection's next request."""
        self._unset_keepalive_if_required()
        rest = b""
        if len(data) > cycle.missing:
            data, rest = data[: cycle.missing], data[cycle.missing :]
        cycle.chunks.append(data)
        cycle.size += len(data)
        cycle.missing -= len(data)
        if cycle.missing:
            return
        self.parser = httptools.HttpRequestParser(self)
        with contextlib.suppress(AttributeError):  # as uvicorn sets its parser up (httptools >= 0.6.3)
            self.parser.set_dangerous_leniencies(lenient_data_after_close=True)
        self._run(cycle)
        if rest:
            super().data_received(rest)

    def on_body(self, body: bytes) -> None:
        cycle = self.cycle
        if not isinstance(cycle, _VerbCycle):
            super().on_body(body)
            return
        cycle.size += len(body)
        cycle.missing -= min(cycle.missing, len(body))
        # Read whole (the limit bounds it); past the limit, only counted.
        if cycle.size <= cycle.limit and not cycle.declared:
            cycle.chunks.append(body)

    def on_message_complete(self) -> None:
        cycle = self.cycle
        if not isinstance(cycle, _VerbCycle):
            super().on_message_complete()
            return
        self._run(cycle)

    def _run(self, cycle: _VerbCycle) -> None:
        verbs, verb = self.verbs, cycle.verb
        read = time.perf_counter()
        if cycle.declared:
            result = verbs.too_large(
                verb, f"request body of {cycle.declared} bytes exceeds the limit of {cycle.limit} bytes"
            )
        elif cycle.size > cycle.limit:
            result = verbs.too_large(verb, f"request body exceeds the limit of {cycle.limit} bytes")
        else:
            body = cycle.chunks[0] if len(cycle.chunks) == 1 else b"".join(cycle.chunks)
            cycle.chunks = []
            result = verbs.start(verb, body)
            if inspect.isawaitable(result):
                task = self.loop.create_task(self._finish(cycle, result, read))
                task.add_done_callback(self.tasks.discard)
                self.tasks.add(task)  # a graceful shutdown waits for it
                return
        self._respond(cycle, result, read)

    async def _finish(self, cycle: _VerbCycle, pending: Any, read: float) -> None:
        try:
            result = await pending
        except Exception as exc:  # the service must answer, whatever happened
            result = self.verbs.failed(cycle.verb, exc)
        except asyncio.CancelledError:
            # Cut by the end of the shutdown grace period: a bare 500, as uvicorn answers a cancelled
            # ASGI task (kube-scheduler counts the bind as failed and retries the pod elsewhere).
            cycle.response_complete = True
            if not cycle.disconnected and not self.transport.is_closing():
                self.transport.write(_CANCELLED)
                self.transport.close()
            raise
        self._respond(cycle, result, read)

    def _respond(self, cycle: _VerbCycle, result: Any, read: float) -> None:
        payload, timing = self.verbs.answer(cycle.verb, result, cycle.started, read)
        cycle.response_complete = True
        if cycle.disconnected or self.transport.is_closing():
            return
        head = _HEAD % (len(payload), timing, b"" if cycle.keep_alive else _CLOSE)
        if len(payload) < _APART_MIN:
            self.coalescing.write_now(head + payload)
        else:  # a long answer (a HostPriorityList of thousands) is not copied behind its head
            self.coalescing.write_now(head, payload)
        if not cycle.keep_alive:
            self.transport.close()
        self.on_response_complete()  # uvicorn's: count it, start a queued request or arm the keep-alive timeout


def verb_protocol(verbs: ExtenderVerbs) -> type[VerbHttpProtocol]:
    """The protocol class uvicorn builds per connection, answering ``verbs``' routes."""
    return type("ExtenderVerbHttpProtocol", (VerbHttpProtocol,), {"verbs": verbs})
