"""The operator console: /debug (with its gangs), /debug/queues and /debug/explain as server-rendered
pages under /ui.

Same process, same data: each page is built from the functions behind the JSON endpoints and links
to them. Jinja2 renders with autoescape on, so names, labels and reasons from the cluster are text.
The pages only read; the explain form runs the same read as POST /debug/explain.

Handlers are ``async def`` on purpose: they then run on the event loop thread, between two awaits,
like the verbs, and never read the cache while a watch event changes it (FastAPI would run a plain
``def`` in a worker thread). The console is mounted on the FastAPI app behind ``ExtenderVerbs``, so
the verbs' hot path never reaches it.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlencode, urlsplit

import jinja2
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.staticfiles import StaticFiles

from app.operator.console_cluster import ClusterQuery, cluster_page
from app.operator.console_groups import GROUP_STATES, OUTCOMES, GroupsQuery, groups_page
from app.operator.console_views import (
    clock_time,
    decisions_view,
    detail_text,
    explain_view,
    health_view,
    parse_pod_text,
    pending_pods,
    queues_page,
    requests_text,
    version,
)

if TYPE_CHECKING:
    from app.service import ExtenderService

__all__ = ["CONSOLE_PREFIX", "ConsoleError", "cluster_context", "mount_console", "render"]

log = logging.getLogger("kube_gpu_extender.console")
CONSOLE_PREFIX = "/ui"
HERE = Path(__file__).resolve().parent
MAX_PAGE_SIZE = 500
DEFAULT_PAGE_SIZE = 50
MAX_EXPLAIN_ROWS = 300  # nodes listed on the explain page; the JSON endpoint has them all

_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(HERE / "templates"),
    autoescape=True,  # every template is HTML: cluster data is always escaped
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
_env.filters["clock"] = clock_time
_env.filters["detail"] = detail_text
_env.filters["requests"] = requests_text
_env.filters["pct"] = lambda v: f"{100 * v:.1f} %"
_env.filters["num"] = lambda v: "" if v is None else (f"{v:g}" if isinstance(v, float) else str(v))
_env.filters["plural"] = lambda count: "" if count == 1 else "s"  # "1 GPU node", "2 GPU nodes"


class ConsoleError(ValueError):
    """Bad input from the browser (a query parameter, a pasted pod): shown on the page, status 400."""


def render(template: str, status: int = 200, **context: Any) -> HTMLResponse:
    context.setdefault("error", "")
    context.setdefault("version", version())
    html = _env.get_template(template).render(prefix=CONSOLE_PREFIX, **context)
    return HTMLResponse(html, status_code=status)


def _int_param(params: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = params.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConsoleError(f"{name} must be a whole number, got {raw!r}") from None
    if not low <= value <= high:
        raise ConsoleError(f"{name} must be between {low} and {high}, got {value}")
    return value


def _choice_param(params: Mapping[str, str], name: str, choices: Collection[str]) -> str:
    raw = params.get(name, "").strip()
    if raw and raw not in choices:
        raise ConsoleError(f"{name} must be one of {', '.join(choices)}, got {raw!r}")
    return raw


def groups_query(params: Mapping[str, str]) -> GroupsQuery:
    return GroupsQuery(
        group=params.get("group", "").strip(),
        state=_choice_param(params, "state", GROUP_STATES),
        outcome=_choice_param(params, "outcome", OUTCOMES),
    )


def cluster_query(params: Mapping[str, str]) -> ClusterQuery:
    return ClusterQuery(
        name=params.get("name", "").strip(),
        label=params.get("label", "").strip(),
        model=params.get("model", "").strip(),
        page=_int_param(params, "page", 1, 1, 10**9),
        size=_int_param(params, "size", DEFAULT_PAGE_SIZE, 1, MAX_PAGE_SIZE),
    )


def _page_link(query: ClusterQuery, page: int) -> str:
    params = {"name": query.name, "label": query.label, "model": query.model, "page": page, "size": query.size}
    return f"{CONSOLE_PREFIX}/cluster?" + urlencode({k: v for k, v in params.items() if v not in ("", None)})


async def _read_form(request: Request, limit: int) -> dict[str, str]:
    """A url-encoded form body, refused past ``limit`` bytes (never buffered whole)."""
    size = 0
    chunks = []
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ConsoleError(f"the form exceeds the limit of {limit} bytes (server.maxRequestBytes)")
        chunks.append(chunk)
    try:
        fields = parse_qs(b"".join(chunks).decode("utf-8"), keep_blank_values=True)
    except UnicodeDecodeError:
        raise ConsoleError("the form is not UTF-8") from None
    return {k: v[0] for k, v in fields.items()}


def cross_site(request: Request) -> str:
    """Why this request must not run an explain, or "": a page of another site (one the operator has
    open while the console is port-forwarded, say) may not make the browser spend the extender's
    event loop. Browsers name the requesting site in Sec-Fetch-Site, and a form POST carries Origin."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return f"refused: an explain requested by another site (Sec-Fetch-Site: {site})"
    origin = request.headers.get("origin")
    if origin and origin != "null" and urlsplit(origin).netloc != request.headers.get("host", ""):
        return f"refused: an explain requested by another origin ({origin})"
    return ""


def _node_names(text: str) -> list[str]:
    return [n for n in text.replace(",", " ").split() if n]


def cluster_context(service: ExtenderService, params: Mapping[str, str]) -> dict[str, Any]:
    """What the Cluster page shows for these query parameters (bench.console times it with the render)."""
    query = cluster_query(params)
    started = time.perf_counter()
    result = cluster_page(service, query)
    return {
        "page": result,
        "prev_link": _page_link(query, result.page - 1) if result.page > 1 else "",
        "next_link": _page_link(query, result.page + 1) if result.page < result.pages else "",
        "built_ms": (time.perf_counter() - started) * 1000,
    }


