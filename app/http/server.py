"""HTTP routes: the extender verbs on hot paths, and the operator surface.

Hot routes read the raw body and return prebuilt bytes: FastAPI's request validation and response
machinery would cost 10-30 ms on a 5,000-node answer and turn bad input into a 422 that
kube-scheduler reports only as "code 422". Extender verbs always answer 200, with the reason in
``Error``.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgspec
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.types import Receive, Scope, Send

from app.http import wire
from app.operator.console import mount_console
from app.operator.debug import debug_view, single_node_view
from app.service import ExtenderService
from fairshare.usage import queues_view

__all__ = ["BodyTooLarge", "ExtenderVerbs", "Verb", "create_app"]

log = logging.getLogger("kube_gpu_extender.server")
JSON = "application/json"


class BodyTooLarge(Exception):
    pass


def create_app(
    service: ExtenderService,
    *,
    lifespan_hooks: tuple[Callable[[], Awaitable[None]], Callable[[], Awaitable[None]]] | None = None,
) -> ExtenderVerbs:
    """Build the ASGI app. ``lifespan_hooks`` = (start, stop) for the watch tasks in cluster mode."""

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if lifespan_hooks:
            await lifespan_hooks[0]()
        try:
            yield
        finally:
            if lifespan_hooks:
                await lifespan_hooks[1]()

    app = FastAPI(
        title="kube-gpu-extender",
        version="0.1.0",
        summary="kube-scheduler extender for GPU clusters",
        lifespan=lifespan,
    )
    limit = service.config.server.maxRequestBytes
    metrics = service.metrics

    @app.get("/healthz", summary="The process is alive")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get(
        "/readyz",
        summary="200 once the cache has synced and the watches are fresh; the detail warns of pods bound "
        "without the extender's /bind",
    )
    async def readyz() -> JSONResponse:
        reason = service.not_ready_reason()
        if reason:
            return JSONResponse({"ready": False, "reason": reason}, status_code=503)
        return JSONResponse({"ready": True, "detail": service.ready_detail()})

    @app.get("/metrics", summary="Prometheus metrics")
    async def metrics_() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/debug", summary="Cache freshness, per-node view, assume ledger, config, recent decisions")
    async def debug(node: str | None = None, nodes: bool = True, decisions: int = 50) -> Response:
        if node is not None:
            shown = single_node_view(service, node)
            if shown is None:
                return JSONResponse({"error": f"node {node} is not in the cache"}, status_code=404)
            return Response(wire.encode_debug(shown), media_type=JSON)
        view = debug_view(service, include_nodes=nodes, decisions=decisions)
        return Response(wire.encode_debug(view), media_type=JSON)

    @app.get(
        "/debug/queues",
        summary="Quota tree (quotas, usage, borrowed, lendable, weighted and unweighted DRS), KAI fair shares, "
        "and the last queue decisions with reasons",
    )
    async def debug_queues() -> Response:
        view = service.fairness.view() if service.fairness is not None else queues_view(None)
        if service.kueue_source is not None:
            view["source"] = service.kueue_source.view()
        return Response(wire.encode_debug(view), media_type=JSON)

    @app.post("/debug/explain", summary="Per node: filter verdict, raw plugin scores and the final score")
    async def explain(request: Request) -> Response:
        try:
            body = await _receive_body(request.scope, request.receive, limit)
            return Response(wire.encode_debug(service.explain(body)), media_type=JSON)
        except BodyTooLarge as exc:
            return JSONResponse({"error": str(exc)}, status_code=413)
        except wire.WireError as exc:
            return JSONResponse({"error": f"invalid request: {exc}"}, status_code=400)

    mount_console(app, service)  # the operator pages under /ui, behind the verbs like every other route
    return ExtenderVerbs(service, app)


@dataclass(frozen=True)
class Verb:
    """One extender verb's route: its name (the metrics label), what answers a body (a result, or an
    awaitable of one when the answer must wait: a bind, a filter waiting for the cache), and the
    answer that carries an error instead."""

    name: str
    handle: Callable[[bytes], Any]
    on_error: Callable[[str], Any]


class ExtenderVerbs:
    """ASGI front for the extender verbs; everything else goes to the FastAPI app behind it.

    The verbs are kube-scheduler's hot path: reading the body from the ASGI channel and sending
    prebuilt bytes skips routing, request objects and response classes. They always answer 200
    with a well-formed result, whatever happens. The server's HTTP protocol (``app.http.verb_protocol``)
    answers the same routes without the ASGI layer, through ``route`` and ``answer``.
    """

    def __init__(self, service: ExtenderService, app: FastAPI) -> None:
        self.service = service
        self.app = app
        self.limit = service.config.server.maxRequestBytes
        prefix = service.config.server.pathPrefix
        filter_error = wire.filter_result
        self.routes: dict[str, Verb] = {
            f"{prefix}/filter": Verb("filter", service.filter_or_wait, lambda e: filter_error(error=e)),
            f"{prefix}/prioritize": Verb("prioritize", service.prioritize, lambda e: []),
            f"{prefix}/preempt": Verb("preempt", service.preempt, lambda e: {"NodeNameToMetaVictims": {}, "Error": e}),
            f"{prefix}/bind": Verb("bind", service.bind, lambda e: {"Error": e}),
        }
        for plugin in service.profile.scorer_names:
            handler = functools.partial(service.prioritize, plugin=plugin)
            self.routes[f"{prefix}/prioritize/{plugin}"] = Verb("prioritize", handler, lambda e: [])
        self.plugin_prefix = f"{prefix}/prioritize/"
        metrics = service.metrics
        self._seconds = {verb.name: metrics.request_seconds.labels(verb.name) for verb in self.routes.values()}
        self._unknown_plugin = metrics.results.labels("prioritize", "unknown-plugin")

    def route(self, path: str) -> Verb | None:
        """The verb a POST to ``path`` runs; a plugin this profile does not run answers ``[]``."""
        verb = self.routes.get(path)
        if verb is None and path.startswith(self.plugin_prefix):
            return Verb("prioritize", self._no_plugin, lambda e: [])
        return verb

    def _no_plugin(self, _: bytes) -> list[Any]:
        self._unknown_plugin.inc()
        return []

    def start(self, verb: Verb, body: bytes) -> Any:
        """The verb's result for ``body``, or an awaitable of it; an exception becomes its error answer."""
        try:
            return verb.handle(body)
        except Exception as exc:  # the service must answer, whatever happened
            return self.failed(verb, exc)

    def failed(self, verb: Verb, exc: Exception) -> Any:
        log.error("%s failed", verb.name, exc_info=exc)
        self.service.metrics.results.labels(verb.name, "internal-error").inc()
        return verb.on_error(f"internal error in the GPU extender: {type(exc).__name__}: {exc}")

    def too_large(self, verb: Verb, message: str) -> Any:
        self.service.metrics.results.labels(verb.name, "too-large").inc()
        return verb.on_error(message)

    def answer(self, verb: Verb, result: Any, started: float, read: float) -> tuple[bytes | memoryview, bytes]:
        """The answer's JSON and its Server-Timing header value (W3C: the whole handler, body read
        through answer encoded, and reading the body), for clients and benchmarks that want the
        server's share of a round trip; the verb's latency is observed. An answer the verb built as
        bytes already (``msgspec.Raw``, a long HostPriorityList) is sent as it is, not copied."""
        payload = memoryview(result) if isinstance(result, msgspec.Raw) else wire.encode(result)
        elapsed = time.perf_counter() - started
        self._seconds[verb.name].observe(elapsed)
        return payload, b"extender;dur=%.3f, read;dur=%.3f" % (elapsed * 1000, (read - started) * 1000)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            verb = self.route(scope["path"])
            if verb is not None:
                await self._verb(scope, receive, send, verb)
                return
        await self.app(scope, receive, send)

    async def _verb(self, scope: Scope, receive: Receive, send: Send, verb: Verb) -> None:
        started = read = time.perf_counter()
        try:
            body = await _receive_body(scope, receive, self.limit)
            read = time.perf_counter()
            result = self.start(verb, body)
            if inspect.isawaitable(result):
                result = await result
        except BodyTooLarge as exc:
            result = self.too_large(verb, str(exc))
        except Exception as exc:  # the service must answer, whatever happened
            result = self.failed(verb, exc)
        payload, timing = self.answer(verb, result, started, read)
        await _send_json(send, payload, (b"server-timing", timing))


async def _receive_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    """The request body, refused as soon as it is known to exceed ``limit`` (never buffered whole)."""
    for key, value in scope["headers"]:
        if key == b"content-length" and value.isdigit() and int(value) > limit:
            raise BodyTooLarge(f"request body of {int(value)} bytes exceeds the limit of {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"request body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def _send_json(send: Send, payload: bytes | memoryview, *extra: tuple[bytes, bytes]) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()), *extra]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": bytes(payload)})
