"""Read ``bench.cpu_sampler``'s folded stacks: the extender's CPU by part of its work, and the
functions that use the most of it themselves.

A sample goes to the first part whose frame is on its stack, in the order of ``PARTS`` (a log record
written during a bind counts as logging). With the phase's CPU seconds and pods (``bench.throughput``
passes them) the parts read as microseconds per pod.

    python -m bench.cpu_report DIR/r0-extender.folded [--cpu-seconds 3.9 --pods 2000] [--top 20]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["OTHER", "PARTS", "main", "own_frames", "parts", "per_pod", "read_folded"]

# (part, frame prefixes): the first part with a frame on the stack that starts with a prefix.
PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("logging", ("logging/__init__.py:",)),
    ("/filter", ("app/service.py:ExtenderService._filter", "bench/extender_null_filter.py:first_candidate")),
    ("/prioritize", ("app/service.py:ExtenderService._prioritize", "app/service.py:ExtenderService.priorities")),
    ("/bind: Binding POST", ("app/cluster/kube.py:KubeClient.bind",)),
    ("/bind: admit, reserve, assume", ("app/bind.py:BindVerb.bind",)),
    ("watch events", ("app/cluster/reflector.py:",)),
    ("node snapshots", ("app/cluster/cache.py:ClusterCache._rebuild_stale",)),
    ("metrics", ("prometheus_client/",)),
    ("HTTP server", ("app/http/", "uvicorn/protocols/", "httptools/")),
)
OTHER = "other (event loop, TLS, client reads)"


def read_folded(text: str) -> Counter[str]:
    """Stack -> samples of a folded file (``frame;frame;... count`` per line)."""
    stacks: Counter[str] = Counter()
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            raise ValueError(f"line {number}: not 'frames count': {line[:80]!r}")
        stacks[stack] += int(count)
    return stacks


def _part(frames: Sequence[str]) -> str:
    for part, prefixes in PARTS:
        if any(frame.startswith(prefixes) for frame in frames):
            return part
    return OTHER


def parts(stacks: Mapping[str, int]) -> Counter[str]:
    """Samples per part."""
    out: Counter[str] = Counter()
    for stack, count in stacks.items():
        out[_part(stack.split(";"))] += count
    return out


def own_frames(stacks: Mapping[str, int]) -> Counter[str]:
    """Samples per innermost frame (where the CPU was used, not what called it)."""
    out: Counter[str] = Counter()
    for stack, count in stacks.items():
        out[stack.rpartition(";")[2]] += count
    return out


def per_pod(samples: Counter[str], cpu_seconds: float, pods: int) -> dict[str, float]:
    """Each part's share of ``cpu_seconds`` in microseconds per pod, largest first."""
    total = sum(samples.values())
    if not total or pods <= 0:
        return {}
    scale = cpu_seconds * 1e6 / pods / total
    return {part: round(count * scale, 1) for part, count in samples.most_common()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folded", help="a file bench.cpu_sampler wrote")
    parser.add_argument("--cpu-seconds", type=float, help="the process's CPU seconds over the sampled phase")
    parser.add_argument("--pods", type=int, help="pods scheduled in the phase")
    parser.add_argument("--top", type=int, default=20, help="functions by own samples")
    args = parser.parse_args(argv)
    try:
        stacks = read_folded(Path(args.folded).read_text())
    except (OSError, ValueError) as exc:
        print(f"error: {args.folded}: {exc}", file=sys.stderr)
        return 2
    total = sum(stacks.values())
    print(f"{total} samples")
    by_part = parts(stacks)
    micros = per_pod(by_part, args.cpu_seconds, args.pods) if args.cpu_seconds and args.pods else {}
    for part, count in by_part.most_common():
        extra = f"  {micros[part]:7.1f} µs per pod" if part in micros else ""
        print(f"{100 * count / total:5.1f} %  {part:<36}{extra}")
    print("\nown samples:")
    for frame, count in own_frames(stacks).most_common(args.top):
        print(f"{100 * count / total:5.1f} %  {frame}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
