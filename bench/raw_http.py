"""The HTTP/1.1 request side the benchmark's bare servers share: an ``asyncio.Protocol`` that feeds
httptools' C parser, which calls back ``on_url``, ``on_header``, ``on_body`` and
``on_message_complete`` of the subclass."""

from __future__ import annotations

import asyncio
from typing import Any

import httptools

__all__ = ["HttpRequestProtocol"]


class HttpRequestProtocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: Any = None  # uvloop's TCPTransport
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_url(self, url: bytes) -> None:
        self.url += url
