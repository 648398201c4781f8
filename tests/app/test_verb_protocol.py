"""The verbs answered in the server's HTTP protocol (app.http.verb_protocol), over real sockets and
over a recording transport: one write per answer (a long one: its head, then its body), keep-alive
and close, the other routes through ASGI on the same connection, pipelined requests, the body limit,
failures and lost connections."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
import uvicorn
from uvicorn.server import ServerState

from app.http import verb_protocol as verb_protocol_module
from app.http.server import create_app
from app.http.serving import ExtenderServer, build_server
from app.http.verb_protocol import verb_head, verb_protocol
from app.service import ExtenderService
from tests.app.serverutil import running
from tests.app.test_coalesce import RecordingTransport
from tests.conftest import bind_body, filter_body, make_service, node_obj, pod_obj

NODES = [node_obj("g1", gpus=4), node_obj("g2", gpus=4)]


def _request(path: str, body: bytes, *headers: str, method: str = "POST", version: str = "1.1") -> bytes:
    head = [f"{method} {path} HTTP/{version}", "Host: x", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def _answers(sock: socket.socket, count: int) -> list[tuple[bytes, dict[str, str], bytes]]:
    """``count`` whole HTTP answers read from ``sock`` (Content-Length framed)."""
    data, answers = b"", []
    while len(answers) < count:
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            assert chunk, f"connection closed after {len(answers)} answers: {data!r}"
            data += chunk
        head, _, data = data.partition(b"\r\n\r\n")
        status, *lines = head.split(b"\r\n")
        headers = {k.decode().lower(): v.decode() for k, v in (line.split(b": ", 1) for line in lines)}
        size = int(headers["content-length"])
        while len(data) < size:
            chunk = sock.recv(65536)
            assert chunk, "connection closed inside a body"
            data += chunk
        answers.append((status, headers, data[:size]))
        data = data[size:]
    return answers


@pytest.fixture
def served() -> Iterator[tuple[ExtenderService, ExtenderServer]]:
    service = make_service(NODES, config={"server": {"maxRequestBytes": 8192}})
    with running(build_server(create_app(service), service.config.server, "127.0.0.1", 0)) as server:
        yield service, server


def test_verbs_and_other_routes_share_a_kept_alive_connection(served: Any) -> None:
    service, server = served
    pod = pod_obj("p", gpus=1)
    service.cache.upsert_pod(service.pod_info(json.dumps(pod).encode()))
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(_request("/filter", filter_body(pod, ["g1", "g2"])))
        sock.sendall(_request("/healthz", b"", method="GET"))
        sock.sendall(_request("/bind", bind_body(pod, "g1")))
        filtered, health, bound = _answers(sock, 3)  # one reader: answers may share a segment
    assert filtered[0] == b"HTTP/1.1 200 OK" and filtered[1]["content-type"] == "application/json"
    assert "extender;dur=" in filtered[1]["server-timing"] and "connection" not in filtered[1]
    assert json.loads(filtered[2])["Error"] == "" and set(json.loads(filtered[2])["NodeNames"]) <= {"g1", "g2"}
    assert health[0] == b"HTTP/1.1 200 OK" and json.loads(health[2]) == {"status": "ok"}
    assert json.loads(bound[2]) == {"Error": ""} and service.cache.pods[pod["metadata"]["uid"]].node_name == "g1"


def test_connection_close_and_http_1_0_get_their_answer_then_the_connection_ends(served: Any) -> None:
    _, server = served
    body = filter_body(pod_obj("p", gpus=1), ["g1"])
    for request in (_request("/filter", body, "Connection: close"), _request("/filter", body, version="1.0")):
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(request)
            ((status, headers, answer),) = _answers(sock, 1)
            assert status.endswith(b"200 OK") and headers["connection"] == "close"
            assert json.loads(answer)["NodeNames"] == ["g1"]
            assert sock.recv(1) == b""  # closed by the server


def test_pipelined_requests_are_answered_in_order(served: Any) -> None:
    _, server = served
    one, two = filter_body(pod_obj("a", gpus=1), ["g1"]), filter_body(pod_obj("b", gpus=8), ["g2"])
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(_request("/filter", one) + _request("/prioritize", two) + _request("/filter", two))
        answers = [json.loads(body) for _, _, body in _answers(sock, 3)]
    assert answers[0]["NodeNames"] == ["g1"]
    assert [host["Host"] for host in answers[1]] == ["g2"]  # the prioritize answer, second
    assert answers[2]["NodeNames"] == [] and "g2" in answers[2]["FailedAndUnresolvableNodes"]  # 8 of 4 GPUs


def test_expect_100_continue_and_bodies_over_the_limit(served: Any) -> None:
    _, server = served
    body = filter_body(pod_obj("p", gpus=1), ["g1"])
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(_request("/filter", body, "Expect: 100-continue")[: -len(body)])
        assert sock.recv(64).startswith(b"HTTP/1.1 100 Continue")  # the ASGI path answers it
        sock.sendall(body)
        ((_, _, answer),) = _answers(sock, 1)
        assert json.loads(answer)["NodeNames"] == ["g1"]
        big = filter_body(pod_obj("p", gpus=1), [f"n{i:05d}" for i in range(2000)])
        sock.sendall(_request("/filter", big))
        ((status, _, refused),) = _answers(sock, 1)
        assert status.endswith(b"200 OK")
        assert json.loads(refused)["Error"] == f"request body of {len(big)} bytes exceeds the limit of 8192 bytes"
        sock.sendall(_request("/filter", body))  # the connection is still usable
        ((_, _, again),) = _answers(sock, 1)
        assert json.loads(again)["NodeNames"] == ["g1"]


def test_a_failing_verb_answers_its_error_and_a_percent_encoded_path_goes_through_asgi(served: Any) -> None:
    service, server = served

    def kaboom(_: bytes) -> Any:
        raise RuntimeError("kaboom")

    service.prioritize = kaboom  # type: ignore[method-assign]
    app = create_app(service)  # routes bound to the patched method
    with (
        running(build_server(app, service.config.server, "127.0.0.1", 0)) as patched,
        socket.create_connection(("127.0.0.1", patched.port), timeout=10) as sock,
    ):
        sock.sendall(_request("/prioritize", filter_body(pod_obj("p", gpus=1), ["g1"])))
        ((status, _, answer),) = _answers(sock, 1)
        assert status.endswith(b"200 OK") and json.loads(answer) == []
        sock.sendall(_request("/%66ilter", filter_body(pod_obj("p", gpus=1), ["g1"])))
        ((_, _, routed),) = _answers(sock, 1)
        assert json.loads(routed)["NodeNames"] == ["g1"]  # /filter once decoded, through ASGI
    assert service.metrics.results.labels("prioritize", "internal-error")._value.get() == 1
    del server


def _exchange_on(app: Any, timeout_keep_alive: float = 5) -> tuple[Any, type[Any]]:
    """uvicorn's config for ``app`` and the verb protocol class, as the server builds them."""
    config = uvicorn.Config(app, log_config=None, timeout_keep_alive=timeout_keep_alive)  # type: ignore[arg-type]
    config.load()
    return config, verb_protocol(app)


