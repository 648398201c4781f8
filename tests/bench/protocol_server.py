"""An asyncio protocol served on 127.0.0.1 from a thread of the test, for the bench's bare servers."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator

__all__ = ["serving"]


@contextlib.contextmanager
def serving(protocol: Callable[[], asyncio.Protocol]) -> Iterator[int]:
    """Serve ``protocol`` on a free port of 127.0.0.1 until the block ends; yields the port."""
    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(loop.create_server(protocol, "127.0.0.1", 0))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield int(server.sockets[0].getsockname()[1])
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        server.close()
        loop.run_until_complete(server.wait_closed())
        loop.close()
