"""The HTTP surface: bad input never becomes a 5xx or a 422, extender verbs always answer 200."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import bind_body, filter_body, make_service, node_obj, pod_obj

VERBS = ["/filter", "/prioritize", "/bind", "/preempt"]


@pytest.fixture
def client(client_for: Any) -> Any:
    service = make_service(
        [node_obj("g1", gpus=4), node_obj("c1", gpus=None)], config={"server": {"maxRequestBytes": 4096}}
    )
    return client_for(service)


BAD_BODIES = [
    b"",
    b"{bad",
    b"[]",
    b"null",
    b'"text"',
    b"{}",
    b'{"Pod": null, "NodeNames": ["g1"]}',
    b'{"Pod": [], "NodeNames": ["g1"]}',
    b'{"Pod": {"metadata": {}}, "NodeNames": ["g1"]}',
    b'{"Pod": {"metadata": {"name": "p"}}, "NodeNames": "g1"}',
    b'{"Pod": {"metadata": {"name": "p"}, "spec": {"containers": [{"resources": {"requests": {"cpu": "NaN"}}}]}},'
    b' "NodeNames": ["g1"]}',
    b'{"Pod": {"metadata": {"name": "p"}, "spec": {"containers": "x"}}, "NodeNames": ["g1"]}',
    b'{"Pod": {"metadata": {"name": "p"}, "spec": {}}, "Nodes": {"items": [{"metadata": {}}]}}',
    b'{"PodName": 3}',
    b'{"Pod": {"metadata": {"name": "p"}, "spec": {}}, "NodeNameToMetaVictims": {"g1": {"Pods": [{}]}}}',
    b"\xff\xfe",
    # Found by tests/app/test_fuzz.py: a status or resourceClaimStatuses of the wrong type crashed pod parsing.
    b'{"Pod": {"metadata": {"name": "p"}, "spec": {}, "status": [1]}, "NodeNames": ["g1"]}',
    b'{"Pod": {"metadata": {"name": "p"}, "spec": {"resourceClaims": [{"name": "c", "resourceClaimTemplateName":'
    b' "t"}]}, "status": {"resourceClaimStatuses": 5}}, "NodeNames": ["g1"]}',
]


@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize("body", BAD_BODIES)
def test_bad_bodies_answer_200_with_a_reason(client: Any, verb: str, body: bytes) -> None:
    response = client.post(verb, content=body)
    assert response.status_code == 200
    answer = response.json()
    assert "internal error" not in str(answer)  # refused as bad input, not caught as a crash
    if verb == "/prioritize":
        assert answer == []  # HostPriorityList has no Error; kube-scheduler ignores prioritize failures
    elif verb == "/preempt":
        assert answer["NodeNameToMetaVictims"] == {}
        assert answer["Error"]
    else:
        assert answer["Error"], body
        assert len(answer["Error"]) < 300


def test_filter_error_names_the_problem(client: Any) -> None:
    assert "malformed JSON" in client.post("/filter", content=b"{bad").json()["Error"]
    assert "Pod: missing" in client.post("/filter", content=b'{"NodeNames": []}').json()["Error"]
    body = {"Pod": pod_obj("p") | {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1K"}}}]}}}
    body["NodeNames"] = ["g1"]
    error = client.post("/filter", content=json.dumps(body).encode()).json()["Error"]
    assert "container 'c' requests[cpu]" in error and "'1K'" in error


@pytest.mark.parametrize("verb", [*VERBS, "/debug/explain"])
def test_body_over_limit_is_refused(client: Any, verb: str) -> None:
    body = filter_body(pod_obj("p"), ["g1"] * 1000)
    assert len(body) > 4096
    response = client.post(verb, content=body)
    if verb == "/debug/explain":
        assert response.status_code == 413
        assert "exceeds the limit of 4096 bytes" in response.json()["error"]
    elif verb == "/prioritize":
        assert response.status_code == 200 and response.json() == []
    else:
        assert response.status_code == 200
        assert "exceeds the limit of 4096 bytes" in response.json()["Error"]


def test_body_over_limit_without_content_length_is_refused(client: Any) -> None:
    def chunks() -> Any:
        for _ in range(10):
            yield b" " * 1000

    response = client.post("/filter", content=chunks())
    assert "exceeds the limit" in response.json()["Error"]


def test_lowercase_keys_are_accepted_and_go_names_answered(client: Any) -> None:
    body = json.dumps({"pod": pod_obj("p", gpus=1), "nodenames": ["g1", "c1"]}).encode()
    answer = client.post("/filter", content=body).json()
    assert answer == {
        "Nodes": None,
        "NodeNames": ["g1"],
        "FailedNodes": {},
        "FailedAndUnresolvableNodes": {"c1": "Insufficient nvidia.com/gpu"},
        "Error": "",
    }


def test_unknown_and_duplicate_node_names(client: Any) -> None:
    answer = client.post("/filter", content=filter_body(pod_obj("p", gpus=1), ["g1", "g1", "ghost"])).json()
    assert answer["NodeNames"] == ["g1"]
    assert answer["FailedAndUnresolvableNodes"] == {"ghost": "node(s) unknown to the GPU extender"}
    scores = client.post("/prioritize", content=filter_body(pod_obj("p", gpus=1), ["g1", "g1", "ghost"])).json()
    assert [s["Host"] for s in scores] == ["g1"]  # ghost scores 0: left out, as kube-scheduler counts it


def test_empty_node_list(client: Any) -> None:
    answer = client.post("/filter", content=filter_body(pod_obj("p"), [])).json()
    assert answer["NodeNames"] == [] and answer["Error"] == ""
    assert client.post("/prioritize", content=filter_body(pod_obj("p"), [])).json() == []


def test_bind_unknown_pod(client: Any) -> None:
    error = client.post("/bind", content=bind_body(pod_obj("stranger"), "g1")).json()["Error"]
    assert "default/stranger" in error and "unknown to the extender" in error


def test_prioritize_single_plugin_route(client: Any) -> None:
    body = filter_body(pod_obj("p", cpu="1", memory="1Gi"), ["g1", "c1"])
    sra = client.post("/prioritize/ScarceResourceAvoidance", content=body).json()
    # A CPU pod: c1 offers no scarce type (100 -> 10); g1 offers {nvidia.com/gpu} beyond cpu/memory (0 -> 0).
    assert sra == [{"Host": "c1", "Score": 10}]  # g1's 0 is left out
    assert client.post("/prioritize/NoSuchPlugin", content=body).json() == []


def test_operator_endpoints(client: Any) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"ready": True, "detail": "ready"}
    client.post("/filter", content=filter_body(pod_obj("p", gpus=1), ["g1", "c1"]))
    metrics = client.get("/metrics").text
    assert 'kube_gpu_extender_request_duration_seconds_count{verb="filter"} 1.0' in metrics
    assert 'kube_gpu_extender_filter_failures_total{reason="Insufficient nvidia.com/gpu"} 1.0' in metrics
    assert 'kube_gpu_extender_cache_objects{kind="nodes"} 2.0' in metrics
    debug = client.get("/debug").json()
    assert debug["ready"] is True
    assert debug["nodes"]["g1"]["allocatable"]["nvidia.com/gpu"] == 4
    assert debug["decisions"][-1]["verb"] == "filter"
    assert debug["config"]["managedResources"] == ["nvidia.com/gpu"]
    one = client.get("/debug?node=g1").json()
    assert (one["name"], one["allocatable"], one["assumed"]) == ("g1", debug["nodes"]["g1"]["allocatable"], [])
    assert "decisions" not in one and "nodes" not in one
    missing = client.get("/debug?node=nope")
    assert (missing.status_code, missing.json()) == (404, {"error": "node nope is not in the cache"})
    assert client.post("/debug/explain", content=b"{bad").status_code == 400
    assert client.get("/no/such/path").status_code == 404


def test_path_prefix(client_for: Any) -> None:
    client = client_for(make_service([node_obj("g1")], config={"server": {"pathPrefix": "/scheduler/"}}))
    answer = client.post("/scheduler/filter", content=filter_body(pod_obj("p", gpus=1), ["g1"])).json()
    assert answer["NodeNames"] == ["g1"]
    assert client.post("/filter", content=filter_body(pod_obj("p"), ["g1"])).status_code == 404


def test_not_ready_fails_closed_by_default(client_for: Any) -> None:
    client = client_for(make_service([node_obj("g1")], synced=False))
    assert client.get("/readyz").status_code == 503
    answer = client.post("/filter", content=filter_body(pod_obj("p", gpus=1), ["g1"])).json()
    missing = "nodes, pods, deviceclasses, resourceclaims, resourceslices"
    assert answer["Error"] == f"GPU extender not ready: {missing} not synced yet"
    assert client.post("/prioritize", content=filter_body(pod_obj("p", gpus=1), ["g1"])).json() == []


def test_not_ready_pass_all_policy(client_for: Any) -> None:
    service = make_service([], synced=False, config={"cache": {"notReadyPolicy": "PassAll"}})
    client = client_for(service)
    answer = client.post("/filter", content=filter_body(pod_obj("p", gpus=100), ["a", "b", "a"])).json()
    assert answer["NodeNames"] == ["a", "b"] and answer["Error"] == ""


def test_internal_error_still_answers_200(client_for: Any) -> None:
    service = make_service([node_obj("g1")])

    def boom(body: bytes) -> Any:
        raise RuntimeError("kaboom")

    service._filter = boom  # type: ignore[method-assign]
    client = client_for(service)
    answer = client.post("/filter", content=filter_body(pod_obj("p"), ["g1"])).json()
    assert answer["Error"] == "internal error in the GPU extender: RuntimeError: kaboom"
    assert answer["NodeNames"] is None


def test_concurrent_filter_and_bind_over_http_never_overcommit() -> None:
    """Interleaved filter/bind requests for 60 pods racing for one 8-GPU node, through the ASGI app."""
    import asyncio

    import httpx

    from app.http.server import create_app

    service = make_service([node_obj("g1", gpus=8)])
    app = create_app(service)
    pods = [pod_obj(f"p{i}", gpus=1 + i % 2) for i in range(60)]

    async def schedule(client: httpx.AsyncClient, pod: dict[str, Any]) -> bool:
        answer = (await client.post("/filter", content=filter_body(pod, ["g1"]))).json()
        if answer["NodeNames"] != ["g1"]:
            return False
        return (await client.post("/bind", content=bind_body(pod, "g1"))).json() == {"Error": ""}

    async def run() -> list[bool]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://extender") as client:
            return await asyncio.gather(*(schedule(client, pod) for pod in pods))

    bound = asyncio.run(run())
    gpus = sum(1 + i % 2 for i, ok in enumerate(bound) if ok)
    assert gpus == 8  # every GPU handed out once: some pods lost the race and got an Error instead
    assert service.cache.usage("g1").requested["nvidia.com/gpu"] == 8
    service.cache.check_invariants()


def test_an_endless_chunked_body_is_cut_at_the_limit() -> None:
    """No Content-Length: reading stops at the first chunk past the limit, the rest is never pulled."""
    import asyncio

    from app.http.server import BodyTooLarge, _receive_body

    pulled = 0

    async def receive() -> dict[str, Any]:
        nonlocal pulled
        pulled += 1
        return {"type": "http.request", "body": b" " * 1000, "more_body": True}

    with pytest.raises(BodyTooLarge, match="exceeds the limit of 4096 bytes"):
        asyncio.run(_receive_body({"headers": [(b"transfer-encoding", b"chunked")]}, receive, 4096))
    assert pulled == 5  # 5 x 1000 bytes is the first total over 4096


def test_chunked_body_over_the_limit_through_a_real_server() -> None:
    import socket

    from app.http.server import create_app
    from app.http.serving import build_server
    from tests.app.serverutil import running

    service = make_service([node_obj("g1", gpus=4)], config={"server": {"maxRequestBytes": 4096}})
    with running(build_server(create_app(service), service.config.server, "127.0.0.1", 0)) as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            sock.sendall(b"POST /filter HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
            for _ in range(10):
                sock.sendall(b"3e8\r\n" + b" " * 1000 + b"\r\n")
            sock.sendall(b"0\r\n\r\n")
            response = b""
            while b"exceeds" not in response:
                chunk = sock.recv(65536)
                assert chunk, f"connection closed without the refusal: {response!r}"
                response += chunk
        assert response.startswith(b"HTTP/1.1 200")
        assert b"request body exceeds the limit of 4096 bytes" in response


@pytest.mark.parametrize("verb", VERBS)
def test_verb_answers_carry_the_handler_time_as_server_timing(client: Any, verb: str) -> None:
    """``Server-Timing: extender;dur=<ms>``: the server's share of the round trip, for benchmarks."""
    import re

    response = client.post(verb, content=filter_body(pod_obj("p", gpus=1), ["g1"]))
    match = re.fullmatch(r"extender;dur=(\d+\.\d{3}), read;dur=(\d+\.\d{3})", response.headers["server-timing"])
    assert response.status_code == 200 and match is not None
    assert 0 <= float(match[2]) <= float(match[1]) < 60_000 and float(match[1]) > 0