def _gated_bind() -> tuple[ExtenderService, dict[str, Any], asyncio.Event]:
    """A service knowing pod "p", whose Binding waits for the event returned."""
    service = make_service(NODES)
    pod = pod_obj("p", gpus=1)
    service.cache.upsert_pod(service.pod_info(json.dumps(pod).encode()))
    release = asyncio.Event()
    binder = service.binder

    class Gated:
        async def bind(self, *args: str) -> None:
            await release.wait()
            await binder.bind(*args)

    service.binder = Gated()  # type: ignore[assignment]
    return service, pod, release


def test_one_write_per_answer_and_a_lost_connection_mid_bind_writes_nothing() -> None:
    service, pod, release = _gated_bind()
    config, protocol_class = _exchange_on(create_app(service))

    async def exchange() -> tuple[list[bytes], list[bytes]]:
        loop = asyncio.get_running_loop()
        state = ServerState()
        kept = RecordingTransport()
        protocol = protocol_class(config, state, {}, _loop=loop)
        protocol.connection_made(kept)
        for name in ("a", "b"):
            count = len(kept.writes)
            protocol.data_received(_request("/filter", filter_body(pod_obj(name, gpus=1), ["g1", "g2"])))
            await asyncio.sleep(0)  # a second write of the same answer would come in this turn
            assert len(kept.writes) == count + 1  # answered in the turn that read it, in one write
        lost = RecordingTransport()
        other = protocol_class(config, state, {}, _loop=loop)
        other.connection_made(lost)
        other.data_received(_request("/bind", bind_body(pod, "g1")))
        assert len(state.tasks) == 1  # a graceful shutdown waits for the bind
        other.connection_lost(None)
        release.set()
        while state.tasks:
            await asyncio.sleep(0)
        protocol.connection_lost(None)
        return kept.writes, lost.writes

    kept, lost = asyncio.run(exchange())
    assert len(kept) == 2 and all(w.startswith(b"HTTP/1.1 200 OK") for w in kept)
    assert lost == []  # nothing written to a connection that is gone
    assert service.cache.pods[pod["metadata"]["uid"]].node_name == "g1"  # the bind itself completed


