"""The latency floor for ``bench.latency --floor``: a server that answers each verb request with the
bytes the extender answered for it, doing nothing else.

It is what the protocol costs at the same body and answer sizes with the same client: the body read
from the socket and parsed by httptools' C parser on uvloop (its bytes not even kept), then one
prebuilt write. The extender's round trip minus this one is the part the extender can cut.

Answers are looked up by path and Content-Length (the benchmark's bodies differ in length), from a
msgpack file of ``{"<path> <content-length>": answer bytes}``; any other request gets a 404.

    python -m bench.latency_floor --answers answers.msgpack --port 8899
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import msgspec
import uvloop

from bench.raw_http import HttpRequestProtocol

__all__ = ["FloorProtocol", "answer_key", "answers_table", "serve"]

_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
_NOT_FOUND = b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"


def answer_key(path: str, length: int) -> str:
    return f"{path} {length}"


def answers_table(answers: dict[str, bytes]) -> dict[tuple[bytes, bytes], bytes]:
    """``answer_key`` -> answer, as (path, Content-Length) bytes -> the whole HTTP response."""
    table = {}
    for key, body in answers.items():
        path, _, length = key.rpartition(" ")
        table[(path.encode(), length.encode())] = _HEAD % len(body) + body
    return table


class FloorProtocol(HttpRequestProtocol):
    """One connection: each complete request answered from the table, in order (keep-alive)."""

    def __init__(self, table: dict[tuple[bytes, bytes], bytes]) -> None:
        super().__init__()
        self.table = table
        self.length = b"0"

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"content-length":
            self.length = value

    def on_message_complete(self) -> None:
        response = self.table.get((self.url, self.length), _NOT_FOUND)
        self.url, self.length = b"", b"0"
        if not self.transport.is_closing():
            self.transport.write(response)


async def serve(answers: dict[str, bytes], port: int) -> None:
    """Serve on 127.0.0.1:``port`` until cancelled; prints ``ready`` once listening."""
    table = answers_table(answers)
    server = await asyncio.get_running_loop().create_server(lambda: FloorProtocol(table), "127.0.0.1", port)
    print("ready", flush=True)
    await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.latency_floor", description=__doc__.splitlines()[0])
    parser.add_argument("--answers", required=True, help="msgpack file of {'<path> <content-length>': bytes}")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    answers = msgspec.msgpack.decode(Path(args.answers).read_bytes(), type=dict[str, bytes])
    uvloop.run(serve(answers, args.port))


if __name__ == "__main__":
    main()
