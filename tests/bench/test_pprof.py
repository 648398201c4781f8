"""bench.pprof reads a Go CPU profile (profile.proto) as /debug/pprof/profile serves it."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from bench.pprof import ProfileError, main, read_profile


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, value: int | bytes) -> bytes:
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    return _varint(number << 3 | 2) + _varint(len(value)) + value


def _packed(values: list[int]) -> bytes:
    return b"".join(_varint(v) for v in values)


def profile_bytes() -> bytes:
    """Three functions; main calls work (inlined helper at one location) and gc runs alone."""
    strings = ["", "samples", "count", "cpu", "nanoseconds", "main", "work", "helper", "gc"]
    out = b"".join(_field(6, s.encode()) for s in strings)
    for function, name in ((1, 5), (2, 6), (3, 7), (4, 8)):
        out += _field(5, _field(1, function) + _field(2, name))
    # location 10: work with helper inlined into it (two lines, innermost first); 11: main; 12: gc
    out += _field(4, _field(1, 10) + _field(4, _field(1, 3)) + _field(4, _field(1, 2)))
    out += _field(4, _field(1, 11) + _field(4, _field(1, 1)))
    out += _field(4, _field(1, 12) + _field(4, _field(1, 4)))
    # samples: (count, cpu ns); locations innermost first; packed in one, unpacked in the other
    out += _field(2, _field(1, _packed([10, 11])) + _field(2, _packed([3, 30_000_000])))
    out += _field(2, _field(1, 12) + _field(2, 1) + _field(2, 10_000_000))
    return out


def test_functions_by_flat_and_cumulative_cpu_gzipped_or_not() -> None:
    for data in (profile_bytes(), gzip.compress(profile_bytes())):
        profile = read_profile(data)
        assert profile.samples == [(["helper", "work", "main"], 30_000_000), (["gc"], 10_000_000)]
        assert profile.total == 40_000_000
        flat, cumulative = profile.by_function()
        assert flat == {"helper": 30_000_000, "gc": 10_000_000}
        assert cumulative == {"helper": 30_000_000, "work": 30_000_000, "main": 30_000_000, "gc": 10_000_000}


def test_not_a_profile_is_an_error_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ProfileError, match="truncated"):
        read_profile(b"\x08\xff")
    with pytest.raises(ProfileError, match="string table"):
        read_profile(_field(1, 5))
    bad = tmp_path / "bad.pb.gz"
    bad.write_bytes(b"\x0f not a profile")
    assert main([str(bad)]) == 2
    assert "bad.pb.gz" in capsys.readouterr().err


def test_report_lists_functions_by_cumulative_share(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "p.pb.gz"
    path.write_bytes(gzip.compress(profile_bytes()))
    assert main([str(path), "--top", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "CPU 0.04 s in 2 samples"
    # 75 % each, the one with flat time first, then by name; gc's 25 % is past --top
    assert [line.split()[-1] for line in lines[3:]] == ["helper", "main"]
    assert main([str(path), "--match", "gc"]) == 0
    assert capsys.readouterr().out.splitlines()[3].split() == ["25.0", "25.0", "gc"]
