"""``bench.latency``'s rows: one per mode, size and verb, and the table it prints."""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Row", "table"]


@dataclass
class Row:
    mode: str
    queues: bool
    nodes: int
    verb: str
    count: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    server_p50_ms: float  # the handler's own time (Server-Timing); the rest of p50 is HTTP, uvicorn and the client
    server_p99_ms: float
    read_p50_ms: float  # of the server's time, reading the request body
    processing_p99_ms: float  # the server's time without reading the body (decode, verdicts, encode)
    errors: int
    rss_mib: float
    hwm_mib: float
    target_ms: float | None

    @property
    def server_side_target(self) -> bool:
        """NodeList rows are judged on the server's p99 (the 10 MB upload is the client's), name lists
        on the round trip kube-scheduler waits for."""
        return self.mode.startswith("nodelist")

    @property
    def verdict(self) -> str:
        if self.target_ms is None:
            return "-"
        judged = self.server_p99_ms if self.server_side_target else self.p99_ms
        return "PASS" if judged <= self.target_ms and self.errors == 0 else "MISS"


def table(rows: list[Row]) -> str:
    header = [
        "mode",
        "nodes",
        "verb",
        "n",
        "p50 ms",
        "p99 ms",
        "max ms",
        "srv p50",
        "srv p99",
        "read p50",
        "proc p99",
        "errors",
    ]
    header += ["RSS MiB", "HWM MiB", "target", ""]
    lines = [header]
    for r in rows:
        judged = "srv p99" if r.server_side_target else "p99"
        target = f"{judged} <= {r.target_ms:g} ms" if r.target_ms is not None else "-"
        handler = [
            "-" if math.isnan(v) else f"{v:.2f}"
            for v in (r.server_p50_ms, r.server_p99_ms, r.read_p50_ms, r.processing_p99_ms)
        ]
        times = [f"{r.p50_ms:.2f}", f"{r.p99_ms:.2f}", f"{r.max_ms:.2f}", *handler]
        memory = [f"{r.rss_mib:.0f}", f"{r.hwm_mib:.0f}"]
        mode = f"{r.mode}+queues" if r.queues else r.mode
        lines.append([mode, f"{r.nodes:,}", r.verb, str(r.count), *times, str(r.errors), *memory, target, r.verdict])
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = [" | ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in lines]
    out.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(out)
