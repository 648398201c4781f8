"""A null scheduler extender, for ``bench.throughput --extra-phase extender-null`` (run by the bench).

The least any extender has to do behind deploy/kube-scheduler-config.yaml: /filter passes the first
candidate (so, like the shipped extender with one best node, kube-scheduler skips /prioritize) and
/bind POSTs the Binding to the API server with the project's API client. Nothing is cached, checked
or counted. The phase it serves measures what the extender protocol itself costs kube-scheduler and
the API server, so the shipped extender's figure can be read against what no extender could beat on
the same machine.

    python -m bench.null_extender --kubeconfig extender.kubeconfig --port 8888
"""

from __future__ import annotations

import argparse
from typing import Any

import msgspec
from aiohttp import web

from app.cluster.kube import ApiError, KubeClient

_args = msgspec.json.Decoder(dict[str, Any])
_encode = msgspec.json.encode
_FILTER_EMPTY = {"FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": ""}


def _filter_answer(body: bytes) -> bytes:
    names = _args.decode(body).get("NodeNames") or []
    return _encode({"NodeNames": names[:1], **_FILTER_EMPTY})


class NullExtender:
    def __init__(self, kubeconfig: str) -> None:
        self.kubeconfig = kubeconfig
        self.kube: KubeClient | None = None

    async def start(self, _: web.Application) -> None:
        # The project's own API client: the Binding POST costs what the shipped extender's does.
        self.kube = KubeClient.from_kubeconfig(self.kubeconfig)

    async def stop(self, _: web.Application) -> None:
        if self.kube is not None:
            await self.kube.close()

    async def filter(self, request: web.Request) -> web.Response:
        return web.Response(body=_filter_answer(await request.read()), content_type="application/json")

    async def prioritize(self, request: web.Request) -> web.Response:
        names = _args.decode(await request.read()).get("NodeNames") or []
        return web.json_response([{"Host": name, "Score": 0} for name in names])

    async def bind(self, request: web.Request) -> web.Response:
        args = _args.decode(await request.read())
        assert self.kube is not None
        try:
            await self.kube.bind(args["PodNamespace"], args["PodName"], args["PodUID"], args["Node"])
            error = ""
        except ApiError as exc:
            error = f"binding: {exc}"
        return web.Response(body=_encode({"Error": error}), content_type="application/json")

    @staticmethod
    async def ready(_: web.Request) -> web.Response:
        return web.Response(text="ok")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--port", type=int, default=8888)
    args = parser.parse_args()
    extender = NullExtender(args.kubeconfig)
    app = web.Application()
    app.on_startup.append(extender.start)
    app.on_cleanup.append(extender.stop)
    app.router.add_post("/filter", extender.filter)
    app.router.add_post("/prioritize", extender.prioritize)
    app.router.add_post("/bind", extender.bind)
    app.router.add_get("/readyz", extender.ready)
    web.run_app(app, host="127.0.0.1", port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
