"""bench.stage_cpu charges each stage the CPU between its entry and exit less what the stages it
calls took, only while started; the rest of a phase's CPU is what no stage held."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from types import ModuleType

import pytest

from bench import stage_cpu


class Clock:
    """A CPU clock that moves only when told to."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def test_a_stage_is_charged_its_own_time_not_its_inner_stages() -> None:
    clock = Clock()
    stages = stage_cpu.StageClock(clock)

    def inner() -> str:
        clock.now += 30
        return "inner"

    charged_inner = stages.wrap("inner", inner)

    def outer() -> str:
        clock.now += 100
        got = charged_inner()
        clock.now += 5
        return got

    charged_outer = stages.wrap("outer", outer)
    assert charged_outer() == "inner"  # nothing counted before start, and nothing changes
    assert stages.nanos == {}
    stages.start()
    assert charged_outer() == "inner"
    assert charged_outer() == "inner"
    assert charged_inner() == "inner"
    stages.stop()
    assert charged_outer() == "inner"
    assert stages.nanos == {"outer": 2 * 105, "inner": 3 * 30}
    assert stages.calls == {"outer": 2, "inner": 3}


def test_a_stage_that_raises_is_charged_and_its_caller_keeps_its_own_share() -> None:
    clock = Clock()
    stages = stage_cpu.StageClock(clock)

    def failing() -> None:
        clock.now += 7
        raise ValueError("bad")

    charged_failing = stages.wrap("failing", failing)

    def caller() -> None:
        clock.now += 3
        with pytest.raises(ValueError):
            charged_failing()

    charged_caller = stages.wrap("caller", caller)
    stages.start()
    charged_caller()
    assert stages.nanos == {"failing": 7, "caller": 3}


@pytest.fixture
def toy_module() -> Iterator[ModuleType]:
    module = importlib.import_module("tests.bench.busy")
    saved = dict(vars(module))
    yield module
    for name, value in saved.items():
        setattr(module, name, value)


def test_install_wraps_the_named_function_where_it_is_looked_up(toy_module: ModuleType) -> None:
    original = toy_module.spin
    stages = stage_cpu.StageClock()
    stages.install((("spinning", "tests.bench.busy:spin"),))
    assert toy_module.spin is not original
    assert toy_module.spin.__wrapped__ is original


def test_every_stage_names_a_function_of_the_extender() -> None:
    for _, target in stage_cpu.STAGES:
        module_name, _, path = target.partition(":")
        owner: object = importlib.import_module(module_name)
        for part in path.split("."):
            owner = getattr(owner, part)
        assert callable(owner), target


def test_per_pod_gives_each_stage_and_the_rest_of_the_phase() -> None:
    nanos = {"/filter": 800_000_000, "watch: events applied": 200_000_000}
    got = stage_cpu.per_pod(nanos, cpu_seconds=2.5, pods=2000)
    assert got == {"/filter": 400.0, "watch: events applied": 100.0, stage_cpu.REST: 750.0}
    assert stage_cpu.per_pod(nanos, cpu_seconds=2.5, pods=0) == {}
