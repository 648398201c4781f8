"""bench.apiserver_work: the API server's requests and watch events between two /metrics scrapes."""

from __future__ import annotations

from bench.apiserver_work import counts, describe, work


def _request(code: int, group: str, resource: str, subresource: str, verb: str, value: int) -> str:
    labels = (
        f'code="{code}",component="apiserver",dry_run="",group="{group}",resource="{resource}",'
        f'scope="resource",subresource="{subresource}",verb="{verb}",version="v1"'
    )
    return f"apiserver_request_total{{{labels}}} {value}"


def _seconds(subresource: str, verb: str, value: float) -> str:
    labels = (
        f'component="apiserver",dry_run="",group="",resource="pods",scope="resource",'
        f'subresource="{subresource}",verb="{verb}",version="v1"'
    )
    return f"apiserver_request_duration_seconds_sum{{{labels}}} {value}"


def scrape(binds: int, events: int, watch_bytes: float, leases: int, binding_seconds: float = 0.0) -> str:
    """kube-apiserver 1.36's exposition of the counters read (other families are ignored)."""
    requests = "\n".join(
        (
            _request(201, "", "pods", "binding", "POST", binds),
            _request(201, "", "pods", "", "POST", binds),
            _request(409, "", "pods", "binding", "POST", 3),
            _request(200, "coordination.k8s.io", "leases", "", "PUT", leases),
        )
    )
    return f"""# HELP apiserver_request_total [STABLE] Counter of apiserver requests.
# TYPE apiserver_request_total counter
{requests}
# HELP apiserver_request_duration_seconds [STABLE] Response latency distribution in seconds.
# TYPE apiserver_request_duration_seconds histogram
{_seconds("binding", "POST", binding_seconds)}
{_seconds("", "WATCH", 1000 * binding_seconds)}
# HELP apiserver_watch_events_sizes [ALPHA] Watch event size distribution in bytes
# TYPE apiserver_watch_events_sizes histogram
apiserver_watch_events_sizes_bucket{{group="",resource="pods",version="v1",le="1024"}} 0
apiserver_watch_events_sizes_bucket{{group="",resource="pods",version="v1",le="+Inf"}} {events}
apiserver_watch_events_sizes_sum{{group="",resource="pods",version="v1"}} {watch_bytes}
apiserver_watch_events_sizes_count{{group="",resource="pods",version="v1"}} {events}
# HELP apiserver_watch_events_total [ALPHA] Number of events sent in watch clients
# TYPE apiserver_watch_events_total counter
apiserver_watch_events_total{{group="",resource="pods",version="v1"}} {events}
apiserver_watch_events_total{{group="resource.k8s.io",resource="resourceclaims",version="v1"}} 7
# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 12.5
"""


def test_requests_and_watch_events_by_resource_summed_over_codes() -> None:
    found = counts(scrape(binds=10, events=40, watch_bytes=8.5e4, leases=2))
    assert found["requests POST pods/binding"] == 13  # 201 and 409 together
    assert found["requests POST pods"] == 10
    assert found["requests PUT leases"] == 2
    assert found["watch events pods"] == 40
    assert found["watch events resourceclaims.resource.k8s.io"] == 7
    assert found["watch bytes pods"] == 8.5e4
    assert not any(key.startswith("process") for key in found)


def test_what_grew_during_a_phase_largest_first_without_background_noise() -> None:
    before = counts(scrape(binds=100, events=300, watch_bytes=1e6, leases=20, binding_seconds=0.5))
    after = counts(scrape(binds=2100, events=12300, watch_bytes=1e6 + 20 * 2**20, leases=40, binding_seconds=10.5))
    grown = work(before, after)
    assert list(grown)[:4] == [
        "watch bytes pods",
        "watch events pods",
        "requests POST pods",
        "requests POST pods/binding",
    ]
    assert grown["watch events pods"] == 12000 and grown["requests POST pods/binding"] == 2000
    assert grown["seconds POST pods/binding"] == 10.0
    assert "requests PUT leases" not in grown  # 20 more: below what a phase counts
    assert not any("WATCH" in key for key in grown)  # a watch lasts as long as it is open
    assert list(describe(grown, per=2000)) == [
        "watch bytes pods: 20.0 MiB (10.2 KiB per pod)",
        "watch events pods: 12000 (6.0 per pod)",
        "requests POST pods: 2000 (1.0 per pod)",
        "requests POST pods/binding: 2000 (1.0 per pod), 5.0 ms each in the API server",
    ]


def test_a_counter_that_restarted_counts_nothing() -> None:
    """An API server restarted mid-phase starts its counters again: nothing negative is reported."""
    before = counts(scrape(binds=5000, events=9000, watch_bytes=1e7, leases=90))
    after = counts(scrape(binds=10, events=20, watch_bytes=1e4, leases=1))
    assert work(before, after) == {}


def test_a_few_bytes_of_background_watch_events_are_left_out() -> None:
    before = counts(scrape(binds=0, events=0, watch_bytes=1e6, leases=0))
    after = counts(scrape(binds=0, events=0, watch_bytes=1e6 + 900, leases=0))
    assert work(before, after) == {}
    after = counts(scrape(binds=0, events=0, watch_bytes=1e6 + 2**16, leases=0))
    assert work(before, after) == {"watch bytes pods": 2**16}
