"""A second null scheduler extender, as cheap as the protocol allows, for ``bench.throughput``'s
``extender-null-raw`` phase (run by the bench).

The same answers as ``bench.null_extender`` (/filter passes the first candidate, /bind POSTs the
Binding), built differently, to check that the floor the shipped extender is measured against is not
itself slow: no web framework (an ``asyncio.Protocol`` over httptools' C parser on uvloop, each answer
one prebuilt write) and no HTTP client library (the Binding is one write on a kept-alive TLS
connection, its answer read by httptools). It checks nothing and keeps nothing; a failure is the
API server's message in ``Error``.

With ``--watch-pods`` (the ``extender-null-raw-watch`` phase) it also keeps open the pod watch the
extender's cache keeps (the same selection, JSON, bookmarks), reads its events and drops them
undecoded: what any extender that keeps a pod cache costs the API server and the machine, at least.

With ``--burn-us N`` (the ``extender-null-raw-burn`` phases) each /filter also spends N µs of CPU
(this thread's clock) before its answer is written, or with ``--burn-after`` right after: what a
known amount of an extender's CPU costs kube-scheduler's pods/s on this machine, and whether it
matters when it is spent.

With ``--wait-us N`` (the ``extender-null-raw-wait`` phase) each /filter instead holds its answer for N µs
without spending CPU (the thread sleeps, so the event loop does nothing else meanwhile): what the
same time costs kube-scheduler as latency alone, beside its cost as CPU.

With ``--pack`` (the ``extender-null-raw-pack`` phase) /filter passes the candidate with the lowest
name instead of the first: kube-scheduler leaves out the nodes a pod no longer fits, so pods fill
nodes one after another, as a packing extender places them (the first candidate spreads them: it
moves with kube-scheduler's start index). What packed nodes cost kube-scheduler, apart from any
extender's own work.

    python -m bench.null_raw --kubeconfig extender.kubeconfig --port 8888 [--watch-pods] [--pack]
        [--burn-us N [--burn-after] | --wait-us N]
"""

from __future__ import annotations

import argparse
import asyncio
import ssl
import time
from typing import Any, cast
from urllib.parse import urlencode, urlsplit

import httptools
import msgspec
import uvloop

from app.cluster.kube import KubeClient, watch_query
from app.cluster.reflector import pod_resource
from bench.raw_http import HttpRequestProtocol

_args = msgspec.json.Decoder(dict[str, Any])
_encode = msgspec.json.encode
_BINDS: set[asyncio.Task[None]] = set()


def burn(microseconds: float) -> None:
    """Spend ``microseconds`` of this thread's CPU."""
    end = time.thread_time_ns() + int(microseconds * 1000)
    while time.thread_time_ns() < end:
        pass


def wait(microseconds: float) -> None:
    """Hold this thread for ``microseconds`` without spending CPU."""
    time.sleep(microseconds / 1e6)


_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"


def _answer(body: bytes) -> bytes:
    return _HEAD % len(body) + body


