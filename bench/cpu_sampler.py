"""Where a Python process's CPU time goes: a sampling profiler on the process CPU clock, for
``bench.throughput --cpu-profile`` (run by the bench).

Why not py-spy: py-spy samples the wall clock and counts a thread as busy while it is runnable. On
a machine whose cores kube-scheduler, the API server and the extender share, the extender is often
runnable and waiting for a core (a write to kube-scheduler's socket wakes kube-scheduler, which then
takes the core), so py-spy put half of the extender's samples on a socket write that costs it a few
microseconds of CPU. ``ITIMER_PROF`` fires only as the process uses CPU, so each sample stands for
the same CPU time.

A sample is taken when the interpreter next checks for signals: CPU used inside a long C call (a
parse, a socket write) counts where the Python code goes on after it, in the same function or the
next one it calls. What the parts of ``bench.cpu_report`` add up (by the frames on the stack) holds;
a function's own share right after such a call is approximate. The kernel delivers the timer at its
tick (4 ms here): a 15-second phase gives a few hundred to a thousand samples.

The sampler runs ``MODULE`` as ``python -m MODULE ARGS`` would, and counts nothing until SIGUSR1
(the phase starts); SIGUSR2 stops counting and writes the stacks to ``--out``, folded (one line per
stack, ``frame;frame;... count``, the root first), as flame-graph tools read them. In the same
process ``bench.stage_cpu`` measures the CPU of each stage of the extender's work exactly; SIGUSR2
writes it beside the stacks (``stages_path``), first.

    python -m bench.cpu_sampler --out r0-extender.folded app.cli serve --config ...
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import signal
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from bench.stage_cpu import StageClock
from tests.e2e.process import wait_for

__all__ = ["INTERVAL", "Sampler", "collect", "collect_stages", "frame_name", "main", "runner", "stages_path", "start"]

INTERVAL = 0.001  # seconds of CPU between samples (the kernel may deliver them at its tick, e.g. 4 ms)
_REPO = str(Path(__file__).resolve().parent.parent) + "/"


def frame_name(frame: FrameType) -> str:
    """``path:qualname`` of a frame: the path from the repository root for ours, from the package
    directory for an installed library's, from the standard library's directory for its own."""
    code = frame.f_code
    path = code.co_filename
    installed = path.rfind("/site-packages/")
    if installed >= 0:  # before the repository's: a virtualenv may sit inside it
        path = path[installed + len("/site-packages/") :]
    elif path.startswith(_REPO):
        path = path[len(_REPO) :]
    elif "/lib/python3." in path:
        path = path.split("/lib/python3.", 1)[1].split("/", 1)[-1]
    return f"{path}:{code.co_qualname}"


class Sampler:
    """Counts the main thread's stack at every ``ITIMER_PROF`` tick while started."""

    def __init__(self, interval: float = INTERVAL) -> None:
        self.interval = interval
        self.stacks: Counter[str] = Counter()
        self.counting = False

    def install(self) -> None:
        signal.signal(signal.SIGPROF, self._sample)
        signal.setitimer(signal.ITIMER_PROF, self.interval, self.interval)

    def uninstall(self) -> None:
        signal.setitimer(signal.ITIMER_PROF, 0, 0)
        signal.signal(signal.SIGPROF, signal.SIG_IGN)

    def start(self) -> None:
        self.stacks.clear()
        self.counting = True

    def stop(self) -> None:
        self.counting = False

    def folded(self) -> str:
        return "".join(f"{stack} {count}\n" for stack, count in self.stacks.most_common())

    def _sample(self, signum: int, frame: FrameType | None) -> None:
        if not self.counting or frame is None:
            return
        names = []
        while frame is not None:
            names.append(frame_name(frame))
            frame = frame.f_back
        names.reverse()
        self.stacks[";".join(names)] += 1


# ------------------------------------------------------------------ for the bench that runs it
def runner(out: Path) -> list[str]:
    """What goes between ``python -m`` and the module to run it sampled, writing to ``out``."""
    return ["bench.cpu_sampler", "--out", str(out)]


def start(pid: int, out: Path) -> None:
    """Start counting in the sampled process ``pid`` (its earlier file, if any, goes)."""
    out.unlink(missing_ok=True)
    os.kill(pid, signal.SIGUSR1)


def collect(pid: int, out: Path, timeout: float = 10.0) -> str:
    """Stop counting in ``pid`` and read what it wrote."""
    os.kill(pid, signal.SIGUSR2)
    wait_for(f"the CPU samples in {out}", out.exists, timeout, interval=0.05)
    return out.read_text()


def stages_path(out: Path) -> Path:
    """Where the stages' CPU (``bench.stage_cpu``) goes beside the stacks written to ``out``."""
    return out.with_name(out.name + ".stages.json")


def collect_stages(out: Path) -> dict[str, int]:
    """The stages' CPU nanoseconds written with the stacks (after ``collect``); empty if none."""
    path = stages_path(out)
    if not path.exists():
        return {}
    found = json.loads(path.read_text())
    return {str(stage): int(nanos) for stage, nanos in found.items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the folded stacks, written at SIGUSR2")
    parser.add_argument("module", help="run as python -m MODULE")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    out = Path(args.out)
    sampler = Sampler()
    stages = StageClock()

    def started(signum: int, frame: FrameType | None) -> None:
        stages_path(out).unlink(missing_ok=True)
        sampler.start()
        stages.start()

    def stopped(signum: int, frame: FrameType | None) -> None:
        sampler.stop()
        stages.stop()
        stages_path(out).write_text(json.dumps(stages.totals()))
        partial = out.with_name(out.name + ".partial")
        partial.write_text(sampler.folded())
        partial.replace(out)  # whole or not there: the bench waits for the file (the stages are written first)

    signal.signal(signal.SIGUSR1, started)
    signal.signal(signal.SIGUSR2, stopped)
    stages.install()
    sampler.install()
    sys.argv = [args.module, *args.args]
    try:
        runpy.run_module(args.module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 0
    finally:
        sampler.uninstall()
    return 0


if __name__ == "__main__":
    sys.exit(main())
