"""The extender's own verb latencies from its ``/metrics`` text: per verb the count, the mean and the
p50 / p99 interpolated inside the histogram's buckets (``kube_gpu_extender_request_duration_seconds``),
as ``bench.throughput`` prints them per phase."""

from __future__ import annotations

import math
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["quantile", "verb_latencies"]

FAMILY = "kube_gpu_extender_request_duration_seconds"


def verb_latencies(metrics_text: str) -> dict[str, dict[str, float]]:
    """Per verb with at least one call: count, mean_ms, p50_ms and p99_ms."""
    out: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(metrics_text):
        if family.name != FAMILY:
            continue
        by_verb: dict[str, dict[str, Any]] = {}
        for sample in family.samples:
            entry = by_verb.setdefault(sample.labels.get("verb", ""), {"buckets": []})
            if sample.name.endswith("_bucket"):
                entry["buckets"].append((float(sample.labels["le"]), sample.value))
            elif sample.name.endswith("_sum"):
                entry["sum"] = sample.value
            elif sample.name.endswith("_count"):
                entry["count"] = sample.value
        for verb, entry in by_verb.items():
            count = entry.get("count", 0)
            if not count:
                continue
            buckets = sorted(entry["buckets"])
            out[verb] = {
                "count": count,
                "mean_ms": entry["sum"] / count * 1000,
                "p50_ms": quantile(buckets, count, 0.5) * 1000,
                "p99_ms": quantile(buckets, count, 0.99) * 1000,
            }
    return out


def quantile(buckets: list[tuple[float, float]], count: float, q: float) -> float:
    """The ``q`` quantile of a histogram's cumulative ``(upper bound, count)`` buckets, linear inside
    the bucket that holds it (Prometheus' ``histogram_quantile``); the last finite bound when it falls
    in the +Inf bucket."""
    rank, previous_bound, previous_count = q * count, 0.0, 0.0
    for bound, cumulative in buckets:
        if cumulative >= rank:
            if math.isinf(bound):
                return previous_bound
            share = (rank - previous_count) / max(cumulative - previous_count, 1e-9)
            return previous_bound + (bound - previous_bound) * share
        previous_bound, previous_count = bound, cumulative
    return previous_bound
