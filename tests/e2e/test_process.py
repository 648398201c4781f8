"""The harness's own processes (tests/e2e/process.py): stopped by its PID, a harness or benchmark
still stops what it started. Needs no Kubernetes binaries."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.e2e.process import wait_for

REPO = Path(__file__).resolve().parents[2]

# A harness in miniature: one child in a session of its own (as every component is), stopped in
# ``finally``; it prints the child's PID and waits to be stopped. The print is inside ``try``: the
# test signals as soon as it reads the PID, which can be before ``print`` has returned.
_HARNESS = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from tests.e2e.process import Proc, stop_children_on_sigterm

    if sys.argv[1] == "handled":
        stop_children_on_sigterm()
    child = Proc("sleeper", [sys.executable, "-c", "import time; time.sleep(120)"], Path(sys.argv[2])).start()
    try:
        print(child.pid, flush=True)  # inside: the signal may come as soon as the PID is out
        time.sleep(120)
    finally:
        child.stop()
    """
)


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _harness_stopped_by_pid(mode: str, log: Path) -> int:
    """Run the harness, SIGTERM it by its PID; the child's PID."""
    harness = subprocess.Popen(
        [sys.executable, "-c", _HARNESS, mode, str(log)],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=REPO,
    )
    assert harness.stdout is not None
    child = int(harness.stdout.readline())
    harness.send_signal(signal.SIGTERM)
    harness.wait(30)
    return child


def test_a_harness_stopped_by_its_pid_stops_its_children(tmp_path: Path) -> None:
    child = _harness_stopped_by_pid("handled", tmp_path / "sleeper.log")
    wait_for("the child to be gone", lambda: not _exists(child), timeout=15)


def test_without_it_the_child_outlives_the_harness(tmp_path: Path) -> None:
    """What the handler prevents: the default SIGTERM ends the harness at once, ``finally`` never runs."""
    child = _harness_stopped_by_pid("default", tmp_path / "sleeper.log")
    try:
        assert _exists(child)
    finally:
        os.kill(child, signal.SIGKILL)  # the test's own leftover, by its PID
