"""HTTP routes: the extender verbs on hot paths, and the operator surface.

Hot routes read the raw body and return prebuilt bytes: FastAPI's request validation and response
machinery would cost 10-30 ms on a 5,000-node answer and turn bad input into a 422 that
kube-scheduler reports only as "code 422". Extender verbs always answer 200, with the reason in
``Error``.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from app import wire
from app.debug import debug_view
from app.service import ExtenderService

__all__ = ["BodyTooLarge", "create_app", "read_body"]

log = logging.getLogger("kube_gpu_extender.server")
JSON = "application/json"


class BodyTooLarge(Exception):
    pass


async def read_body(request: Request, limit: int) -> bytes:
    """Read at most ``limit`` bytes; refuse a larger body before (or while) reading it."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise BodyTooLarge(f"request body of {length} bytes exceeds the limit of {limit} bytes")
    chunks = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"request body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def create_app(
    service: ExtenderService,
    *,
    lifespan_hooks: tuple[Callable[[], Awaitable[None]], Callable[[], Awaitable[None]]] | None = None,
) -> FastAPI:
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
    config = service.config
    prefix = config.server.pathPrefix
    limit = config.server.maxRequestBytes
    metrics = service.metrics

    async def verb(
        request: Request, name: str, handle: Callable[[bytes], Awaitable[Any]], on_error: Callable[[str], Any]
    ) -> Response:
        started = time.perf_counter()
        try:
            body = await read_body(request, limit)
            result = await handle(body)
        except BodyTooLarge as exc:
            metrics.results.labels(name, "too-large").inc()
            result = on_error(str(exc))
        except Exception as exc:  # the service must answer, whatever happened
            log.exception("%s failed", name)
            metrics.results.labels(name, "internal-error").inc()
            result = on_error(f"internal error in the GPU extender: {type(exc).__name__}: {exc}")
        payload = wire.encode(result)
        metrics.request_seconds.labels(name).observe(time.perf_counter() - started)
        return Response(payload, media_type=JSON)

    async def sync(fn: Callable[[bytes], Any], body: bytes) -> Any:
        return fn(body)

    @app.post(f"{prefix}/filter", summary="ExtenderArgs -> ExtenderFilterResult")
    async def filter_(request: Request) -> Response:
        return await verb(request, "filter", lambda b: sync(service.filter, b), lambda e: wire.filter_result(error=e))

    @app.post(f"{prefix}/prioritize", summary="ExtenderArgs -> HostPriorityList (0..10)")
    async def prioritize(request: Request) -> Response:
        return await verb(request, "prioritize", lambda b: sync(service.prioritize, b), lambda e: [])

    @app.post(f"{prefix}/prioritize/{{plugin}}", summary="One plugin's HostPriorityList (0..10)")
    async def prioritize_plugin(plugin: str, request: Request) -> Response:
        if plugin not in service.profile.scorer_names:
            metrics.results.labels("prioritize", "unknown-plugin").inc()
            return Response(b"[]", media_type=JSON)
        return await verb(
            request, "prioritize", lambda b: sync(lambda x: service.prioritize(x, plugin), b), lambda e: []
        )

    @app.post(f"{prefix}/preempt", summary="ExtenderPreemptionArgs -> ExtenderPreemptionResult")
    async def preempt(request: Request) -> Response:
        return await verb(
            request,
            "preempt",
            lambda b: sync(service.preempt, b),
            lambda e: {"NodeNameToMetaVictims": {}, "Error": e},
        )

    @app.post(f"{prefix}/bind", summary="ExtenderBindingArgs -> ExtenderBindingResult")
    async def bind(request: Request) -> Response:
        return await verb(request, "bind", service.bind, lambda e: {"Error": e})

    @app.get("/healthz", summary="The process is alive")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", summary="200 once the cache has synced and the watches are fresh")
    async def readyz() -> JSONResponse:
        reason = service.not_ready_reason()
        if reason:
            return JSONResponse({"ready": False, "reason": reason}, status_code=503)
        return JSONResponse({"ready": True})

    @app.get("/metrics", summary="Prometheus metrics")
    async def metrics_() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/debug", summary="Cache freshness, per-node view, assume ledger, config, recent decisions")
    async def debug(node: str | None = None, nodes: bool = True, decisions: int = 50) -> Response:
        view = debug_view(service, node=node, include_nodes=nodes, decisions=decisions)
        return Response(wire.encode(view), media_type=JSON)

    @app.post("/debug/explain", summary="Per node: filter verdict, raw plugin scores and the final score")
    async def explain(request: Request) -> Response:
        try:
            body = await read_body(request, limit)
            return Response(wire.encode(service.explain(body)), media_type=JSON)
        except BodyTooLarge as exc:
            return JSONResponse({"error": str(exc)}, status_code=413)
        except wire.WireError as exc:
            return JSONResponse({"error": f"invalid request: {exc}"}, status_code=400)

    return app
