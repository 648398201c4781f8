"""Who may read /debug, /metrics and the console (/ui) when the extender is reachable from beyond its pod.

On loopback (the sidecar default) only processes in the pod's network namespace can connect, so
the operator surface is open. Bound elsewhere, it needs a verified client certificate (mTLS, at the
TLS layer) or a bearer token read from a file; the extender verbs follow the TLS setting alone.
"""

from __future__ import annotations

import hmac
import ipaddress
from pathlib import Path

from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = [
    "PROTECTED_PATHS",
    "PROTECTED_PREFIXES",
    "BearerTokenGuard",
    "exposure_error",
    "is_loopback",
    "is_protected",
    "read_token",
]

PROTECTED_PATHS = frozenset({"/debug", "/metrics", "/ui"})
# Everything under these: /debug/explain, /debug/queues, the console's pages and assets.
PROTECTED_PREFIXES = ("/debug/", "/ui/")


def is_protected(path: str) -> bool:
    """Whether ``path`` is part of the operator surface (the probes and the verbs are not)."""
    return path.rstrip("/") in PROTECTED_PATHS or path.startswith(PROTECTED_PREFIXES)


def read_token(path: str) -> bytes:
    """The token in ``path`` (surrounding whitespace dropped); ``ValueError`` when unreadable or empty."""
    try:
        token = Path(path).read_bytes().strip()
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from None
    if not token:
        raise ValueError(f"{path} is empty")
    return token


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name may resolve anywhere


def exposure_error(host: str, client_ca_file: str | None, debug_token_file: str | None) -> str | None:
    """Why serving on ``host`` would expose /debug, /metrics and the console to anyone, or None."""
    if is_loopback(host) or client_ca_file is not None or debug_token_file is not None:
        return None
    return (
        f"--host {host} is not a loopback address: /debug, /metrics and the console (/ui) would be open to the "
        "network; set server.tls.clientCAFile (mTLS) or server.debugTokenFile (bearer token), bind 127.0.0.1, "
        "or accept it with --allow-unauthenticated-debug"
    )


class BearerTokenGuard:
    """ASGI front answering 401 on protected paths unless ``Authorization: Bearer <token>`` matches.

    The file is read on every protected request (scrapes and /debug are rare), so a rotated Secret
    takes effect at once; an unreadable file refuses everyone rather than failing open.
    """

    def __init__(self, app: ASGIApp, token_file: str) -> None:
        self.app = app
        self.token_file = token_file

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and is_protected(scope["path"]) and not self._authorized(scope):
            body = b'{"error":"unauthorized: send Authorization: Bearer <the token in server.debugTokenFile>"}'
            headers = [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", b'Bearer realm="kube-gpu-extender"'),
            ]
            await send({"type": "http.response.start", "status": 401, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)

    def _authorized(self, scope: Scope) -> bool:
        presented = b""
        for key, value in scope["headers"]:
            if key == b"authorization":
                scheme, _, credentials = value.partition(b" ")
                if scheme.lower() == b"bearer":
                    presented = credentials.strip()
        try:
            expected = read_token(self.token_file)
        except ValueError:
            return False
        return bool(presented) and hmac.compare_digest(presented, expected)
