"""The cyclic GC as our long-lived processes run it (app.gctuning)."""

from __future__ import annotations

import gc

from app import gctuning


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
