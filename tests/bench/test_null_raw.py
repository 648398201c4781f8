"""bench.null_raw answers /filter with the first candidate and /prioritize with zeros, as the aiohttp
null extender does (its /bind needs an API server: bench.throughput's extender-null-raw phase)."""

from __future__ import annotations

import asyncio
import http.client
import json
import urllib.parse
from collections.abc import Iterator
from typing import Any, cast

import pytest

from app.cluster.reflector import pod_resource
from bench import null_raw
from bench.null_raw import ApiConnections, NullProtocol
from tests.bench.protocol_server import serving


@pytest.fixture
def port() -> Iterator[int]:
    api = cast(ApiConnections, None)  # no /bind here
    with serving(lambda: NullProtocol(api)) as port:
        yield port


def _post(connection: http.client.HTTPConnection, path: str, body: dict[str, Any]) -> Any:
    connection.request("POST", path, body=json.dumps(body).encode())
    response = connection.getresponse()
    assert response.status == 200
    return json.loads(response.read())


def test_filter_passes_the_first_candidate_and_prioritize_scores_zero(port: int) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    args = {"Pod": {}, "Nodes": None, "NodeNames": ["b", "a", "c"]}
    try:
        answer = _post(connection, "/filter", args)
        assert answer["NodeNames"] == ["b"] and answer["Error"] == ""
        assert _post(connection, "/prioritize", args) == [{"Host": n, "Score": 0} for n in ("b", "a", "c")]
    finally:
        connection.close()


def test_packing_filter_passes_the_lowest_named_candidate() -> None:
    api = cast(ApiConnections, None)
    with serving(lambda: NullProtocol(api, pack=True)) as port:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            answer = _post(connection, "/filter", {"Pod": {}, "Nodes": None, "NodeNames": ["n-2", "n-10", "n-1"]})
            assert answer["NodeNames"] == ["n-1"] and answer["Error"] == ""
            assert _post(connection, "/filter", {"Pod": {}, "Nodes": None, "NodeNames": []})["NodeNames"] == []
        finally:
            connection.close()


def test_a_burning_filter_spends_its_cpu_and_answers_the_same_before_or_after() -> None:
    import time

    start = time.thread_time_ns()
    null_raw.burn(3000)
    assert time.thread_time_ns() - start >= 3_000_000
    api = cast(ApiConnections, None)
    for after in (False, True):
        with serving(lambda after=after: NullProtocol(api, burn_us=200, burn_after=after)) as port:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            try:
                answer = _post(connection, "/filter", {"Pod": {}, "Nodes": None, "NodeNames": ["b", "a"]})
                assert answer["NodeNames"] == ["b"] and answer["Error"] == ""
            finally:
                connection.close()


def test_a_waiting_filter_holds_its_answer_without_spending_cpu() -> None:
    import time

    wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
    null_raw.wait(20_000)
    assert time.perf_counter_ns() - wall >= 20_000_000
    assert time.thread_time_ns() - cpu < 10_000_000  # a busy wait would spend the whole 20 ms
    api = cast(ApiConnections, None)
    with serving(lambda: NullProtocol(api, wait_us=20_000)) as port:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            started = time.perf_counter_ns()
            answer = _post(connection, "/filter", {"Pod": {}, "Nodes": None, "NodeNames": ["b", "a"]})
            assert time.perf_counter_ns() - started >= 20_000_000
            assert answer["NodeNames"] == ["b"] and answer["Error"] == ""
        finally:
            connection.close()


def test_the_pod_watch_lists_then_watches_as_the_extender_does_and_opens_again_when_the_server_ends_it() -> None:
    async def run() -> tuple[list[bytes], int]:
        requests: list[bytes] = []
        reconnected = asyncio.Event()
        listed = json.dumps({"kind": "PodList", "metadata": {"resourceVersion": "42"}, "items": []}).encode()

        async def api(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while True:  # one connection may carry several lists (kept alive)
                request = await reader.readuntil(b"\r\n\r\n")
                requests.append(request)
                if b"watch=1" not in request:
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(listed), listed))
                    continue
                if sum(b"watch=1" in r for r in requests) == 2:
                    reconnected.set()
                    return
                writer.write(b"HTTP/1.1 200 OK\r\n\r\n" + b"x" * 1000)  # then the server's timeout ends it
                await writer.drain()
                writer.close()
                return

        server = await asyncio.start_server(api, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        received = [0]
        connections = ApiConnections("127.0.0.1", port, None, "Bearer t")
        watcher = asyncio.create_task(null_raw.watch_pods(connections, received))
        await asyncio.wait_for(reconnected.wait(), 10)
        watcher.cancel()
        server.close()
        return requests, received[0]

    requests, received = asyncio.run(run())
    assert received == len(b"HTTP/1.1 200 OK\r\n\r\n") + 1000
    kinds = ["watch" if b"watch=1" in r else "list" for r in requests]
    assert kinds == ["list", "watch", "list", "watch"]
    line, *headers = requests[1].decode().split("\r\n")
    method, target, _ = line.split(" ")
    path, _, query = target.partition("?")
    assert (method, path) == ("GET", pod_resource.path)
    params = urllib.parse.parse_qs(query)
    assert params["watch"] == ["1"] and params["resourceVersion"] == ["42"]
    assert params["fieldSelector"] == [pod_resource.field_selector]
    assert "Authorization: Bearer t" in headers and "Accept: application/json" in headers


def test_a_refused_or_failed_pod_watch_is_said_in_the_log(capsys: pytest.CaptureFixture[str]) -> None:
    async def run() -> None:
        refused = null_raw.PodWatch(b"GET", [0])
        refused.data_received(b"HTTP/1.1 403 Forbidden\r\n\r\n")
        failed = null_raw.PodWatch(b"GET", [0])
        failed.data_received(b"HTTP/1.1 200 OK\r\n\r\n")
        failed.data_received(b'fc\r\n{"type":"ERROR","object":{"kind":"Status","code":500}}\r\n')
        quiet = null_raw.PodWatch(b"GET", [0])
        quiet.data_received(b"HTTP/1.1 200 OK\r\n\r\n")
        quiet.data_received(b'{"type":"ADDED","object":{"kind":"Pod"}}\n')

    asyncio.run(run())
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("pod watch refused: b'HTTP/1.1 403")
    assert lines[1].startswith("pod watch ended by the API server") and "ERROR" in lines[1]
