"""SIGTERM, on a real process: the listener closes, in-flight binds finish (bounded), exit 0."""

from __future__ import annotations

import concurrent.futures
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
BIND = (ROOT / "examples" / "requests" / "bind-gpu-pod.json").read_bytes()
FILTER = (ROOT / "examples" / "requests" / "gpu-pod.json").read_bytes()  # the pod the bind names


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _until(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.02)


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except ConnectionRefusedError:
        return True
    return False


def _ready(process: subprocess.Popen[bytes], port: int) -> bool:
    assert process.poll() is None, process.stdout.read().decode() if process.stdout else ""
    try:
        return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., tuple[subprocess.Popen[bytes], int]]]:
    processes: list[subprocess.Popen[bytes]] = []

    def start(config: Path | None = None) -> tuple[subprocess.Popen[bytes], int]:
        port = _free_port()
        args = ["examples/cluster.yaml", str(port), str(tmp_path), *([str(config)] if config else [])]
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.app.gated_bind_server", *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        processes.append(process)
        _until(lambda: _ready(process, port), "the server is ready")
        assert httpx.post(f"http://127.0.0.1:{port}/filter", content=FILTER).json()["Error"] == ""
        return process, port

    yield start
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_sigterm_finishes_the_inflight_bind_then_exits_0(start: Callable[..., Any], tmp_path: Path) -> None:
    process, port = start()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        bind = pool.submit(lambda: httpx.post(f"http://127.0.0.1:{port}/bind", content=BIND, timeout=30))
        _until(lambda: (tmp_path / "started").exists(), "the bind is in flight")
        process.send_signal(signal.SIGTERM)
        _until(lambda: _refused(port), "new connections are refused")
        assert not bind.done() and process.poll() is None  # the bind holds the shutdown
        (tmp_path / "release").touch()
        assert bind.result(timeout=20).json() == {"Error": ""}
    assert process.wait(timeout=20) == 0


def test_a_bind_past_the_grace_period_is_cut(start: Callable[..., Any], tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("server: {shutdownGracePeriodSeconds: 0.5}\n")
    process, port = start(config)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        bind = pool.submit(lambda: httpx.post(f"http://127.0.0.1:{port}/bind", content=BIND, timeout=30))
        _until(lambda: (tmp_path / "started").exists(), "the bind is in flight")
        process.send_signal(signal.SIGTERM)  # never released: only the grace period ends it
        assert process.wait(timeout=20) == 0
        # uvicorn answers a request whose task it cancelled with a bare 500: kube-scheduler counts
        # the bind as failed and retries the pod, which the next extender sees unbound.
        assert bind.result(timeout=20).status_code == 500
