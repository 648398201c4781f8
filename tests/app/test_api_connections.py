"""The Binding POST on kept-alive connections (app/cluster/api_connections.py, ``KubeClient.bind``),
against a stub API server that records connections and requests and answers as each test says."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import pytest

from app.cluster.api_connections import IDLE_SECONDS, ApiConnections
from app.cluster.kube import ApiError, KubeClient
from tests.conftest import pod_obj
from tests.fakeapi.server import FakeAPIServer

CREATED = b'HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 17\r\n\r\n{"kind":"Status"}'


@dataclass
class Request:
    line: str
    headers: dict[str, str]
    body: bytes


Answerer = Callable[[Request, int], Awaitable[bytes | None]]


@dataclass
class Stub:
    """Answers each request with ``answer(request, index)``: bytes to write, or None to hang up."""

    answer: Answerer
    close_after: set[int] = field(default_factory=set)  # requests after whose answer the server hangs up
    connections: int = 0
    requests: list[Request] = field(default_factory=list)
    closed: int = 0  # connections that ended (EOF from the client, or our hang-up)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                line, *rest = head.decode("latin-1").split("\r\n")
                headers = {k.lower(): v for k, v in (h.split(": ", 1) for h in rest if h)}
                request = Request(line, headers, await reader.readexactly(int(headers.get("content-length", 0))))
                self.requests.append(request)
                data = await self.answer(request, len(self.requests) - 1)
                if data is None:
                    break
                writer.write(data)
                await writer.drain()
                if len(self.requests) - 1 in self.close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.closed += 1
            writer.close()


def run(answer: Answerer, body: Callable[[Stub, str], Awaitable[None]], close_after: set[int] | None = None) -> Stub:
    stub = Stub(answer, close_after or set())

    async def main() -> None:
        server = await asyncio.start_server(stub.handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            await body(stub, f"http://127.0.0.1:{port}")

    asyncio.run(main())
    return stub


async def created(request: Request, index: int) -> bytes | None:
    return CREATED


def test_binds_reuse_one_connection_and_carry_the_binding_and_the_credential() -> None:
    async def body(stub: Stub, url: str) -> None:
        client = KubeClient(url, authorization=lambda: ("Authorization", "Bearer t0ken"))
        for name in ("p1", "p2", "p3"):
            await client.bind("ns", name, f"uid-{name}", "g2")
        await client.close()

    stub = run(created, body)
    assert stub.connections == 1 and len(stub.requests) == 3
    first = stub.requests[0]
    assert first.line == "POST /api/v1/namespaces/ns/pods/p1/binding HTTP/1.1"
    assert first.headers["authorization"] == "Bearer t0ken"
    assert first.headers["content-type"] == "application/json" and first.headers["host"].startswith("127.0.0.1:")
    assert json.loads(first.body) == {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "p1", "namespace": "ns", "uid": "uid-p1"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "g2"},
    }


def test_a_refusal_is_an_api_error_with_the_status_message_and_retry_after() -> None:
    message = 'pod p1 is already assigned to node "g1"'
    conflict = json.dumps({"kind": "Status", "message": message, "reason": "Conflict"})
    refusals = [
        f"HTTP/1.1 409 Conflict\r\nContent-Length: {len(conflict)}\r\n\r\n{conflict}".encode(),
        b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 3\r\nContent-Length: 2\r\n\r\n{}",
    ]
    errors: list[ApiError] = []

    async def answer(request: Request, index: int) -> bytes | None:
        return refusals[index]

    async def body(stub: Stub, url: str) -> None:
        client = KubeClient(url)
        for name in ("p1", "p2"):
            with pytest.raises(ApiError) as caught:
                await client.bind("ns", name, "u", "g2")
            errors.append(caught.value)
        await client.close()

    stub = run(answer, body)
    assert errors[0].status == 409 and errors[0].reason == "Conflict"
    assert str(errors[0]) == '409 pod p1 is already assigned to node "g1"'
    assert errors[1].status == 429 and errors[1].retry_after == 3.0 and str(errors[1]) == "429 Too Many Requests"
    assert stub.connections == 1  # an error answer leaves the connection usable


def test_a_chunked_answer_and_connection_close_are_honoured() -> None:
    async def answer(request: Request, index: int) -> bytes | None:
        head = b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        return head + b'5\r\n{"a":\r\n2\r\n1}\r\n0\r\n\r\n'

    async def body(stub: Stub, url: str) -> None:
        client = KubeClient(url)
        await client.bind("ns", "p1", "u", "g2")
        await client.bind("ns", "p2", "u", "g2")
        await client.close()

    stub = run(answer, body)
    assert len(stub.requests) == 2 and stub.connections == 2


def test_a_hang_up_is_a_transport_error_and_the_next_bind_connects_again() -> None:
    async def answer(request: Request, index: int) -> bytes | None:
        return None if index == 0 else CREATED

    async def body(stub: Stub, url: str) -> None:
        client = KubeClient(url)
        with pytest.raises(ApiError) as caught:
            await client.bind("ns", "p1", "u", "g2")
        assert caught.value.reason == "Transport" and str(caught.value).startswith("RemoteProtocolError: ")
        await client.bind("ns", "p1", "u", "g2")  # kube-scheduler's retry
        await client.close()

    stub = run(answer, body)
    assert stub.connections == 2 and len(stub.requests) == 2


def test_no_server_is_a_connect_error() -> None:
    async def body(stub: Stub, url: str) -> None:
        client = KubeClient("http://127.0.0.1:1")  # nothing listens on port 1
        with pytest.raises(ApiError) as caught:
            await client.bind("ns", "p1", "u", "g2")
        assert caught.value.reason == "Transport" and str(caught.value).startswith("ConnectError: ")
        await client.close()

    assert run(created, body).connections == 0


def test_a_connection_the_server_closed_while_idle_is_not_used_again() -> None:
    async def body(stub: Stub, url: str) -> None:
        client = KubeClient(url)
        await client.bind("ns", "p1", "u", "g2")
        assert client._posts is not None
        idle = client._posts._idle[0]
        for _ in range(1000):  # until this loop has read the server's hang-up
            if not idle.reusable:
                break
            await asyncio.sleep(0)
        assert not idle.reusable
        await client.bind("ns", "p2", "u", "g2")
        await client.close()

    stub = run(created, body, close_after={0})
    assert stub.connections == 2 and len(stub.requests) == 2


def test_a_late_answer_times_out_and_its_connection_is_not_used_again() -> None:
    release = asyncio.Event()

    async def answer(request: Request, index: int) -> bytes | None:
        if index == 0:
            await release.wait()  # answered only after the client gave up
        return CREATED

    async def body(stub: Stub, url: str) -> None:
        client = KubeClient(url, timeout=0.2)
        with pytest.raises(ApiError) as caught:
            await client.bind("ns", "p1", "u", "g2")
        assert caught.value.reason == "Timeout" and "timed out" in str(caught.value)
        release.set()
        await client.bind("ns", "p1", "u", "g2")
        await client.close()

    stub = run(answer, body)
    assert stub.connections == 2


def test_each_exchange_in_flight_times_out_at_its_own_deadline() -> None:
    """One timer serves every exchange in flight: an answer that comes in time is taken, and one sent
    later that does not come fails once its own timeout has passed, not at the first one's deadline."""
    release = asyncio.Event()

    async def answer(request: Request, index: int) -> bytes | None:
        if request.line.startswith("POST /late"):
            await release.wait()
        return CREATED

    async def body(stub: Stub, url: str) -> None:
        loop = asyncio.get_running_loop()
        long = ApiConnections(url, None, 0.6, {"Content-Type": "application/json"})
        first = asyncio.create_task(long.post("/prompt", b"{}"))
        await asyncio.sleep(0.2)
        sent = loop.time()
        late = asyncio.create_task(long.post("/late", b"{}"))
        assert (await first).status == 201
        with pytest.raises(TimeoutError):
            await late
        assert loop.time() - sent >= 0.6  # its own deadline, not the first exchange's (0.4 s after it was sent)
        release.set()
        assert (await long.post("/prompt", b"{}")).status == 201
        long.close()

    run(answer, body)


