"""One write per response (app.http.coalesce), through uvicorn's own httptools protocol."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import uvicorn
from uvicorn.server import ServerState

from app.http.coalesce import CoalescingHttpToolsProtocol, CoalescingTransport
from app.http.server import create_app
from app.http.serving import build_server
from app.http.verb_protocol import VerbProtocol
from tests.conftest import filter_body, make_service, node_obj, pod_obj


class RecordingTransport(asyncio.Transport):
    """Records each write; ``wrote`` is set on every one."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False
        self.aborted = False
        self.wrote = asyncio.Event()

    def write(self, data: Any) -> None:
        assert not self.closed, "written after close"
        self.writes.append(bytes(data))
        self.wrote.set()

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = self.closed = True

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8888), "peername": ("127.0.0.1", 50000)}.get(name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self.protocol


def _request(body: bytes) -> bytes:
    head = f"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


def _response(raw: bytes) -> tuple[bytes, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status, *lines = head.split(b"\r\n")
    headers = {k.decode().lower(): v.decode() for k, v in (line.split(b": ", 1) for line in lines)}
    return status, headers, body


def test_a_verb_answer_is_one_write_and_keep_alive_answers_each_request_in_one() -> None:
    service = make_service([node_obj("g1", gpus=4), node_obj("g2", gpus=4)])
    config = uvicorn.Config(create_app(service), http=CoalescingHttpToolsProtocol, log_config=None)
    config.load()

    async def exchange() -> list[bytes]:
        transport = RecordingTransport()
        protocol = CoalescingHttpToolsProtocol(config, ServerState(), {}, _loop=asyncio.get_running_loop())
        protocol.connection_made(transport)
        for name in ("p1", "p2"):  # two requests on one connection
            transport.wrote.clear()
            count = len(transport.writes)
            protocol.data_received(_request(filter_body(pod_obj(name, gpus=1), ["g1", "g2"])))
            await transport.wrote.wait()
            await asyncio.sleep(0)  # one more turn: a second write of the same answer would come now
            assert len(transport.writes) == count + 1
        protocol.connection_lost(None)
        return transport.writes

    writes = asyncio.run(exchange())
    assert len(writes) == 2
    for raw in writes:
        status, headers, body = _response(raw)
        assert status == b"HTTP/1.1 200 OK" and int(headers["content-length"]) == len(body)
        assert json.loads(body)["NodeNames"] == ["g1", "g2"] and json.loads(body)["Error"] == ""


def test_held_writes_go_out_in_order_before_close_and_are_dropped_on_abort() -> None:
    async def run() -> tuple[RecordingTransport, RecordingTransport]:
        loop = asyncio.get_running_loop()
        closed, aborted = RecordingTransport(), RecordingTransport()
        first = CoalescingTransport(closed, loop)
        first.write(b"head ")
        first.writelines([b"body", b""])
        assert closed.writes == [] and first.get_write_buffer_size() == 9  # held for the turn
        first.close()  # before the turn ends: flushed first, then closed
        second = CoalescingTransport(aborted, loop)
        second.write(b"lost")
        second.abort()
        await asyncio.sleep(0)  # the scheduled flushes run and find nothing to send
        return closed, aborted

    closed, aborted = asyncio.run(run())
    assert closed.writes == [b"head body"] and closed.closed
    assert aborted.writes == [] and aborted.aborted


def test_the_served_app_runs_on_the_coalescing_protocol_that_answers_its_verbs() -> None:
    service = make_service([node_obj("g1", gpus=4)])
    app = create_app(service)
    server = build_server(app, service.config.server, "127.0.0.1", 0)
    protocol = server.config.http
    assert isinstance(protocol, type) and issubclass(protocol, VerbProtocol) and protocol.verbs is app
    assert protocol.handover is CoalescingHttpToolsProtocol  # what is not a verb: uvicorn, one write per answer
    assert server.config.proxy_headers is False  # nothing proxies kube-scheduler's calls


def test_the_transport_answers_what_uvicorn_asks_per_request_and_connection() -> None:
    async def run() -> None:
        inner = RecordingTransport()
        transport = CoalescingTransport(inner, asyncio.get_running_loop())
        assert transport.get_extra_info("peername") == ("127.0.0.1", 50000)
        assert transport.get_extra_info("sslcontext", "none") == "none"
        assert transport.is_closing() is False
        transport.close()
        assert transport.is_closing() is True
        transport.pause_reading()  # the rest still goes to the transport underneath

    asyncio.run(run())
