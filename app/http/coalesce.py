"""One write per response. uvicorn writes a response's head and its body with two transport writes:
on loopback that is two TCP segments, two send syscalls here and two wake-ups of kube-scheduler
for every verb call. ``CoalescingHttpToolsProtocol`` hands uvicorn's HTTP protocol a transport that
holds what is written during one turn of the event loop and sends it as one write at the end of
that turn (a verb answer is written in one turn: its head and body go out together).

Measured through a real kube-scheduler (bench.throughput, docs/performance.md): the extender used
less CPU per pod and the shipped configuration scheduled more pods/s.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["CoalescingHttpToolsProtocol", "CoalescingTransport"]


class CoalescingTransport:
    """``transport`` whose writes of one event-loop turn are sent as one; the rest is delegated."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(bytes(data))

    def writelines(self, chunks: Any) -> None:
        for chunk in chunks:
            self.write(chunk)

    def flush(self) -> None:
        """Send what is held (in order, as one write); nothing once the transport is closing."""
        if not self._pending:
            return
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        self._pending.clear()
        if not self._transport.is_closing():
            self._transport.write(data)

    def write_now(self, *data: bytes | memoryview) -> None:
        """Send ``data`` at once, after anything held: for an answer already made (each part one
        write; the transport copies only what the socket does not take at once)."""
        self.flush()
        for part in data:
            self._transport.write(part)

    def close(self) -> None:
        self.flush()  # what was written before close goes out first, as with the plain transport
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._pending.clear()
        self._transport.abort()

    def get_write_buffer_size(self) -> int:
        return sum(map(len, self._pending)) + self._transport.get_write_buffer_size()

    # Asked on every request or connection: spelled out, not found through __getattr__.
    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class CoalescingHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol over a ``CoalescingTransport``."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.coalescing = CoalescingTransport(transport, self.loop)
        super().connection_made(self.coalescing)  # type: ignore[arg-type]