def test_a_connection_idle_too_long_is_closed_not_reused() -> None:
    now = [0.0]

    async def body(stub: Stub, url: str) -> None:
        posts = ApiConnections(url, None, 5.0, {"Content-Type": "application/json"}, clock=lambda: now[0])
        assert (await posts.post("/x", b"{}")).status == 201
        now[0] += IDLE_SECONDS
        answer = await posts.post("/x", b"{}")
        assert (answer.status, answer.phrase, answer.body) == (201, "Created", b'{"kind":"Status"}')
        posts.close()

    stub = run(created, body)
    assert stub.connections == 2


def test_a_server_behind_a_path_gets_the_path_in_front() -> None:
    async def body(stub: Stub, url: str) -> None:
        client = KubeClient(url + "/k8s/clusters/c1/")
        await client.bind("ns", "p1", "u", "g2")
        await client.close()

    stub = run(created, body)
    assert stub.requests[0].line == "POST /k8s/clusters/c1/api/v1/namespaces/ns/pods/p1/binding HTTP/1.1"


def test_with_a_proxy_the_binding_goes_through_it() -> None:
    async def body(stub: Stub, url: str) -> None:
        client = KubeClient("http://api.example:6443", proxy=url)  # the stub plays the proxy
        await client.bind("ns", "p1", "u", "g2")
        await client.close()

    stub = run(created, body)
    assert stub.requests[0].line == "POST http://api.example:6443/api/v1/namespaces/ns/pods/p1/binding HTTP/1.1"


def test_only_http_urls_of_a_server() -> None:
    with pytest.raises(ValueError, match="not an http"):
        ApiConnections("unix:///var/run/api.sock", None, 5.0, {})


def test_a_client_used_again_under_a_new_event_loop_connects_again(fake: FakeAPIServer) -> None:
    """The CLI and tests run one asyncio.run after another: a connection of a closed loop is not reused."""
    client = KubeClient(fake.url)
    for name in ("p1", "p2"):
        pod = fake.add(pod_obj(name, gpus=1))
        asyncio.run(client.bind("default", name, pod["metadata"]["uid"], "g1"))
    assert [b["metadata"]["name"] for b in fake.bindings] == ["p1", "p2"]
