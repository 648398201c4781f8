"""Over-commit under interleaving: ~1,500 filter/bind calls from concurrent cycles against 5 nodes
(the scenario of bench/overcommit.py at a small size), then an audit recomputed from scratch."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from app.cluster.objects import pod_from_obj
from bench.overcommit import CONFIG, QUEUE_LABEL, audit, cluster_objects, interleave
from tests.conftest import make_service, pod_obj


def test_interleaved_filter_and_bind_never_overcommit() -> None:
    nodes, dra = cluster_objects()
    service = make_service(nodes, config=CONFIG, dra=dra)
    outcome = asyncio.run(interleave(service, calls=1500, seed=7, concurrency=32, audit_every_bind=True))
    assert outcome.violations == []
    assert audit(service.cache) == []
    service.cache.check_invariants()
    service.cache.dra.check_invariants()
    assert outcome.calls >= 1500
    # Every bind answer is a success or an expected refusal (a race lost, or a full cluster).
    assert set(outcome.results) <= {
        "bound",
        "unschedulable",
        "bind refused: no longer fits",
        "bind refused: cannot take the claims",
        "bind refused: queue quota used up",
    }, outcome.results
    # The run was contended, or it would prove nothing: both kinds of capacity ran out at times.
    assert outcome.results["bind refused: no longer fits"] > 0
    assert outcome.results["bind refused: cannot take the claims"] > 0
    assert outcome.results["bind refused: queue quota used up"] > 0
    assert outcome.results["bound"] > 100


def test_audit_sees_an_overcommitted_node_and_a_shared_device() -> None:
    """The audit can fail: a GPU node over its allocatable, and two claims on one device."""
    nodes, dra = cluster_objects()
    service = make_service(nodes, config=CONFIG, dra=dra)
    cache = service.cache
    for i in range(3):  # 3 x 4 GPUs on a node with 8
        cache.upsert_pod(pod_from_obj(pod_obj(f"big{i}", gpus=4, node="g0", phase="Running")))
    ok = asyncio.run(interleave(service, calls=40, seed=1, concurrency=1))
    assert ok.results["bound"] > 0
    claims = [c for c in cache.dra.claims.values() if c.allocation is not None]
    assert claims, "the short run allocated a claim"
    first = claims[0]
    cache.dra.upsert_claim(replace(first, name="copy", uid="copy-uid", reserved_for=()))
    problems = audit(cache)
    assert any(p.startswith("node g0: ") and "8 allocatable" in p for p in problems), problems
    assert any(p.startswith("device ") and "default/copy" in p for p in problems), problems


def test_audit_sees_a_queue_over_its_quota() -> None:
    """The queue part of the audit can fail too: 2 x 4 GPUs of ClusterQueue team (nominal 6), bypassing the verbs."""
    nodes, dra = cluster_objects()
    service = make_service(nodes, config=CONFIG, dra=dra)
    for i in range(2):
        pod = pod_obj(f"q{i}", gpus=4, node=f"g{i}", phase="Running")
        pod["metadata"]["labels"] = {QUEUE_LABEL: "lq"}
        service.cache.upsert_pod(pod_from_obj(pod))
    assert audit(service.cache) == ["ClusterQueue team: 8 nvidia.com/gpu in use, nominal quota 6"]
