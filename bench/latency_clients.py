"""The HTTP clients ``bench.latency`` times the verbs with: ``--client httpx`` (the default) or
``--client http.client``, each on one kept-alive connection, sending the headers Go's net/http sends."""

from __future__ import annotations

import http.client
from collections.abc import Callable
from typing import Protocol

import httpx

__all__ = ["CLIENTS", "HEADERS", "Client", "HttpxClient", "StdlibClient"]

HEADERS = {"Content-Type": "application/json", "User-Agent": "Go-http-client/1.1", "Accept-Encoding": "gzip"}


class Client(Protocol):
    def request(self, method: str, path: str, body: bytes) -> tuple[int, bytes, str]:
        """(status, body, the Server-Timing header or "")."""
        ...

    def close(self) -> None: ...


class HttpxClient:
    """The default: one keep-alive connection through httpx (about 0.4 ms more per call than Go's)."""

    def __init__(self, port: int) -> None:
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        self._client = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=HEADERS, limits=limits, timeout=30)

    def request(self, method: str, path: str, body: bytes) -> tuple[int, bytes, str]:
        response = self._client.request(method, path, content=body or None)
        return response.status_code, response.content, response.headers.get("server-timing", "")

    def close(self) -> None:
        self._client.close()


class StdlibClient:
    """``http.client`` on one connection: a thinner client, closer to the floor Go's net/http has."""

    def __init__(self, port: int) -> None:
        self._conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def request(self, method: str, path: str, body: bytes) -> tuple[int, bytes, str]:
        self._conn.request(method, path, body=body or None, headers=HEADERS)
        response = self._conn.getresponse()
        return response.status, response.read(), response.getheader("server-timing") or ""

    def close(self) -> None:
        self._conn.close()


CLIENTS: dict[str, Callable[[int], Client]] = {"httpx": HttpxClient, "http.client": StdlibClient}
