"""A process for tests/bench/test_cpu_sampler.py: says it runs, waits for ``go``, spends a fixed amount
of CPU in ``spin``, says it is done and waits for ``stop``.

    python -m tests.bench.busy DIR
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

CPU_SECONDS = 0.3


def spin(seconds: float) -> int:
    """Arithmetic until ``seconds`` of this process's CPU time have gone."""
    until = time.process_time() + seconds
    total = 0
    while time.process_time() < until:
        total += sum(range(1000))
    return total


def wait(path: Path) -> None:
    """Until ``path`` exists, using no CPU to speak of (the test creates it)."""
    while not path.exists():
        time.sleep(0.01)


def main() -> None:
    folder = Path(sys.argv[1])
    (folder / "ready").touch()
    wait(folder / "go")
    spin(CPU_SECONDS)
    (folder / "done").touch()
    wait(folder / "stop")


if __name__ == "__main__":
    main()
