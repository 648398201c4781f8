"""The cyclic GC as our long-lived processes run it (app.gctuning)."""

from __future__ import annotations

import asyncio
import gc

from app import gctuning
from app.cluster.snapshot import SOURCES
from app.operator.metrics import Metrics
from app.runtime import Runtime
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


def test_a_cluster_runtime_freezes_what_its_first_lists_built_once_it_is_ready() -> None:
    """In cluster mode the cache is filled by the watches after start: it is frozen once the service
    is ready, not before (a full collection would otherwise walk it)."""
    service = make_service([node_obj("n1")], synced=False)
    runtime = Runtime(service.config, service.cache, service, Metrics())
    before, frozen = gc.get_threshold(), gc.get_freeze_count()

    async def main() -> None:
        task = asyncio.create_task(runtime._freeze_once_ready(poll=0.01))
        for _ in range(3):
            await asyncio.sleep(0.01)
        assert not task.done() and gc.get_freeze_count() == frozen  # not ready: waits
        for source in SOURCES:
            service.cache.source(source).synced = True
        await asyncio.wait_for(task, timeout=10)

    try:
        asyncio.run(main())
        assert gc.get_freeze_count() > frozen and gc.get_threshold() == gctuning.THRESHOLD
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()
