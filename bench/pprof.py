"""Read a Go CPU profile (pprof's ``profile.proto``, as ``/debug/pprof/profile`` serves it) and print
where the time went, by function: flat (the sample's own frame) and cumulative (anywhere on the
stack). Enough to compare kube-scheduler's phases in ``bench.throughput --pprof`` without Go's
toolchain; only the fields a CPU profile needs are decoded.

    python -m bench.pprof DIR/r0-extender.pb.gz [--top 30] [--match gcBgMarkWorker]
"""

from __future__ import annotations

import argparse
import gzip
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.e2e.process import wait_for

__all__ = ["SCHEDULER_FLAGS", "CpuProfile", "ProfileError", "capture", "main", "read_profile", "report"]

# profile.proto field numbers (github.com/google/pprof/proto/profile.proto)
_SAMPLE, _LOCATION, _FUNCTION, _STRING_TABLE = 2, 4, 5, 6
_SAMPLE_LOCATION_ID, _SAMPLE_VALUE = 1, 2
_LOCATION_ID, _LOCATION_LINE = 1, 4
_LINE_FUNCTION_ID = 1
_FUNCTION_ID, _FUNCTION_NAME = 1, 2
_VARINT, _FIXED64, _BYTES, _FIXED32 = 0, 1, 2, 5


class ProfileError(ValueError):
    """Bytes that are not a pprof profile."""


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data):
            raise ProfileError("truncated varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, at


def _fields(data: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of one message; unknown wire types are an error."""
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == _VARINT:
            value, at = _varint(data, at)
        elif wire == _BYTES:
            size, at = _varint(data, at)
            value, at = data[at : at + size], at + size
        elif wire in (_FIXED64, _FIXED32):
            size = 8 if wire == _FIXED64 else 4
            value, at = data[at : at + size], at + size
        else:
            raise ProfileError(f"unsupported wire type {wire}")
        yield number, wire, value


def _ints(wire: int, value: int | bytes) -> list[int]:
    """A repeated integer field: one varint, or a packed run of them."""
    if isinstance(value, int):
        return [value]
    out, at = [], 0
    while at < len(value):
        item, at = _varint(value, at)
        out.append(item)
    return out


@dataclass
class CpuProfile:
    samples: list[tuple[list[str], int]]  # (function names, innermost first; the last value: CPU ns)

    @property
    def total(self) -> int:
        return sum(value for _, value in self.samples)

    def by_function(self) -> tuple[Counter[str], Counter[str]]:
        """Flat and cumulative nanoseconds per function name."""
        flat: Counter[str] = Counter()
        cumulative: Counter[str] = Counter()
        for names, value in self.samples:
            if names:
                flat[names[0]] += value
            for name in set(names):
                cumulative[name] += value
        return flat, cumulative


def read_profile(data: bytes) -> CpuProfile:
    """Decode a profile, gzipped (as served) or not."""
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    strings: list[str] = []
    raw_samples: list[tuple[list[int], list[int]]] = []
    locations: dict[int, list[int]] = {}
    functions: dict[int, int] = {}
    for number, _, value in _fields(data):
        if not isinstance(value, bytes):
            continue
        if number == _STRING_TABLE:
            strings.append(value.decode("utf-8", "replace"))
        elif number == _SAMPLE:
            ids: list[int] = []
            values: list[int] = []
            for inner, inner_wire, inner_value in _fields(value):
                if inner == _SAMPLE_LOCATION_ID:
                    ids += _ints(inner_wire, inner_value)
                elif inner == _SAMPLE_VALUE:
                    values += _ints(inner_wire, inner_value)
            raw_samples.append((ids, values))
        elif number == _LOCATION:
            location, lines = 0, []
            for inner, _, inner_value in _fields(value):
                if inner == _LOCATION_ID and isinstance(inner_value, int):
                    location = inner_value
                elif inner == _LOCATION_LINE and isinstance(inner_value, bytes):
                    lines += [v for n, _, v in _fields(inner_value) if n == _LINE_FUNCTION_ID and isinstance(v, int)]
            locations[location] = lines
        elif number == _FUNCTION:
            function = name = 0
            for inner, _, inner_value in _fields(value):
                if inner == _FUNCTION_ID and isinstance(inner_value, int):
                    function = inner_value
                elif inner == _FUNCTION_NAME and isinstance(inner_value, int):
                    name = inner_value
            functions[function] = name
    if not strings:
        raise ProfileError("no string table: not a pprof profile")

    def name_of(function: int) -> str:
        index = functions.get(function, 0)
        return strings[index] if 0 <= index < len(strings) else "?"

    samples = [
        ([name_of(f) for location in ids for f in locations.get(location, [])], values[-1] if values else 0)
        for ids, values in raw_samples
    ]
    return CpuProfile(samples)


# kube-scheduler's secure port serves /debug/pprof only to authorised callers; a benchmark's
# kube-scheduler lets anyone on loopback read it (``SCHEDULER_FLAGS``).
SCHEDULER_FLAGS = ("--authorization-always-allow-paths=/healthz,/readyz,/livez,/debug/pprof/*",)


def capture(port: int, seconds: int, path: Path) -> threading.Thread:
    """Fetch a ``seconds`` CPU profile from the kube-scheduler serving on ``port`` into ``path``, in a
    thread (the profile covers ``seconds`` from when it serves); a failure is printed, not raised."""

    def fetch() -> None:
        base = f"https://127.0.0.1:{port}"  # its serving certificate is self-signed; all on loopback
        try:
            wait_for("kube-scheduler serving", lambda: httpx.get(f"{base}/healthz", verify=False, timeout=5))
            answer = httpx.get(
                f"{base}/debug/pprof/profile", params={"seconds": seconds}, verify=False, timeout=seconds + 30
            )
            answer.raise_for_status()
            path.write_bytes(answer.content)
        except (httpx.HTTPError, OSError, TimeoutError) as exc:
            print(f"pprof of kube-scheduler failed: {exc}", file=sys.stderr, flush=True)

    thread = threading.Thread(target=fetch, name="pprof", daemon=True)
    thread.start()
    return thread


def report(profile: CpuProfile, top: int, match: str | None) -> str:
    flat, cumulative = profile.by_function()
    total = profile.total or 1
    lines = [f"CPU {profile.total / 1e9:.2f} s in {len(profile.samples)} samples", "   cum %  flat %  function"]
    for name, value in sorted(cumulative.items(), key=lambda item: (-item[1], -flat[item[0]], item[0])):
        if match is not None and match not in name:
            continue
        lines.append(f"  {100 * value / total:6.1f}  {100 * flat[name] / total:6.1f}  {name}")
        if len(lines) - 2 >= top:
            break
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pprof", description=__doc__.split("\n\n")[0])
    parser.add_argument("profiles", nargs="+", help="pprof files (.pb.gz as /debug/pprof/profile serves them)")
    parser.add_argument("--top", type=int, default=30, help="functions to show, by cumulative CPU")
    parser.add_argument("--match", help="only functions whose name contains this")
    args = parser.parse_args(argv)
    for path in args.profiles:
        try:
            profile = read_profile(Path(path).read_bytes())
        except (OSError, ProfileError, EOFError, gzip.BadGzipFile) as exc:
            print(f"{path}: {exc}", file=sys.stderr)
            return 2
        print(f"== {path}")
        print(report(profile, args.top, args.match))
    return 0


if __name__ == "__main__":
    sys.exit(main())
