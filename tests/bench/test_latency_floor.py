"""bench.latency_floor: the extender's answers sent back by path and Content-Length, on a kept-alive
connection, with nothing else done."""

from __future__ import annotations

import http.client
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.latency import Case, Options, measure_floor
from bench.latency_floor import FloorProtocol, answer_key, answers_table
from tests.bench.protocol_server import serving

FILTER_BODY = b'{"Pod":{},"Nodes":null,"NodeNames":["n1","n2"]}'
PRIORITIZE_BODY = b'{"Pod":{},"Nodes":null,"NodeNames":["n1","n2","n3"]}'
ANSWERS = {
    answer_key("/filter", len(FILTER_BODY)): b'{"NodeNames":["n1"],"Error":""}',
    answer_key("/prioritize", len(PRIORITIZE_BODY)): b'[{"Host":"n1","Score":3}]',
}


@pytest.fixture
def port() -> Iterator[int]:
    table = answers_table(ANSWERS)
    with serving(lambda: FloorProtocol(table)) as port:
        yield port


def test_each_request_gets_the_answer_kept_for_its_path_and_length(port: int) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        for path, body in (("/filter", FILTER_BODY), ("/prioritize", PRIORITIZE_BODY), ("/filter", FILTER_BODY)):
            connection.request("POST", path, body=body, headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            assert (response.status, response.read()) == (200, ANSWERS[answer_key(path, len(body))])
            assert response.getheader("content-type") == "application/json"
    finally:
        connection.close()


def test_an_unknown_request_is_a_404_and_the_connection_goes_on(port: int) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("POST", "/filter", body=FILTER_BODY + b" ")
        response = connection.getresponse()
        assert (response.status, response.read()) == (404, b"")
        connection.request("POST", "/filter", body=FILTER_BODY)
        assert connection.getresponse().read() == ANSWERS[answer_key("/filter", len(FILTER_BODY))]
    finally:
        connection.close()


def test_a_body_in_pieces_is_answered_once_complete(port: int) -> None:
    head = b"POST /prioritize HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(PRIORITIZE_BODY)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(head + PRIORITIZE_BODY[:10])
        sock.sendall(PRIORITIZE_BODY[10:])
        with sock.makefile("rb") as reader:
            assert reader.readline() == b"HTTP/1.1 200 OK\r\n"
            headers = {}
            while (line := reader.readline()) != b"\r\n":
                name, _, value = line.decode().partition(":")
                headers[name.lower()] = value.strip()
            assert (
                reader.read(int(headers["content-length"])) == ANSWERS[answer_key("/prioritize", len(PRIORITIZE_BODY))]
            )


def test_bench_latency_times_both_verbs_against_the_floor_in_its_own_process(tmp_path: Path) -> None:
    options = Options(requests=4, warmup=1, seed=1, ready_timeout=30, client="http.client", floor=True)
    bodies = [FILTER_BODY, PRIORITIZE_BODY]
    answers = {
        answer_key(f"/{verb}", len(body)): ANSWERS.get(answer_key(f"/{verb}", len(body)), b"{}")
        for verb in ("filter", "prioritize")
        for body in bodies
    }
    cases: list[Case] = [
        ("filter", bodies, lambda b: b.startswith(b'{"NodeNames"'), None),
        ("prioritize", bodies, lambda b: b.startswith(b"["), None),
    ]
    rows = measure_floor(answers, cases, "names", 2, options, tmp_path / "answers.msgpack")
    assert [(r.mode, r.verb, r.count) for r in rows] == [("names-floor", "filter", 4), ("names-floor", "prioritize", 4)]
    # The bodies alternate; each verb has its own answer for one of them and "{}" for the other.
    assert [r.errors for r in rows] == [2, 2]
    assert all(0 < r.p50_ms <= r.p99_ms <= r.max_ms for r in rows)
    assert not (tmp_path / "answers.msgpack").exists()