def test_a_long_answer_goes_out_as_its_head_then_its_body_and_a_short_one_in_one_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past ``_APART_MIN`` (lowered here, so that two nodes' HostPriorityList is long) the body is
    written after its head as it is, not copied behind it; what arrives is the same answer."""
    service = make_service(NODES)
    app = create_app(service)
    config, protocol_class = _exchange_on(app)
    body = filter_body(pod_obj("p", gpus=1), ["g1", "g2"])
    answer = service.prioritize(body)
    assert isinstance(answer, msgspec.Raw)  # prebuilt from the node table's host prefixes
    expected = json.loads(bytes(answer))

    async def exchange(apart_min: int) -> list[bytes]:
        monkeypatch.setattr(verb_protocol_module, "_APART_MIN", apart_min)
        kept = RecordingTransport()
        protocol = protocol_class(config, ServerState(), {}, _loop=asyncio.get_running_loop())
        protocol.connection_made(kept)
        protocol.data_received(_request("/prioritize", body))
        await asyncio.sleep(0)
        protocol.connection_lost(None)
        return kept.writes

    for apart_min, writes in ((16, 2), (1 << 20, 1)):
        sent = asyncio.run(exchange(apart_min))
        assert len(sent) == writes
        head, _, answer = b"".join(sent).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK") and f"content-length: {len(answer)}".encode() in head
        assert json.loads(answer) == expected
        if writes == 2:
            assert sent[0].endswith(b"\r\n\r\n") and sent[1] == answer


@pytest.mark.parametrize("piece", [1, 7, 4096])
def test_a_body_arriving_in_pieces_is_answered_and_the_connection_parses_what_follows(piece: int) -> None:
    """A verb's body taken in pieces past the HTTP parser: each answer is the one its whole body
    gets, a request glued to the end of a body is parsed by the next parser, and so is the next one."""
    service = make_service(NODES)
    app = create_app(service)
    config, protocol_class = _exchange_on(app)
    for pod in (pod_obj("a", gpus=1), pod_obj("b", gpus=2)):  # known: filter answers at once
        service.cache.upsert_pod(service.pod_info(json.dumps(pod).encode()))
    one, two = filter_body(pod_obj("a", gpus=1), ["g1", "g2"]), filter_body(pod_obj("b", gpus=2), ["g2"])
    stream = _request("/filter", one) + _request("/prioritize", two) + _request("/filter", two)
    stream += _request("/healthz", b"", method="GET")

    async def exchange() -> list[bytes]:
        loop = asyncio.get_running_loop()
        transport = RecordingTransport()
        protocol = protocol_class(config, ServerState(), {}, _loop=loop)
        protocol.connection_made(transport)
        for start in range(0, len(stream), piece):
            protocol.data_received(stream[start : start + piece])
            await asyncio.sleep(0)
        for _ in range(100):  # the ASGI route (healthz) answers from a task
            if sum(w.count(b"HTTP/1.1 200 OK") for w in transport.writes) == 4:
                break
            await asyncio.sleep(0)
        protocol.connection_lost(None)
        return transport.writes

    answers = [part.partition(b"\r\n\r\n")[2] for part in b"".join(asyncio.run(exchange())).split(b"HTTP/1.1 ")[1:]]
    assert len(answers) == 4
    assert set(json.loads(answers[0])["NodeNames"]) == {"g1", "g2"}
    assert [host["Host"] for host in json.loads(answers[1])] == ["g2"]
    assert json.loads(answers[2])["NodeNames"] == ["g2"]
    assert json.loads(answers[3]) == {"status": "ok"}


def _route(path: str) -> Any:
    return {"/filter": "filter", "/bind": "bind"}.get(path)


FIELDS = b"Host: x\r\nUser-Agent: kube-scheduler/v1.36.2\r\nContent-Type: application/json"


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        (b"POST /filter HTTP/1.1\r\n" + FIELDS + b"\r\nContent-Length: 12", ("filter", 12, True)),
        (b"POST /bind?x=%41 HTTP/1.1\r\ncontent-length:  7 \r\n" + FIELDS, ("bind", 7, True)),  # query, case, spaces
        (b"POST /filter HTTP/1.1\r\nConnection: keep-alive, Close\r\nContent-Length: 2", ("filter", 2, False)),
        (b"POST /filter HTTP/1.0\r\nContent-Length: 2", ("filter", 2, False)),
        (b"POST /filter HTTP/1.1\r\n" + FIELDS, ("filter", 0, True)),  # no body
    ],
)
def test_a_plain_verb_head_is_read_here(head: bytes, expected: tuple[str, int, bool]) -> None:
    assert verb_head(head, _route) == expected


@pytest.mark.parametrize(
    "head",
    [
        b"GET /filter HTTP/1.1\r\nHost: x",  # another method
        b"POST /healthz HTTP/1.1\r\nHost: x",  # another route
        b"POST /%66ilter HTTP/1.1\r\nHost: x",  # an escape in the path
        b"POST /filter HTTP/2.0\r\nHost: x",
        b"POST /filter HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2",  # two lengths
        b"POST /filter HTTP/1.1\r\nContent-Length: -2",
        b"POST /filter HTTP/1.1\r\nContent-Length: 0x10",
        b"POST /filter HTTP/1.1\r\nTransfer-Encoding: chunked",
        b"POST /filter HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2",
        b"POST /filter HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: h2c",
        b"POST /filter HTTP/1.1\r\nUpgrade: websocket",
        b"POST /filter HTTP/1.1\nContent-Length: 2",  # bare LF
        b"POST /filter HTTP/1.1\r\nHost: x\ry",  # bare CR
        b"POST /filter HTTP/1.1\r\nHost: x\x00",
        b"POST /filter HTTP/1.1\r\nHost: x\r\n folded",  # obsolete line folding
        b"POST /filter HTTP/1.1\r\nContent-Length : 2",  # space before the colon
        b"POST /filter HTTP/1.1\r\nno colon",
        b"POST  /filter HTTP/1.1\r\nHost: x",
        b"POST /fil\xc3\xa9ter HTTP/1.1\r\nHost: x",
    ],
)
def test_anything_else_is_left_to_uvicorn(head: bytes) -> None:
    assert verb_head(head, _route) is None


def test_a_head_uvicorn_refuses_is_refused_as_without_us(served: Any) -> None:
    """Two Content-Lengths on a verb: handed over with the connection, and uvicorn's parser answers 400."""
    _, server = served
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}")
        ((status, _, _),) = _answers(sock, 1)
        assert status.startswith(b"HTTP/1.1 400")


