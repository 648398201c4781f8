"""Prometheus metrics. kube-scheduler exports nothing per extender, so latency and errors come from us."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["Metrics"]

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class _CacheCollector(Collector):
    """Reads counts at scrape time, so the hot paths never update gauges."""

    def __init__(self, read: Callable[[], dict[str, dict[str, float]]]) -> None:
        self._read = read

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        values = self._read()
        objects = GaugeMetricFamily("kube_gpu_extender_cache_objects", "Objects in the cache.", labels=["kind"])
        for kind, count in values.get("objects", {}).items():
            objects.add_metric([kind], count)
        yield objects
        ledger = GaugeMetricFamily("kube_gpu_extender_assume_ledger_size", "Pods assumed but not yet confirmed.")
        ledger.add_metric([], values.get("ledger", {}).get("size", 0))
        yield ledger
        synced = GaugeMetricFamily(
            "kube_gpu_extender_cache_synced", "1 when the watched resource has synced.", labels=["resource"]
        )
        for resource, value in values.get("synced", {}).items():
            synced.add_metric([resource], value)
        yield synced
        if "gang_plans" in values:
            plans = GaugeMetricFamily(
                "kube_gpu_extender_gang_plans", "Gangs whose plan holds room for members not bound yet."
            )
            plans.add_metric([], values["gang_plans"].get("", 0.0))
            yield plans
            held = GaugeMetricFamily(
                "kube_gpu_extender_gang_held_pods", "Gang members holding room on their planned node, not bound yet."
            )
            held.add_metric([], values["gang_held_pods"].get("", 0.0))
            yield held
            decisions = CounterMetricFamily(
                "kube_gpu_extender_gang_decisions",
                "Gang decisions by outcome: planned, unschedulable, waiting, released, complete.",
                labels=["outcome"],
            )
            for outcome, count in values.get("gang_decisions", {}).items():
                decisions.add_metric([outcome], count)
            yield decisions
        shares = values.get("queue_weighted_share")
        if shares is not None:
            share = GaugeMetricFamily(
                "kube_gpu_extender_queue_weighted_share",
                "Dominant resource share (per-mille, KEP-8902 flavor weights, divided by the queue weight; "
                "+Inf for weight 0 while borrowing) of each ClusterQueue and cohort, like Kueue's weighted_share.",
                labels=["queue"],
            )
            for queue, value in shares.items():
                share.add_metric([queue], value)
            yield share


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.request_seconds = Histogram(
            "kube_gpu_extender_request_duration_seconds",
            "Server-side latency of extender verbs.",
            ["verb"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.results = Counter(
            "kube_gpu_extender_results_total", "Extender calls by outcome.", ["verb", "outcome"], registry=self.registry
        )
        self.filter_failures = Counter(
            "kube_gpu_extender_filter_failures_total",
            "Nodes rejected by the filter, by reason.",
            ["reason"],
            registry=self.registry,
        )
        self.retry_requests = Counter(
            "kube_gpu_extender_retry_requests_total",
            "Pods the extender asked kube-scheduler to retry after freeing capacity, by outcome "
            "(requested, gone, failed).",
            ["outcome"],
            registry=self.registry,
        )
        self.filter_catch_up = Counter(
            "kube_gpu_extender_filter_catch_up_total",
            "Filter answers that waited for the cache to catch up with kube-scheduler, by whether it changed.",
            ["outcome"],
            registry=self.registry,
        )
        self.bind_errors = Counter(
            "kube_gpu_extender_bind_errors_total", "Failed binds, by kind.", ["kind"], registry=self.registry
        )
        self.watch_restarts = Counter(
            "kube_gpu_extender_watch_restarts_total",
            "Watch reconnections, by resource and cause.",
            ["resource", "cause"],
            registry=self.registry,
        )
        self.pods_bound_without_extender = Counter(
            "kube_gpu_extender_pods_bound_without_extender_total",
            "Pods that went through /filter and were then bound without the extender's /bind "
            "(bindVerb unset, or an ignorable extender whose bind failed).",
            registry=self.registry,
        )

        self.reclaim_evictions = Counter(
            "kube_gpu_extender_reclaim_evictions_total",
            "Reclaimer evictions of running pods for a pending pod of another queue, by the victim's queue and "
            "outcome (evicted, gone, blocked: refused by a PodDisruptionBudget, failed; dry-run: chosen but not "
            "evicted in dry-run mode, counted per victim workload).",
            ["queue", "outcome"],
            registry=self.registry,
        )
        self.reclaim_decision_seconds = Histogram(
            "kube_gpu_extender_reclaim_decision_seconds",
            "Time the reclaimer spends deciding one round (every pending pod it judges).",
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )

        # Children by label values, for the per-request counters: ``labels()`` takes a lock and
        # builds a key on every call. The counters hold the same children, so this adds no growth.
        self._results: dict[tuple[str, str], Counter] = {}
        self._filter_failures: dict[str, Counter] = {}
        self._cache_collectors: list[_CacheCollector] = []

    def result(self, verb: str, outcome: str) -> Counter:
        """``results.labels(verb, outcome)``."""
        child = self._results.get((verb, outcome))
        if child is None:
            child = self._results[(verb, outcome)] = self.results.labels(verb, outcome)
        return child

    def filter_failure(self, reason: str) -> Counter:
        """``filter_failures.labels(reason)``."""
        child = self._filter_failures.get(reason)
        if child is None:
            child = self._filter_failures[reason] = self.filter_failures.labels(reason)
        return child

    def register_cache(self, read: Callable[[], dict[str, dict[str, float]]]) -> None:
        collector = _CacheCollector(read)
        self.registry.register(collector)
        self._cache_collectors.append(collector)

    def close(self) -> None:
        """Unregister the collectors ``register_cache`` added (they call back into the service)."""
        for collector in self._cache_collectors:
            self.registry.unregister(collector)
        self._cache_collectors.clear()
