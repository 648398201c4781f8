"""``deviceChoice`` end to end in process: the score plugins place a share with the profile's device
choice, and /bind's DRA allocation takes the same device (``app.pipeline.device_preference``)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app.config import ExtenderConfiguration
from simulator import sharing
from simulator.simulate import _Scheduler
from simulator.trace import SimPod, _pod_body
from tests.simulator.test_sharing import node


def pod(name: str, gpus: int = 1, milli: int = 1000) -> SimPod:
    return SimPod(name, _pod_body(name, 100, 1024, gpus), 100, 1024 * 1024 * 1024, gpus, milli)


# One type that wants half a GPU: a 300 share on the half-used GPU leaves 200 short of it; on the
# free one it leaves the half-used GPU's 500 and 700, both enough.
HALVES = [{"cpu": 100, "gpuMilli": 500, "gpus": 1, "popularity": 1}]


def config(choice: str, **settings: Any) -> ExtenderConfiguration:
    plugins = [{"name": "GpuFragmentation", "args": {"workload": HALVES, "mapping": "Linear"}}]
    return ExtenderConfiguration.model_validate({"plugins": plugins, "deviceChoice": choice, **settings})


def devices_of(scheduler: _Scheduler, *pods: Any) -> list[dict[int, int] | None]:
    async def run() -> list[dict[int, int] | None]:
        out = []
        for item in pods:
            assert await scheduler.schedule(sharing.with_claim(item)) == "a"
            out.append(scheduler.devices(item))
        return out

    return asyncio.run(run())


@pytest.mark.parametrize(("choice", "second"), [("FirstFit", {0: 300}), ("LeastFragmentation", {1: 300})])
def test_bind_allocates_the_device_the_scores_chose(choice: str, second: dict[int, int]) -> None:
    scheduler = _Scheduler(config(choice), [node("a", 2)], seed=0, sharing="dra")
    first, then = pod("half", milli=500), pod("share", milli=300)
    assert devices_of(scheduler, first, then) == [{0: 500}, second]
    scheduler.cache.dra.check_invariants()


def test_whole_gpus_are_taken_by_first_fit_either_way() -> None:
    scheduler = _Scheduler(config("LeastFragmentation"), [node("a", 3)], seed=0, sharing="dra")
    assert devices_of(scheduler, pod("half", milli=500), pod("two", gpus=2)) == [{0: 500}, {1: 1000, 2: 1000}]


def test_device_choice_needs_a_fragmentation_plugin() -> None:
    with pytest.raises(ValueError, match="deviceChoice: LeastFragmentation needs a GpuFragmentation plugin"):
        ExtenderConfiguration.model_validate({"deviceChoice": "LeastFragmentation"})