def mount_console(app: FastAPI, service: ExtenderService) -> None:
    """Add the console's pages and assets to ``app`` (the FastAPI app behind the verbs)."""
    limit = service.config.server.maxRequestBytes
    app.mount(f"{CONSOLE_PREFIX}/static", StaticFiles(directory=HERE / "static"), name="console-static")

    def page(template: str, view: str, build: Any) -> Any:
        """A page: bad input renders the page's error box with 400; a failure renders it with 500."""

        async def handler(request: Request) -> Response:
            params = dict(request.query_params)
            refused = cross_site(request) if view == "explain" and params.get("pod") else ""
            if refused:
                return render("error.html", 403, current=view, error=refused)
            try:
                return render(template, current=view, params=params, **build(params))
            except ConsoleError as exc:
                return render("error.html", 400, current=view, error=str(exc))
            except Exception as exc:
                log.exception("console page %s failed", view)
                return render("error.html", 500, current=view, error=f"internal error: {type(exc).__name__}: {exc}")

        return handler

    @app.get("/", include_in_schema=False)
    async def root() -> RedirectResponse:
        return RedirectResponse(f"{CONSOLE_PREFIX}/", status_code=307)

    @app.get(CONSOLE_PREFIX, include_in_schema=False)
    @app.get(f"{CONSOLE_PREFIX}/", include_in_schema=False)
    async def home() -> RedirectResponse:
        return RedirectResponse(f"{CONSOLE_PREFIX}/cluster", status_code=307)

    def queues(params: Mapping[str, str]) -> dict[str, Any]:
        return queues_page(service)

    def decisions(params: Mapping[str, str]) -> dict[str, Any]:
        pod, node = params.get("pod", "").strip(), params.get("node", "").strip()
        rows, total = decisions_view(service, pod=pod, node=node)
        return {"rows": rows, "total": total, "pod": pod, "node": node}

    def health(params: Mapping[str, str]) -> dict[str, Any]:
        return health_view(service)

    def groups(params: Mapping[str, str]) -> dict[str, Any]:
        return groups_page(service, groups_query(params))

    def explain(params: Mapping[str, str]) -> dict[str, Any]:
        """GET: the form, or a pending pod of the cache explained (``?pod=<uid>``)."""
        pods, total = pending_pods(service)
        context: dict[str, Any] = {"pending": pods, "pending_total": total, "text": "", "nodes": "", "picked": ""}
        context["result"] = None
        uid = params.get("pod", "").strip()
        if uid:
            pod = service.cache.pods.get(uid)
            if pod is None:
                raise ConsoleError(f"no pod with uid {uid!r} in the cache (bound, deleted, or never seen)")
            names = _node_names(params.get("nodes", "")) or sorted(service.cache.nodes)
            context.update(_explained(service.explain_pod(pod, names)), nodes=params.get("nodes", ""), picked=uid)
        return context

    def _explained(result: dict[str, Any]) -> dict[str, Any]:
        rows = explain_view(service, result)
        return {
            "result": result,
            "rows": rows[:MAX_EXPLAIN_ROWS],
            "hidden_rows": max(0, len(rows) - MAX_EXPLAIN_ROWS),
            "passing": sum(r.passed for r in rows),
            "weights": {spec.plugin.name: spec.weight for spec in service.profile.scorers},
        }

    app.get(f"{CONSOLE_PREFIX}/cluster", include_in_schema=False)(
        page("cluster.html", "cluster", functools.partial(cluster_context, service))
    )
    app.get(f"{CONSOLE_PREFIX}/queues", include_in_schema=False)(page("queues.html", "queues", queues))
    app.get(f"{CONSOLE_PREFIX}/groups", include_in_schema=False)(page("groups.html", "groups", groups))
    app.get(f"{CONSOLE_PREFIX}/decisions", include_in_schema=False)(page("decisions.html", "decisions", decisions))
    app.get(f"{CONSOLE_PREFIX}/health", include_in_schema=False)(page("health.html", "health", health))
    app.get(f"{CONSOLE_PREFIX}/explain", include_in_schema=False)(page("explain.html", "explain", explain))

    @app.post(f"{CONSOLE_PREFIX}/explain", include_in_schema=False)
    async def explain_form(request: Request) -> Response:
        """The pasted pod explained over the given nodes, or every node of the cache."""
        pods, total = pending_pods(service)
        context: dict[str, Any] = {"pending": pods, "pending_total": total, "current": "explain", "params": {}}
        context.update(text="", nodes="", picked="", result=None)
        refused = cross_site(request)
        if refused:
            return render("explain.html", 403, error=refused, **context)
        try:
            form = await _read_form(request, limit)
            context.update(text=form.get("pod", ""), nodes=form.get("nodes", ""))
            pod, given = parse_pod_text(context["text"])
            names = _node_names(context["nodes"]) or given or sorted(service.cache.nodes)
            body = json.dumps({"Pod": pod, "NodeNames": names}).encode()
            context.update(_explained(service.explain(body)))  # what POST /debug/explain answers for this body
            return render("explain.html", **context)
        except ValueError as exc:  # ConsoleError, ExplainInputError and the wire's refusals
            return render("explain.html", 400, error=str(exc), **context)
        except Exception as exc:
            log.exception("console explain failed")
            return render("explain.html", 500, error=f"internal error: {type(exc).__name__}: {exc}", **context)
