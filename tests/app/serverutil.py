"""Run the real uvicorn server (app.http.serving) in a thread on 127.0.0.1, port 0."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

from app.http.serving import ExtenderServer

__all__ = ["running"]


@contextlib.contextmanager
def running(server: ExtenderServer, timeout: float = 15.0) -> Iterator[ExtenderServer]:
    thread = threading.Thread(target=server.run, name="extender-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        assert thread.is_alive(), "the server stopped during start-up"
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    try:
        yield server
    finally:
        server.should_exit = True
        thread.join(timeout)
        assert not thread.is_alive()