def test_a_head_past_64_kib_goes_to_uvicorn_which_answers_it(served: Any) -> None:
    """(A head split anywhere, even inside its last CRLF CRLF, is read here: the pieces test above.)"""
    _, server = served
    body = filter_body(pod_obj("p", gpus=1), ["g1"])
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(_request("/filter", body, "X-Padding: " + "a" * (70 * 1024)))
        ((status, headers, answer),) = _answers(sock, 1)
        assert status == b"HTTP/1.1 200 OK" and json.loads(answer)["NodeNames"] == ["g1"]
        assert headers["server"] == "uvicorn"  # answered through ASGI
        sock.sendall(_request("/filter", body))  # the connection is uvicorn's now, and still answers verbs
        ((_, headers, again),) = _answers(sock, 1)
        assert json.loads(again)["NodeNames"] == ["g1"] and headers["server"] == "uvicorn"
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(_request("/filter", body))
        ((_, headers, _),) = _answers(sock, 1)
        assert "server" not in headers  # a new connection: answered here


def test_a_request_behind_a_pending_bind_is_answered_after_it() -> None:
    """Pipelined behind a bind waiting for the API server: held, then answered in order."""
    service, pod, release = _gated_bind()
    config, protocol_class = _exchange_on(create_app(service))

    async def exchange() -> list[bytes]:
        transport = RecordingTransport()
        protocol = protocol_class(config, ServerState(), {}, _loop=asyncio.get_running_loop())
        protocol.connection_made(transport)
        stream = _request("/bind", bind_body(pod, "g1")) + _request("/filter", filter_body(pod, ["g2"]))
        protocol.data_received(stream[:-40])  # the filter's start with the bind, its rest after
        await asyncio.sleep(0)
        protocol.data_received(stream[-40:])
        assert transport.writes == []  # the filter waits behind the bind
        release.set()
        while len(transport.writes) < 2:
            await transport.wrote.wait()
            transport.wrote.clear()
        protocol.connection_lost(None)
        return transport.writes

    bound, filtered = (raw.partition(b"\r\n\r\n")[2] for raw in asyncio.run(exchange()))
    assert json.loads(bound) == {"Error": ""}
    assert json.loads(filtered)["NodeNames"] == ["g2"]


