"""The uvicorn server around the app: TLS with live certificate reload, the debug guard, SIGTERM.

On SIGTERM (how Kubernetes stops a pod) uvicorn closes the listener first, so new connections are
refused, lets in-flight requests finish (a bind half done would leave a pod assumed here but not
bound) for up to ``server.shutdownGracePeriodSeconds``, then we exit 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator

import uvicorn
from starlette.types import ASGIApp

from app.config import ServerConfig
from app.http.auth import BearerTokenGuard
from app.http.coalesce import CoalescingHttpToolsProtocol
from app.http.server import ExtenderVerbs
from app.http.tls import RELOAD_INTERVAL, CertificateReloader
from app.http.verb_protocol import verb_protocol

__all__ = ["ExtenderServer", "build_server"]


class ExtenderServer(uvicorn.Server):
    """uvicorn's server, plus the certificate reloader, exiting 0 after a SIGTERM-initiated shutdown."""

    def __init__(
        self,
        config: uvicorn.Config,
        reloader: CertificateReloader | None = None,
        reload_interval: float = RELOAD_INTERVAL,
    ) -> None:
        super().__init__(config)
        self.reloader = reloader
        self.reload_interval = reload_interval

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        with super().capture_signals():
            yield
            self._captured_signals.clear()  # uvicorn would re-raise SIGTERM; it is a normal stop for us

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        if self.reloader is None:
            await super().serve(sockets)
            return
        task = asyncio.create_task(self.reloader.run(self.reload_interval), name="certificate-reload")
        try:
            await super().serve(sockets)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    @property
    def port(self) -> int:
        """The bound port (useful with port 0), once started."""
        return int(self.servers[0].sockets[0].getsockname()[1])


def build_server(
    app: ASGIApp,
    server: ServerConfig,
    host: str,
    port: int,
    *,
    reload_interval: float = RELOAD_INTERVAL,
) -> ExtenderServer:
    """The server for ``app`` as ``server`` configures it (TLS, debug token, grace period)."""
    # The verbs answered in the HTTP protocol itself (app.http.verb_protocol); one write per response either way.
    protocol = verb_protocol(app) if isinstance(app, ExtenderVerbs) else CoalescingHttpToolsProtocol
    if server.debugTokenFile is not None:
        app = BearerTokenGuard(app, server.debugTokenFile)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=None,
        access_log=False,
        http=protocol,
        proxy_headers=False,  # nothing proxies kube-scheduler's calls: no X-Forwarded-* to read
        timeout_graceful_shutdown=server.shutdownGracePeriodSeconds,  # type: ignore[arg-type]  # used as a float
    )
    reloader = None
    if server.tls is not None:
        reloader = CertificateReloader(server.tls.certFile, server.tls.keyFile, server.tls.clientCAFile)
        # uvicorn builds its own context from file names; give it ours, which the reloader keeps current.
        config.load()
        config.ssl = reloader.context
    return ExtenderServer(config, reloader, reload_interval)
