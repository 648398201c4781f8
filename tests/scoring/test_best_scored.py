"""best_scored: the nodes /filter keeps with ``filterReturns: BestScored``."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from scoring.best_scored import best_scored, best_scored_batch
from scoring.priority_scale import candidates


@pytest.mark.parametrize(
    ("scores", "keep"),
    [
        ([50], [True]),
        ([76, 79, 83], [False, False, True]),
        ([90, 90, 10], [True, True, False]),  # ties are all kept: kube-scheduler breaks them
        ([None, 40, 60], [False, False, True]),
        ([None, 60, 60], [False, True, True]),
        ([None, None], [True, True]),  # nothing to choose by: all stay
        ([], []),
    ],
)
def test_best_scored(scores: list[int | None], keep: list[bool]) -> None:
    assert best_scored(scores) == keep


scores_lists = st.lists(st.one_of(st.none(), st.integers(0, 100)), max_size=40)


@given(scores_lists)
def test_batch_agrees_with_the_definition(scores: list[int | None]) -> None:
    known = np.array([s is not None for s in scores], dtype=np.bool_)
    values = np.array([0 if s is None else s for s in scores], dtype=np.int64)
    assert best_scored_batch(values, known).tolist() == best_scored(scores)


@given(scores_lists.filter(lambda scores: any(s is not None for s in scores)))
def test_kept_nodes_are_the_candidates_scale_top_priority(scores: list[int | None]) -> None:
    """With some node scored, the nodes kept are exactly those /prioritize would give 10, so
    kube-scheduler (weight 200) would have chosen among them anyway."""
    assert best_scored(scores) == [p == 10 and s is not None for p, s in zip(candidates(scores), scores, strict=True)]
