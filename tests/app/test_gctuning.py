"""The cyclic GC as our long-lived processes run it (app.gctuning)."""

from __future__ import annotations

import asyncio
import gc

from app import gctuning
from app.cluster.snapshot import SOURCES
from app.operator.metrics import Metrics
from app.runtime import Runtime
from tests.app.apiharness import eventually
from tests.conftest import make_service, node_obj


def test_freeze_and_tune_sets_the_threshold_and_freezes_what_exists() -> None:
    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    try:
        assert gctuning.freeze_and_tune() == before
        assert gc.get_threshold() == gctuning.THRESHOLD and gc.get_freeze_count() > frozen
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


def test_tuned_puts_everything_back() -> None:
    before = gc.get_threshold()
    with gctuning.tuned():
        assert gc.get_threshold() == gctuning.THRESHOLD and gc.get_freeze_count() > 0
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_a_cluster_runtime_freezes_what_its_lists_built_once_ready_and_after_each_relist() -> None:
    """In cluster mode the cache is filled by the watches after start: it is frozen once the service
    is ready (not before: a full collection would otherwise walk it), and again after a relist."""
    service = make_service([node_obj("n1")], synced=False)
    runtime = Runtime(service.config, service.cache, service, Metrics())
    before = gc.get_threshold()
    polls = [0]
    ready = service.not_ready_reason

    def counted_poll() -> str:  # the task asks readiness on every poll
        polls[0] += 1
        return ready()

    service.not_ready_reason = counted_poll  # type: ignore[method-assign]

    async def polled() -> None:
        """Until the task has looked at least twice since now (for what it must *not* do)."""
        seen = polls[0]
        await eventually(lambda: polls[0] >= seen + 2, "two more polls")

    async def main() -> None:
        frozen = gc.get_freeze_count()
        task = asyncio.create_task(runtime._freeze_when_listed(poll=0.01, min_interval=0.0))
        try:
            await polled()
            assert gc.get_freeze_count() == frozen  # not ready: waits
            for source in SOURCES:
                state = service.cache.source(source)
                state.synced, state.relists = True, 1
            await eventually(lambda: gc.get_freeze_count() > frozen, "frozen once listed")
            gc.unfreeze()
            await polled()
            assert gc.get_freeze_count() == 0  # nothing listed anew: not frozen again
            service.cache.source("pods").relists += 1
            await eventually(lambda: gc.get_freeze_count() > 0, "frozen again after a relist")
        finally:
            task.cancel()

    try:
        asyncio.run(main())
        assert gc.get_threshold() == gctuning.THRESHOLD
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


def test_a_source_that_keeps_relisting_is_not_frozen_for_each_list() -> None:
    """Each freeze is a full collection: at most one per ``min_interval``, whatever relists."""
    service = make_service([node_obj("n1")])
    runtime = Runtime(service.config, service.cache, service, Metrics())
    before = gc.get_threshold()

    async def main() -> None:
        frozen = gc.get_freeze_count()
        task = asyncio.create_task(runtime._freeze_when_listed(poll=0.01, min_interval=3600.0))
        try:
            await eventually(lambda: gc.get_freeze_count() > frozen, "frozen once listed")
            gc.unfreeze()
            for _ in range(3):
                service.cache.source("pods").relists += 1
                await asyncio.sleep(0.02)
            assert gc.get_freeze_count() == 0
        finally:
            task.cancel()

    try:
        asyncio.run(main())
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()
