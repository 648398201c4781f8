"""Log levels: at info only state changes (binds, watch synced, configuration), never one line per
request; at debug the API client's requests and the filter/prioritize decisions too."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from app.config import ServerConfig
from app.http.serving import build_server
from app.operator.logs import PER_REQUEST_LOGGERS, TRACE_LOGGERS, configure_logging
from tests.app.apiharness import SOURCES, Harness, eventually
from tests.conftest import bind_body, filter_body, node_obj, pod_obj
from tests.fakeapi import FakeAPIServer

REQUESTS = 5  # filter + prioritize rounds: per-request lines would grow with it


@pytest.fixture
def configured() -> Iterator[Callable[[str], io.StringIO]]:
    """``configure_logging`` as ``serve`` calls it, into a buffer; the process's logging restored after."""
    root = logging.getLogger()
    saved_root = root.handlers[:], root.level
    touched = [logging.getLogger(name) for name in (*PER_REQUEST_LOGGERS, *TRACE_LOGGERS)]
    saved = [(logger.level, logger.filters[:]) for logger in touched]
    flags = ("_srcfile", "logThreads", "logProcesses", "logMultiprocessing")
    saved_flags = {flag: getattr(logging, flag) for flag in flags}

    def configure(level: str) -> io.StringIO:
        stream = io.StringIO()
        configure_logging(level, "json", stream=stream)
        return stream

    yield configure
    root.handlers[:], _ = saved_root
    root.setLevel(saved_root[1])
    for logger, (level, filters) in zip(touched, saved, strict=True):
        logger.setLevel(level)
        logger.filters[:] = filters
    for flag, value in saved_flags.items():
        setattr(logging, flag, value)


def exercise(fake: FakeAPIServer) -> None:
    """Sync from the fake API server, filter and prioritize a pod REQUESTS times, bind it."""
    fake.add(node_obj("g1", gpus=8))
    fake.add(node_obj("g2", gpus=8))
    pod = fake.add(pod_obj("train", gpus=2))

    async def body(h: Harness) -> None:
        for _ in range(REQUESTS):
            assert (await h.http.post("/filter", content=filter_body(pod, ["g1", "g2"]))).json()["Error"] == ""
            assert len((await h.http.post("/prioritize", content=filter_body(pod, ["g1", "g2"]))).json()) == 2
        assert (await h.http.post("/bind", content=bind_body(pod, "g1"))).json() == {"Error": ""}
        await h.settled("the bind confirmed by the watch")

    h = Harness(fake)
    asyncio.run(h.run(body, synced=True))


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_info_shows_state_changes_only(fake: FakeAPIServer, configured: Callable[[str], io.StringIO]) -> None:
    stream = configured("info")
    exercise(fake)
    logged = lines(stream)
    assert {line["level"] for line in logged} == {"info"}
    reflector = [line["msg"] for line in logged if line["logger"] == "kube_gpu_extender.reflector"]
    # The optional DeviceTaintRule API is not served by the fake API server: said once, at info.
    (not_served,) = [m for m in reflector if m.startswith("devicetaintrules:")]
    assert "not served" in not_served
    synced = [m for m in reflector if m != not_served]
    assert sorted(m.split(":")[0] for m in synced) == sorted(
        ["nodes", "pods", "deviceclasses", "resourceclaims", "resourceslices"]
    )
    assert all(": synced, " in m for m in synced), synced
    # Everything else: the bind, once, with its decision; no API request, no filter or prioritize.
    rest = [line for line in logged if line["logger"] != "kube_gpu_extender.reflector"]
    assert [(line["logger"], line["msg"]) for line in rest] == [
        ("kube_gpu_extender.decisions", "bound default/train to node g1")
    ]
    assert rest[0]["decision"]["verb"] == "bind" and rest[0]["decision"]["outcome"] == "bound"


def test_debug_adds_the_per_request_lines(fake: FakeAPIServer, configured: Callable[[str], io.StringIO]) -> None:
    stream = configured("debug")
    exercise(fake)
    logged = lines(stream)
    requests = [line for line in logged if line["logger"] == "kube_gpu_extender.api"]
    # The API client's requests (list, watch, Binding), each at debug.
    assert requests and {line["level"] for line in requests} == {"debug"}
    messages = [line["msg"] for line in requests]
    assert any(m.startswith("HTTP Request: GET http://127.0.0.1:") and "/api/v1/pods?" in m for m in messages)
    assert any("POST http://127.0.0.1:" in m and "/pods/train/binding" in m for m in messages)
    decisions = [line["decision"] for line in logged if line["logger"] == "kube_gpu_extender.decisions"]
    assert [d["verb"] for d in decisions] == ["filter", "prioritize"] * REQUESTS + ["bind"]
    assert not [line for line in logged if line["logger"].startswith("httpcore")]  # the transport trace stays off
    bound = [line for line in logged if line["msg"] == "bound default/train to node g1"]
    assert [line["level"] for line in bound] == ["info"]


def test_a_record_skips_the_caller_thread_and_process_lookups(configured: Callable[[str], io.StringIO]) -> None:
    """Neither format shows them, and a bind writes a record: they are not looked up (the JSON line
    keeps every field it shows)."""
    stream = configured("info")
    seen: list[logging.LogRecord] = []
    handler = logging.getLogger().handlers[0]
    handler.addFilter(lambda record: seen.append(record) or True)
    logging.getLogger("kube_gpu_extender.test").info("bound %s", "p", extra={"decision": {"verb": "bind"}})
    (record,) = seen
    assert record.lineno == 0 and record.funcName == "(unknown function)"  # no caller looked up
    assert record.threadName is None and record.processName is None
    line = json.loads(stream.getvalue())
    assert line["msg"] == "bound p" and line["level"] == "info" and line["decision"] == {"verb": "bind"}
    assert line["logger"] == "kube_gpu_extender.test" and line["ts"].endswith("Z")


def test_uvicorn_access_log_is_off() -> None:
    """The extender's own server never logs a line per request (kube-scheduler calls it per pod)."""
    server = build_server(lambda scope, receive, send: None, ServerConfig(), "127.0.0.1", 0)  # type: ignore[arg-type,return-value]
    assert server.config.access_log is False


def test_watch_broken_once_then_restored(fake: FakeAPIServer, caplog: pytest.LogCaptureFixture) -> None:
    """An API server down at start: one WARNING per watch (its retries at debug), then synced and restored."""
    port = fake.port
    fake.stop()

    async def body(h: Harness) -> None:
        await eventually(lambda: all(h.cache.source(s).restarts >= 3 for s in SOURCES), "retries while down")
        await asyncio.to_thread(fake.start, port)
        await eventually(lambda: all(h.cache.source(s).connected for s in SOURCES), "watches open")

    with caplog.at_level(logging.DEBUG, logger="kube_gpu_extender.reflector"):
        asyncio.run(Harness(fake).run(body))
    for source in SOURCES:
        records = [r for r in caplog.records if r.getMessage().startswith(f"{source}: ")]
        warnings = [r for r in records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "watch interrupted" in warnings[0].getMessage()
        retries = [r for r in records if r.levelno == logging.DEBUG]
        assert len(retries) >= 2 and all(r.getMessage() == warnings[0].getMessage() for r in retries)
        infos = [r.getMessage() for r in records if r.levelno == logging.INFO]
        assert len(infos) == 2, infos
        assert infos[0].startswith(f"{source}: synced, 0 objects at resourceVersion ")
        assert infos[1].startswith(f"{source}: watch restored after ")
