"""bench/bind.py's core at a tiny size: concurrent /filter + /bind against the real API server, some
binds sent to nodes already full, then the audit from the API server (bench/bind_report.py)."""

from __future__ import annotations

import asyncio

from bench.bind import create_pods, drive, wait_pods_seen
from bench.bind_report import audit
from tests.e2e.conftest import Group


def test_concurrent_and_stale_binds_never_over_commit(group: Group) -> None:
    nodes = [group.node(f"n{i}") for i in range(4)]  # 32 GPUs
    gpus = [1] * 28 + [2] * 8 + [4] * 4  # 60 GPUs asked: the nodes fill up and some pods find none
    pods = create_pods(group.cluster.plane, group.name, gpus)
    wait_pods_seen(group.cluster.extender, pods, timeout=30)

    run = asyncio.run(drive(group.cluster.extender.url, pods, nodes, concurrency=4, stale_share=0.5, timeout=60))
    check = audit(group.cluster.plane, nodes, run.confirmed, group.name)

    assert not run.timed_out
    assert check.over_committed == {}
    assert check.confirmed_not_bound == [] and check.bound_unconfirmed == []
    assert run.stale_sent > 0 and run.stale_accepted == 0
    assert run.errors["no-fit"] >= run.stale_sent, run.errors  # every stale bind refused as not fitting
    assert len(run.confirmed) + run.unschedulable + run.given_up == len(pods)
    assert run.given_up == 0
    assert check.gpu_use > 0.9  # 1-GPU pods were left to fill what the larger ones could not
