"""The fake API server's URL map: core/v1 Nodes, Pods and pods/binding, the resource.k8s.io/v1 DRA
kinds, Kueue's kinds (list and watch), and error bodies as v1 Status objects."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.fakeapi.kinds import DRA, KUEUE, KUEUE_KINDS, RESOURCES, APIError, json_response, status_body
from tests.fakeapi.streams import WatchStream

if TYPE_CHECKING:
    from tests.fakeapi.server import FakeAPIServer


def build_app(api: FakeAPIServer) -> Starlette:
    """The API paths the fake serves, to ``api``'s handlers (the Kueue group only with ``api.kueue``)."""

    async def nodes(request: Request) -> Response | WatchStream:
        return api._collection(request, "Node", None)

    async def all_pods(request: Request) -> Response | WatchStream:
        return api._collection(request, "Pod", None)

    async def ns_pods(request: Request) -> Response | WatchStream:
        return api._collection(request, "Pod", request.path_params["namespace"])

    async def node(request: Request) -> Response:
        return api._get_one("Node", request.path_params["name"], None)

    async def pod(request: Request) -> Response:
        return api._get_one("Pod", request.path_params["name"], request.path_params["namespace"])

    async def api_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, APIError)
        return json_response(exc.body, exc.code)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        message = "the server could not find the requested resource" if exc.status_code == 404 else exc.detail
        return json_response(status_body(exc.status_code, message), exc.status_code)

    async def server_error(request: Request, exc: Exception) -> Response:
        return json_response(status_body(500, f"internal error: {exc!r}"), 500)

    def collection(kind: str) -> Any:
        async def handle(request: Request) -> Response | WatchStream:
            return api._collection(request, kind, request.path_params.get("namespace"))

        return handle

    async def claim(request: Request) -> Response:
        name, namespace = request.path_params["name"], request.path_params["namespace"]
        if request.method == "PUT":
            return await api._put(request, "ResourceClaim", name, namespace, status=False)
        return api._get_one("ResourceClaim", name, namespace)

    async def claim_status(request: Request) -> Response:
        name, namespace = request.path_params["name"], request.path_params["namespace"]
        if request.method == "PUT":
            return await api._put(request, "ResourceClaim", name, namespace, status=True)
        return api._get_one("ResourceClaim", name, namespace)

    routes = [
        Route(f"{DRA}/deviceclasses", collection("DeviceClass")),
        Route(f"{DRA}/resourceslices", collection("ResourceSlice")),
        Route(f"{DRA}/resourceclaims", collection("ResourceClaim")),
        Route(f"{DRA}/namespaces/{{namespace}}/resourceclaims", collection("ResourceClaim")),
        Route(f"{DRA}/namespaces/{{namespace}}/resourceclaims/{{name}}", claim, methods=["GET", "PUT"]),
        Route(f"{DRA}/namespaces/{{namespace}}/resourceclaims/{{name}}/status", claim_status, methods=["GET", "PUT"]),
        Route("/api/v1/nodes", nodes),
        Route("/api/v1/nodes/{name}", node),
        Route("/api/v1/pods", all_pods),
        Route("/api/v1/namespaces/{namespace}/pods", ns_pods),
        Route("/api/v1/namespaces/{namespace}/pods/{name}", pod),
        Route("/api/v1/namespaces/{namespace}/pods/{name}/binding", api._bind, methods=["POST"]),
    ]
    if api.kueue:  # read-only: list and watch, cluster-wide and (LocalQueues) per namespace
        routes += [Route(f"{KUEUE}/{RESOURCES[kind]}", collection(kind)) for kind in KUEUE_KINDS]
        routes.append(Route(f"{KUEUE}/namespaces/{{namespace}}/localqueues", collection("LocalQueue")))
    handlers = {APIError: api_error, HTTPException: http_error, Exception: server_error}
    return Starlette(routes=routes, exception_handlers=handlers)
