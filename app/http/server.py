"""HTTP routes: the extender verbs on hot paths, and the operator surface.

Hot routes read the raw body and return prebuilt bytes: FastAPI's request validation and response
machinery would cost 10-30 ms on a 5,000-node answer and turn bad input into a 422 that
kube-scheduler reports only as "code 422". Extender verbs always answer 200, with the reason in
``Error``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.types import Receive, Scope, Send

from app.http import wire
from app.operator.console import mount_console
from app.operator.debug import debug_view, single_node_view
from app.service import ExtenderService
from fairshare.usage import queues_view

__all__ = ["BodyTooLarge", "ExtenderVerbs", "create_app"]

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


class ExtenderVerbs:
    """ASGI front for the extender verbs; everything else goes to the FastAPI app behind it.

    The verbs are kube-scheduler's hot path: reading the body from the ASGI channel and sending
    prebuilt bytes skips routing, request objects and response classes. They always answer 200
    with a well-formed result, whatever happens.
    """

    def __init__(self, service: ExtenderService, app: FastAPI) -> None:
        self.service = service
        self.app = app
        self.limit = service.config.server.maxRequestBytes
        prefix = service.config.server.pathPrefix
        filter_error = wire.filter_result
        self.routes: dict[str, tuple[str, Callable[[bytes], Awaitable[Any]], Callable[[str], Any]]] = {
            f"{prefix}/filter": ("filter", service.filter_caught_up, lambda e: filter_error(error=e)),
            f"{prefix}/prioritize": ("prioritize", _sync(service.prioritize), lambda e: []),
            f"{prefix}/preempt": (
                "preempt",
                _sync(service.preempt),
                lambda e: {"NodeNameToMetaVictims": {}, "Error": e},
            ),
            f"{prefix}/bind": ("bind", service.bind, lambda e: {"Error": e}),
        }
        for plugin in service.profile.scorer_names:
            handler = _sync(functools.partial(service.prioritize, plugin=plugin))
            self.routes[f"{prefix}/prioritize/{plugin}"] = ("prioritize", handler, lambda e: [])
        self.plugin_prefix = f"{prefix}/prioritize/"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            route = self.routes.get(scope["path"])
            if route is not None:
                await self._verb(scope, receive, send, *route)
                return
            if scope["path"].startswith(self.plugin_prefix):  # a plugin this profile does not run
                self.service.metrics.results.labels("prioritize", "unknown-plugin").inc()
                await _send_json(send, b"[]")
                return
        await self.app(scope, receive, send)

    async def _verb(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        name: str,
        handle: Callable[[bytes], Awaitable[Any]],
        on_error: Callable[[str], Any],
    ) -> None:
        metrics = self.service.metrics
        started = read = time.perf_counter()
        try:
            body = await _receive_body(scope, receive, self.limit)
            read = time.perf_counter()
            result = await handle(body)
        except BodyTooLarge as exc:
            metrics.results.labels(name, "too-large").inc()
            result = on_error(str(exc))
        except Exception as exc:  # the service must answer, whatever happened
            log.exception("%s failed", name)
            metrics.results.labels(name, "internal-error").inc()
            result = on_error(f"internal error in the GPU extender: {type(exc).__name__}: {exc}")
        payload = wire.encode(result)
        elapsed = time.perf_counter() - started
        # Server-Timing (W3C), for clients and benchmarks that want the server's share of a round trip
        # per request: the whole handler (body read through answer encoded), and reading the body.
        timing = b"extender;dur=%.3f, read;dur=%.3f" % (elapsed * 1000, (read - started) * 1000)
        await _send_json(send, payload, (b"server-timing", timing))
        metrics.request_seconds.labels(name).observe(elapsed)


def _sync(fn: Callable[[bytes], Any]) -> Callable[[bytes], Awaitable[Any]]:
    async def call(body: bytes) -> Any:
        return fn(body)

    return call


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


async def _send_json(send: Send, payload: bytes, *extra: tuple[bytes, bytes]) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()), *extra]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
