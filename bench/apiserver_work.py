"""What the API server did during a benchmark phase, from the counters of its /metrics.

Requests by verb and resource (``apiserver_request_total``) and watch events sent, by resource, with
their bytes (``apiserver_watch_events_total``, ``apiserver_watch_events_sizes``): the difference
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
    """The counters of one /metrics scrape: ``requests <VERB> <resource>[/<subresource>]``,
    ``watch events <resource>`` and ``watch bytes <resource>`` (resource as ``name[.group]``)."""
    out: defaultdict[str, float] = defaultdict(float)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            resource = labels.get("resource", "")
            group = labels.get("group", "")
            named = f"{resource}.{group}" if group else resource
            if sample.name == "apiserver_request_total":
                sub = labels.get("subresource", "")
                out[f"requests {labels.get('verb', '')} {resource}{'/' + sub if sub else ''}"] += sample.value
            elif sample.name == "apiserver_watch_events_total":
                out[f"watch events {named}"] += sample.value
            elif sample.name == "apiserver_watch_events_sizes_sum":
                out[f"watch bytes {named}"] += sample.value
    return dict(out)


def work(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """What grew between two scrapes by at least ``KEPT`` (bytes: ``KEPT_BYTES``), largest first."""
    grown = {key: after[key] - before.get(key, 0.0) for key in after}
    kept = ((k, v) for k, v in grown.items() if v >= (KEPT_BYTES if k.startswith("watch bytes") else KEPT))
    return dict(sorted(kept, key=lambda item: (-item[1], item[0])))


def describe(grown: dict[str, float], per: int = 0) -> Iterable[str]:
    """One line per counter; with ``per`` (pods) also the figure per pod."""
    for key, value in grown.items():
        figure = f"{value / 2**20:.1f} MiB" if key.startswith("watch bytes") else f"{value:.0f}"
        each = f" ({value / per:.1f} per pod)" if per and not key.startswith("watch bytes") else ""
        if per and key.startswith("watch bytes"):
            each = f" ({value / per / 1024:.1f} KiB per pod)"
        yield f"{key}: {figure}{each}"