def test_an_idle_connection_is_closed_after_the_keep_alive_timeout_and_a_busy_one_is_not() -> None:
    service = make_service(NODES)
    config, protocol_class = _exchange_on(create_app(service), timeout_keep_alive=5)

    async def exchange() -> None:
        loop = asyncio.get_running_loop()
        transport = RecordingTransport()
        protocol = protocol_class(config, ServerState(), {}, _loop=loop)
        protocol.connection_made(transport)
        protocol.data_received(_request("/filter", filter_body(pod_obj("p", gpus=1), ["g1"]))[:20])  # a head begun
        protocol.last_active = loop.time() - 60
        protocol._idle_check()
        assert not transport.closed and protocol.timer is not None  # mid-request: looked at again later
        protocol.data_received(_request("/filter", filter_body(pod_obj("p", gpus=1), ["g1"]))[20:])
        assert len(transport.writes) == 1  # answered; idle from now
        protocol._idle_check()
        assert not transport.closed  # idle for less than the timeout
        protocol.last_active = loop.time() - 5
        protocol._idle_check()
        assert transport.closed and protocol.timer is None
        protocol.connection_lost(None)

    asyncio.run(exchange())


def test_a_graceful_shutdown_closes_idle_connections_and_answers_the_one_in_progress_first() -> None:
    service = make_service(NODES)
    config, protocol_class = _exchange_on(create_app(service))
    body = filter_body(pod_obj("p", gpus=1), ["g1"])

    async def exchange() -> tuple[RecordingTransport, RecordingTransport, ServerState]:
        loop = asyncio.get_running_loop()
        state = ServerState()
        idle, busy = RecordingTransport(), RecordingTransport()
        for transport in (idle, busy):
            protocol_class(config, state, {}, _loop=loop).connection_made(transport)
        assert len(state.connections) == 2
        busy_protocol = next(p for p in state.connections if p.transport is busy)
        busy_protocol.data_received(_request("/filter", body)[:-5])  # the body not yet whole
        for protocol in list(state.connections):
            protocol.shutdown()
        assert idle.closed and not busy.closed
        busy_protocol.data_received(_request("/filter", body)[-5:])
        for protocol in list(state.connections):
            protocol.connection_lost(None)
        return idle, busy, state

    idle, busy, state = asyncio.run(exchange())
    assert idle.writes == []
    ((_, headers, answer),) = [_split(raw) for raw in busy.writes]
    assert headers["connection"] == "close" and json.loads(answer)["NodeNames"] == ["g1"] and busy.closed
    assert not state.connections


