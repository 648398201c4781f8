"""High availability: a standby extender (its own cache, watching the same API server, never called)
takes over from a leader. Its cache is already synced when it gets its first request, and its first
decisions account for what the old leader bound: a GPU node the leader filled is refused, and a DRA
device the leader allocated is not given out again."""

from __future__ import annotations

import asyncio

from app.cluster.reflector import Reflector
from tests.app.apiharness import SOURCES, Harness, add_dra_node, eventually, server_gpus
from tests.conftest import bind_body, filter_answer, filter_body, node_obj, pod_obj, with_claims
from tests.fakeapi import FakeAPIServer


def relists(reflectors: list[Reflector]) -> dict[str, int]:
    """Relists of the sources the fake API serves (not the optional devicetaintrules, a 404 there)."""
    return {r.resource.name: r.state.relists for r in reflectors if r.resource.name in SOURCES}


def test_standby_takes_over_with_a_warm_cache(fake: FakeAPIServer) -> None:
    fake.add(node_obj("g1", gpus=4))
    fake.add(node_obj("g2", gpus=4))
    add_dra_node(fake, "c1", "c2")
    big = fake.add(pod_obj("big", gpus=4))
    dra1 = fake.add(with_claims(pod_obj("dra1", gpus=0), "c1"))
    small = fake.add(pod_obj("small", gpus=1))
    dra2 = fake.add(with_claims(pod_obj("dra2", gpus=0), "c2"))

    async def body() -> None:
        leader, standby = Harness(fake), Harness(fake)
        leader_tasks, standby_tasks = leader.start(), standby.start()
        try:
            await eventually(lambda: leader.exact() and standby.exact(), "both caches synced")
            # The leader schedules: big fills g1, dra1 takes one of d1's two devices.
            assert filter_answer(leader.service, filter_body(big, ["g1", "g2"]))["NodeNames"] == ["g1", "g2"]
            assert await leader.service.bind(bind_body(big, "g1")) == {"Error": ""}
            assert filter_answer(leader.service, filter_body(dra1, ["d1"]))["NodeNames"] == ["d1"]
            assert await leader.service.bind(bind_body(dra1, "d1")) == {"Error": ""}
            taken = fake.get("ResourceClaim", "c1", "default")["status"]["allocation"]["devices"]["results"]  # type: ignore[index]
            assert [r["device"] for r in taken] == ["gpu-0"]  # d1's first device, in published order
        finally:
            await leader.stop(leader_tasks)  # the leader is gone (lease lost, node down)
        try:
            # The standby's watches delivered the leader's writes; it never relisted for it.
            await eventually(standby.exact, "standby caught up through its watches")
            assert standby.service.not_ready_reason() == ""
            assert relists(standby.reflectors) == dict.fromkeys(SOURCES, 1)
            assert not standby.cache.ledger and not standby.service.decisions  # never called so far
            # First decisions: g1 is full (4 of 4 GPUs, bound by the leader), gpu-0 is taken.
            answer = filter_answer(standby.service, filter_body(small, ["g1", "g2"]))
            assert answer["NodeNames"] == ["g2"] and "Insufficient nvidia.com/gpu" in answer["FailedNodes"]["g1"]
            assert await standby.service.bind(bind_body(small, "g1")) != {"Error": ""}  # a stale choice: refused
            assert await standby.service.bind(bind_body(small, "g2")) == {"Error": ""}
            assert filter_answer(standby.service, filter_body(dra2, ["d1"]))["NodeNames"] == ["d1"]
            assert await standby.service.bind(bind_body(dra2, "d1")) == {"Error": ""}
            got = fake.get("ResourceClaim", "c2", "default")["status"]["allocation"]["devices"]["results"]  # type: ignore[index]
            assert [r["device"] for r in got] == ["gpu-1"]
            await standby.settled("the standby's own binds confirmed")
            assert server_gpus(fake) == {"g1": 4, "g2": 1}
        finally:
            await standby.stop(standby_tasks)
        standby.cache.check_invariants()

    asyncio.run(body())
