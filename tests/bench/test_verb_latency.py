"""bench.verb_latency: the extender's verb latencies read back from its own /metrics exposition."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from app.operator.metrics import Metrics
from bench.verb_latency import quantile, verb_latencies


def test_quantile_interpolates_inside_the_bucket_and_stops_at_the_last_finite_bound() -> None:
    buckets = [(0.001, 40.0), (0.002, 80.0), (0.005, 100.0), (float("inf"), 100.0)]
    assert quantile(buckets, 100, 0.2) == pytest.approx(0.0005)  # half of the first bucket's 40
    assert quantile(buckets, 100, 0.5) == pytest.approx(0.00125)  # 10 of the second bucket's 40
    assert quantile(buckets, 100, 0.99) == pytest.approx(0.002 + 0.003 * 19 / 20)
    assert quantile([(0.001, 1.0), (float("inf"), 10.0)], 10, 0.99) == 0.001  # in +Inf: the last finite bound


def test_verb_latencies_from_the_extenders_own_histogram() -> None:
    metrics = Metrics()
    for seconds in (0.0004, 0.0006, 0.0008, 0.0030):
        metrics.request_seconds.labels("filter").observe(seconds)
    metrics.request_seconds.labels("bind").observe(0.040)
    metrics.request_seconds.labels("preempt")  # a verb never called is left out
    latencies = verb_latencies(generate_latest(metrics.registry).decode())
    assert set(latencies) == {"filter", "bind"}
    assert latencies["filter"]["count"] == 4
    assert latencies["filter"]["mean_ms"] == pytest.approx(1.2)
    assert 0.4 <= latencies["filter"]["p50_ms"] <= 1.0 < latencies["filter"]["p99_ms"] <= 5.0
    assert latencies["bind"]["count"] == 1 and latencies["bind"]["mean_ms"] == pytest.approx(40.0)
