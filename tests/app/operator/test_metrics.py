"""The per-request counter children the service keeps are the registry's own children."""

from __future__ import annotations

from app.operator.metrics import Metrics


def test_kept_children_count_in_the_exported_samples() -> None:
    metrics = Metrics()
    metrics.result("filter", "ok").inc()
    metrics.result("filter", "ok").inc()
    metrics.result("bind", "ok").inc()
    metrics.filter_failure("Insufficient cpu").inc(3)
    metrics.filter_failures.labels("Insufficient cpu").inc()  # the same child, by the registry's path
    assert metrics.result("filter", "ok") is metrics.results.labels("filter", "ok")
    sample = metrics.registry.get_sample_value
    assert sample("kube_gpu_extender_results_total", {"verb": "filter", "outcome": "ok"}) == 2.0
    assert sample("kube_gpu_extender_results_total", {"verb": "bind", "outcome": "ok"}) == 1.0
    assert sample("kube_gpu_extender_filter_failures_total", {"reason": "Insufficient cpu"}) == 4.0