class _Response:
    """One HTTP/1.1 answer read by httptools: status and body."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.body: list[bytes] = []
        self.done = False

    def on_body(self, chunk: bytes) -> None:
        self.body.append(chunk)

    def on_message_complete(self) -> None:
        self.done = True


class ApiConnections:
    """Kept-alive TLS connections to the API server, one request at a time on each."""

    def __init__(self, host: str, port: int, context: ssl.SSLContext | None, authorization: str) -> None:
        self.host, self.port, self.context = host, port, context
        self.authorization = authorization.encode()
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def request(self, method: bytes, path: str, body: bytes = b"") -> tuple[int, bytes]:
        reader, writer = self.idle.pop() if self.idle else await self._open()
        head = (
            b"%s %s HTTP/1.1\r\nHost: %s\r\nAuthorization: %s\r\nContent-Type: application/json\r\n"
            b"Accept: application/json\r\nContent-Length: %d\r\n\r\n"
            % (method, path.encode(), self.host.encode(), self.authorization, len(body))
        )
        writer.write(head + body)
        response = _Response()
        while not response.done:
            data = await reader.read(65536)
            if not data:
                writer.close()
                raise ConnectionError("the API server closed the connection")
            response.parser.feed_data(data)
        self.idle.append((reader, writer))
        return response.parser.get_status_code(), b"".join(response.body)

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection(self.host, self.port, ssl=self.context)


class NullProtocol(HttpRequestProtocol):
    def __init__(
        self,
        api: ApiConnections,
        pack: bool = False,
        burn_us: float = 0.0,
        burn_after: bool = False,
        wait_us: float = 0.0,
    ) -> None:
        super().__init__()
        self.api = api
        self.pack = pack
        self.burn_us = burn_us
        self.burn_after = burn_after
        self.wait_us = wait_us
        self.body: list[bytes] = []

    def on_body(self, chunk: bytes) -> None:
        self.body.append(chunk)

    def on_message_complete(self) -> None:
        url, body = self.url, b"".join(self.body)
        self.url, self.body = b"", []
        if url.endswith(b"/bind"):
            task = asyncio.get_running_loop().create_task(self._bind(body))
            _BINDS.add(task)  # the loop keeps only a weak reference to a task
            task.add_done_callback(_BINDS.discard)
            return
        if url.endswith(b"/filter"):
            names = _args.decode(body).get("NodeNames") or []
            passed = [min(names)] if self.pack and names else names[:1]
            answer: dict[str, Any] = {"NodeNames": passed, "FailedNodes": {}, "FailedAndUnresolvableNodes": {}}
            answer["Error"] = ""
            if self.burn_us and not self.burn_after:
                burn(self.burn_us)
            if self.wait_us:
                wait(self.wait_us)
            self._write(_encode(answer))
            if self.burn_us and self.burn_after:
                burn(self.burn_us)
        elif url.endswith(b"/prioritize"):
            names = _args.decode(body).get("NodeNames") or []
            self._write(_encode([{"Host": name, "Score": 0} for name in names]))
        else:  # /readyz
            self._write(b"{}")

    async def _bind(self, body: bytes) -> None:
        args = _args.decode(body)
        namespace, name = args["PodNamespace"], args["PodName"]
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, "uid": args["PodUID"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": args["Node"]},
        }
        try:
            path = f"/api/v1/namespaces/{namespace}/pods/{name}/binding"
            status, reply = await self.api.request(b"POST", path, _encode(binding))
            error = "" if status in (200, 201) else f"binding: {status} {reply[:200]!r}"
        except OSError as exc:
            error = f"binding: {exc}"
        self._write(_encode({"Error": error}))

    def _write(self, body: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(_answer(body))


class PodWatch(asyncio.Protocol):
    """The extender's pod watch on one TLS connection, its events read and dropped. Once the
    connection ends (the server's timeout) it is opened again, from the current state."""

    def __init__(self, request: bytes, received: list[int]) -> None:
        self.request = request
        self.received = received  # bytes read, over every connection
        self.answered = False
        self.ended = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        cast(asyncio.Transport, transport).write(self.request)

    def data_received(self, data: bytes) -> None:
        if not self.answered and not data.startswith(b"HTTP/1.1 200"):
            print(f"pod watch refused: {data[:300]!r}", flush=True)  # the bench's log
        elif b'"type":"ERROR"' in data:
            print(f"pod watch ended by the API server: {data[:300]!r}", flush=True)
        self.answered = True
        self.received[0] += len(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.ended.done():
            self.ended.set_result(None)


def watch_request(host: str, authorization: str, resource_version: str) -> bytes:
    """The GET of the extender's pod watch (``app.cluster.kube.KubeClient.watch`` on ``pod_resource``)."""
    query = urlencode(watch_query(resource_version, pod_resource.field_selector))
    return (
        f"GET {pod_resource.path}?{query} HTTP/1.1\r\nHost: {host}\r\nAuthorization: {authorization}\r\n"
        "Accept: application/json\r\n\r\n"
    ).encode()


async def watch_pods(api: ApiConnections, received: list[int] | None = None) -> None:
    """Keep the pod watch open until cancelled, each time from a one-item list's resourceVersion (as
    the extender's reflector watches from its list's); ``received[0]`` counts the bytes read."""
    loop, received = asyncio.get_running_loop(), received if received is not None else [0]
    listing = f"{pod_resource.path}?{urlencode({'limit': '1', 'fieldSelector': pod_resource.field_selector})}"
    authorization = api.authorization.decode()
    while True:
        status, body = await api.request(b"GET", listing)
        if status != 200:
            raise ConnectionError(f"listing pods: {status} {body[:200]!r}")
        version = str(_args.decode(body).get("metadata", {}).get("resourceVersion", ""))
        watch = PodWatch(watch_request(api.host, authorization, version), received)
        await loop.create_connection(lambda watch=watch: watch, api.host, api.port, ssl=api.context)
        await watch.ended


async def serve(
    kubeconfig: str,
    port: int,
    watch: bool = False,
    pack: bool = False,
    burn_us: float = 0.0,
    burn_after: bool = False,
    wait_us: float = 0.0,
) -> None:
    # The project's kubeconfig loader for the server, CA and token; nothing else of its client.
    client = KubeClient.from_kubeconfig(kubeconfig)
    url = urlsplit(client.base_url)
    authorization = dict(client._headers() or {}).get("authorization", "")
    context = client._ssl
    assert isinstance(context, ssl.SSLContext), "the bench's API server is HTTPS"
    host, api_port = url.hostname or "127.0.0.1", url.port or 443
    api = ApiConnections(host, api_port, context, authorization)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: NullProtocol(api, pack, burn_us, burn_after, wait_us), "127.0.0.1", port)
    await asyncio.gather(server.serve_forever(), *([watch_pods(api)] if watch else []))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--port", type=int, default=8888)
    parser.add_argument("--watch-pods", action="store_true", help="keep the extender's pod watch open")
    parser.add_argument("--pack", action="store_true", help="/filter passes the lowest-named candidate")
    parser.add_argument("--burn-us", type=float, default=0.0, help="CPU µs each /filter spends")
    parser.add_argument("--burn-after", action="store_true", help="spend it after the answer is written")
    parser.add_argument("--wait-us", type=float, default=0.0, help="µs each /filter holds its answer, without CPU")
    args = parser.parse_args()
    uvloop.run(
        serve(args.kubeconfig, args.port, args.watch_pods, args.pack, args.burn_us, args.burn_after, args.wait_us)
    )


if __name__ == "__main__":
    main()
