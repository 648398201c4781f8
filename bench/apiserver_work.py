"""What the API server did during a benchmark phase, from the counters of its /metrics.

Requests by verb and resource (``apiserver_request_total``) with the time it took for them
(``apiserver_request_duration_seconds``), and watch events sent, by resource, with their bytes
(``apiserver_watch_events_total``, ``apiserver_watch_events_sizes``): the difference
between two scrapes, for ``bench.throughput``. Two phases that make the same requests but differ in
watch events show what a component's watches cost the API server (an extender's pod watch is JSON,
kube-scheduler's protobuf).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["KEPT", "KEPT_BYTES", "counts", "describe", "work"]

# Only differences at least this large are kept: the control plane's own background requests
# (leases, discovery) add a few dozen a phase, and their watch events a few hundred bytes.
KEPT = 50
KEPT_BYTES = 2**16


def counts(text: str) -> dict[str, float]:
    """The counters of one /metrics scrape: ``requests <VERB> <resource>[/<subresource>]`` and the
    seconds the API server spent on them (``seconds <VERB> ...``, non-watch requests), ``watch
    events <resource>`` and ``watch bytes <resource>`` (resource as ``name[.group]``)."""
    out: defaultdict[str, float] = defaultdict(float)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            resource = labels.get("resource", "")
            group = labels.get("group", "")
            named = f"{resource}.{group}" if group else resource
            sub = labels.get("subresource", "")
            request = f"{labels.get('verb', '')} {resource}{'/' + sub if sub else ''}"
            if sample.name == "apiserver_request_total":
                out[f"requests {request}"] += sample.value
            elif sample.name == "apiserver_request_duration_seconds_sum" and labels.get("verb") != "WATCH":
                out[f"seconds {request}"] += sample.value
            elif sample.name == "apiserver_watch_events_total":
                out[f"watch events {named}"] += sample.value
            elif sample.name == "apiserver_watch_events_sizes_sum":
                out[f"watch bytes {named}"] += sample.value
    return dict(out)


def work(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """What grew between two scrapes by at least ``KEPT`` (bytes: ``KEPT_BYTES``), largest first;
    the seconds of the requests kept, after them."""
    grown = {key: after[key] - before.get(key, 0.0) for key in after}
    kept = [
        (k, v)
        for k, v in grown.items()
        if not k.startswith("seconds") and v >= (KEPT_BYTES if k.startswith("watch bytes") else KEPT)
    ]
    kept.sort(key=lambda item: (-item[1], item[0]))
    seconds = [(f"seconds {k[len('requests ') :]}", v) for k, v in kept if k.startswith("requests ")]
    return dict(kept + [(k, max(grown.get(k, 0.0), 0.0)) for k, _ in seconds if k in grown])


def describe(grown: dict[str, float], per: int = 0) -> Iterable[str]:
    """One line per counter (with ``per`` pods, also per pod); a request's line says the mean time
    the API server took for it."""
    for key, value in grown.items():
        if key.startswith("seconds "):
            continue
        if key.startswith("watch bytes"):
            each = f" ({value / per / 1024:.1f} KiB per pod)" if per else ""
            yield f"{key}: {value / 2**20:.1f} MiB{each}"
            continue
        each = f" ({value / per:.1f} per pod)" if per else ""
        seconds = grown.get(f"seconds {key[len('requests ') :]}") if key.startswith("requests ") else None
        mean = f", {1000 * seconds / value:.1f} ms each in the API server" if seconds is not None and value else ""
        yield f"{key}: {value:.0f}{each}{mean}"
