"""bench.null_raw answers /filter with the first candidate and /prioritize with zeros, as the aiohttp
null extender does (its /bind needs an API server: bench.throughput's extender-null-raw phase)."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any, cast

import pytest

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