def _split(raw: bytes) -> tuple[bytes, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status, *lines = head.split(b"\r\n")
    return status, {k.decode().lower(): v.decode() for k, v in (line.split(b": ", 1) for line in lines)}, body


def test_a_body_over_the_limit_in_pieces_is_counted_not_kept() -> None:
    service = make_service(NODES, config={"server": {"maxRequestBytes": 1024}})
    config, protocol_class = _exchange_on(create_app(service))
    big = filter_body(pod_obj("p", gpus=1), [f"n{i:05d}" for i in range(500)])
    request = _request("/filter", big)

    async def exchange() -> tuple[list[bytes], int]:
        transport = RecordingTransport()
        protocol = protocol_class(config, ServerState(), {}, _loop=asyncio.get_running_loop())
        protocol.connection_made(transport)
        kept = 0
        for start in range(0, len(request), 1000):
            protocol.data_received(request[start : start + 1000])
            if protocol.request is not None:
                kept = max(kept, sum(map(len, protocol.request.chunks)))
        protocol.connection_lost(None)
        return transport.writes, kept

    writes, kept = asyncio.run(exchange())
    assert kept == 0
    ((_, _, answer),) = [_split(raw) for raw in writes]
    assert json.loads(answer)["Error"] == f"request body of {len(big)} bytes exceeds the limit of 1024 bytes"


def test_reading_pauses_while_the_client_does_not_read_its_answers() -> None:
    """The transport's write buffer full (pause_writing): no more requests read until it drains; held
    pipelined bytes keep reading paused past that."""
    service = make_service(NODES)
    config, protocol_class = _exchange_on(create_app(service))

    class Flow(RecordingTransport):
        def __init__(self) -> None:
            super().__init__()
            self.reading = True

        def pause_reading(self) -> None:
            self.reading = False

        def resume_reading(self) -> None:
            self.reading = True

    async def exchange() -> None:
        transport = Flow()
        protocol = protocol_class(config, ServerState(), {}, _loop=asyncio.get_running_loop())
        protocol.connection_made(transport)
        protocol.pause_writing()
        assert not transport.reading
        protocol.resume_writing()
        assert transport.reading
        protocol.paused, transport.reading = True, False  # as when pipelined bytes past the limit are held
        protocol.pause_writing()
        protocol.resume_writing()
        assert not transport.reading  # still paused: the held bytes' pause is lifted once they are read
        protocol.connection_lost(None)

    asyncio.run(exchange())
