"""Where a verb's time goes, in-process: phase timings and a cProfile of the service methods.

Why in-process: it takes HTTP and the client out of the picture, so the gap between this and
``bench.latency`` is what the transport (uvicorn, ASGI, body upload/download) costs. Run it when a
latency target is missed and hand the top functions to whoever owns them.

    python -m bench.hotspots --nodes 5000 --mode names --requests 40
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import gc
import io
import pstats
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.config import load_config
from app.http import wire
from app.runtime import build_snapshot_runtime
from bench.cluster import build_cluster, encode, write_cluster
from bench.request_bodies import filter_body_names, filter_body_nodes, pending_pods

CLOCKS = {"wall": time.perf_counter_ns, "cpu": time.thread_time_ns}
_clock = time.perf_counter_ns


def _ms(fn: Callable[[], Any], repeat: int) -> float:
    """Median time of ``fn`` in ms, on the chosen clock."""
    samples = []
    for _ in range(repeat):
        started = _clock()
        fn()
        samples.append(_clock() - started)
    return statistics.median(samples) / 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.hotspots", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--mode", choices=("names", "nodelist"), default="names")
    parser.add_argument("--requests", type=int, default=40, help="calls per verb (cycling over the pending pods)")
    parser.add_argument("--top", type=int, default=20, help="functions to print, by own time")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="wall",
        help="wall time, or this thread's CPU time (steadier while other processes load the machine)",
    )
    args = parser.parse_args(argv)
    global _clock
    _clock = CLOCKS[args.clock]

    with tempfile.TemporaryDirectory(prefix="kge-hotspots-") as tmp:
        path = Path(tmp) / "cluster.json"
        if args.mode == "nodelist":
            cluster = build_cluster(args.nodes, args.seed)
            path.write_bytes(encode(cluster))
            nodes = [item for item in cluster["items"] if item["kind"] == "Node"]
            bodies = [encode(filter_body_nodes(pod, nodes)) for pod in pending_pods()]
        else:
            names = write_cluster(path, args.nodes, args.seed)
            bodies = [encode(filter_body_names(pod, names)) for pod in pending_pods()]
        runtime = build_snapshot_runtime(load_config(None), str(path))
    service = runtime.service
    gc.collect()
    gc.freeze()  # as Runtime.start does in the server
    gc.set_threshold(50_000, 20, 20)

    size = len(bodies[0]) / 1024
    print(f"{args.mode} mode, {args.nodes:,} nodes, body {size:.0f} KiB, median of {args.requests}, {args.clock} clock")
    for pod, body in zip(pending_pods(), bodies, strict=True):
        filtered = service.filter(body)
        scored = service.prioritize(body)
        decode = _ms(functools.partial(wire.decode_extender_args, body), 5)
        print(
            f"  {pod['metadata']['name'][:28]:28} decode {decode:7.2f}"
            f"  filter {_ms(functools.partial(service.filter, body), 5):7.2f}"
            f"  encode(filter) {_ms(functools.partial(wire.encode, filtered), 5):6.2f}"
            f"  prioritize {_ms(functools.partial(service.prioritize, body), 5):7.2f}"
            f"  encode(prioritize) {_ms(functools.partial(wire.encode, scored), 5):6.2f}  ms"
        )

    for verb in ("filter", "prioritize"):
        method = getattr(service, verb)
        profiler = cProfile.Profile()
        profiler.enable()
        for index in range(args.requests):
            method(bodies[index % len(bodies)])
        profiler.disable()
        out = io.StringIO()
        stats = pstats.Stats(profiler, stream=out)
        print(f"\n=== {verb}: {args.requests} calls, top {args.top} by own time (profiler overhead included)")
        stats.sort_stats("tottime").print_stats(args.top)
        print("\n".join(line for line in out.getvalue().splitlines() if line.strip())[:6000])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
