"""The extender's CPU by stage of its work, measured (not sampled): for ``bench.throughput
--cpu-profile``, beside ``bench.cpu_sampler``'s samples and in the same process.

The sampler charges CPU used inside a C call to the Python frame that runs next (a socket write to
the log record written after it, say), so its parts are approximate. Here the function of each stage
in ``STAGES`` is wrapped and charged the thread CPU between its entry and its exit, less what the
stages it calls took (each microsecond counts once, in the innermost stage). What no stage holds is
the rest: the event loop, socket reads and writes, TLS, and the Binding POST's task between its
awaits. Only synchronous functions can be charged so (a coroutine's time between awaits is the
rest's). A wrapped call costs about a microsecond of its own: a phase measured so runs a little slower.

    stages = StageClock(); stages.install(); stages.start(); ...; stages.stop(); stages.totals()
"""

from __future__ import annotations

import functools
import importlib
import time
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["REST", "STAGES", "StageClock", "per_pod"]

# (stage, "module:attribute" of the function charged to it; a method as "module:Class.method")
STAGES: tuple[tuple[str, str], ...] = (
    ("/filter", "app.service:ExtenderService._filter"),
    ("/prioritize", "app.service:ExtenderService._prioritize"),
    ("/bind: request", "app.http.wire:decode_bind_args"),
    ("/bind: admit, reserve, assume", "app.bind:BindVerb._admit_and_reserve"),
    ("decisions kept and logged", "app.service:ExtenderService._record"),
    ("Binding POST: answer read", "app.cluster.api_connections:_Connection.data_received"),
    ("watch: events decoded", "app.cluster.kube:_event"),
    ("watch: events applied", "app.cluster.reflector:Reflector._apply"),
    ("node snapshots", "app.cluster.cache:ClusterCache._rebuild_stale"),
    ("HTTP front: requests read", "app.http.verb_protocol:VerbProtocol.data_received"),
    ("HTTP front: answers written", "app.http.verb_protocol:VerbProtocol._respond"),
)
REST = "rest (event loop, sockets, TLS, the Binding POST's task)"


class StageClock:
    """Exclusive CPU nanoseconds per stage while started; ``clock`` is the thread's CPU clock."""

    def __init__(self, clock: Callable[[], int] = time.thread_time_ns) -> None:
        self.clock = clock
        self.counting = False
        self.nanos: dict[str, int] = {}
        self.calls: dict[str, int] = {}
        self._inner: list[int] = []  # per open stage: what the stages it called took

    def install(self, stages: tuple[tuple[str, str], ...] = STAGES) -> None:
        """Wrap each stage's function where it is looked up (its module or its class)."""
        for stage, target in stages:
            module_name, _, path = target.partition(":")
            owner: Any = importlib.import_module(module_name)
            *outer, name = path.split(".")
            for part in outer:
                owner = getattr(owner, part)
            setattr(owner, name, self.wrap(stage, getattr(owner, name)))

    def wrap(self, stage: str, function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def charged(*args: Any, **kwargs: Any) -> Any:
            if not self.counting:
                return function(*args, **kwargs)
            inner = self._inner
            inner.append(0)
            started = self.clock()
            try:
                return function(*args, **kwargs)
            finally:
                took = self.clock() - started
                own = took - inner.pop()
                self.nanos[stage] = self.nanos.get(stage, 0) + own
                self.calls[stage] = self.calls.get(stage, 0) + 1
                if inner:
                    inner[-1] += took

        return charged

    def start(self) -> None:
        self.nanos.clear()
        self.calls.clear()
        self.counting = True

    def stop(self) -> None:
        self.counting = False

    def totals(self) -> dict[str, int]:
        """Nanoseconds per stage, in ``STAGES`` order (stages never entered left out)."""
        order = {stage: index for index, (stage, _) in enumerate(STAGES)}
        return dict(sorted(self.nanos.items(), key=lambda item: order.get(item[0], len(order))))


def per_pod(nanos: Mapping[str, int], cpu_seconds: float, pods: int) -> dict[str, float]:
    """Each stage in microseconds per pod, and the rest of ``cpu_seconds`` (the process's CPU over
    the phase) under ``REST``; empty without pods."""
    if pods <= 0:
        return {}
    out = {stage: round(value / 1000 / pods, 1) for stage, value in nanos.items()}
    out[REST] = round(max(cpu_seconds * 1e6 / pods - sum(out.values()), 0.0), 1)
    return out
