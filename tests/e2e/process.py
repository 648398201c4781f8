"""Child processes of the harness (started in their own session, stopped by their own PID) and the
polling helpers tests synchronise with."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import httpx

__all__ = ["Proc", "free_port", "stop_children_on_sigterm", "until_equal", "wait_for"]

T = TypeVar("T")


def stop_children_on_sigterm() -> None:
    """Make SIGTERM raise KeyboardInterrupt, as Ctrl-C does, so that a harness or benchmark stopped by
    its PID unwinds and stops the processes it started: they run in sessions of their own, never see
    the signal, and would outlive it (a control plane left busy on the machine)."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 30.0, interval: float = 0.05) -> T:
    """Poll ``probe`` until it returns something other than None/False; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = probe()
            if value is not None and value is not False:
                return value
            last = value
        except (httpx.HTTPError, OSError, KeyError, ValueError) as exc:
            last = exc
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")
        time.sleep(interval)


def until_equal(what: str, read: Callable[[], T], expected: T, timeout: float = 30.0) -> T:
    """Poll ``read`` until it returns ``expected``; on timeout the message shows the last value read."""
    seen: list[T] = []

    def probe() -> bool:
        seen[:] = [read()]
        return seen[0] == expected

    try:
        wait_for(what, probe, timeout)
    except TimeoutError as exc:
        raise TimeoutError(f"{exc}; expected {expected!r}, last read {seen[0] if seen else None!r}") from None
    return expected


@dataclass
class Proc:
    """One child process with its log file; stopped by its own PID only."""

    name: str
    argv: list[str]
    log: Path
    env: Mapping[str, str] | None = None
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Proc:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        out = self.log.open("ab")
        env = {**os.environ, **(self.env or {})}
        self.popen = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        out.close()
        return self

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, timeout: float = 10.0, *, kill: bool = False) -> None:
        """SIGTERM (SIGKILL with ``kill``: a crash), then SIGKILL if it outlives ``timeout``."""
        if self.popen is None or self.popen.poll() is not None:
            return
        self.popen.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(timeout)

    def tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""
