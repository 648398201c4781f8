"""priority_scale: 0..100 node scores onto the extender's 0..10, per node or relative to the candidates."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from scoring.priority_scale import (
    ABSOLUTE,
    CANDIDATES,
    absolute,
    candidates,
    candidates_batch,
    scale,
    scale_batch,
)


def test_issue_13_nodes_that_absolute_ties_are_ranked() -> None:
    # An empty, a 1-used and a 2-used 8-GPU node scored 76, 79 and 83 all round to 8 alone.
    assert [absolute(s) for s in (76, 79, 83)] == [8, 8, 8]
    assert candidates([76, 79, 83]) == [0, 4, 10]  # 79: 10 - ceil(10 * 4 / 7) = 4


@pytest.mark.parametrize(
    ("scores", "priorities"),
    [
        ([50], [10]),
        ([50, 50, 50], [10, 10, 10]),
        ([87, 86], [10, 0]),
        ([100, 0, 50, 99, 1], [10, 0, 5, 9, 0]),  # 99: 10 - ceil(10 * 1 / 100) = 9; 1: 10 - ceil(9.9) = 0
        ([90, 80, 70, 60], [10, 6, 3, 0]),  # 80: 10 - ceil(3.33) = 6; 70: 10 - ceil(6.67) = 3
        ([None, 40, 60], [0, 0, 10]),  # an unscored node is 0 and does not set the worst
        ([None, 60, 60], [0, 10, 10]),
        ([None, None], [0, 0]),
        ([], []),
    ],
)
def test_candidates(scores: list[int | None], priorities: list[int]) -> None:
    assert candidates(scores) == priorities


score_lists = st.lists(st.one_of(st.none(), st.integers(min_value=0, max_value=100)), max_size=40)


@given(score_lists)
def test_candidates_keep_the_order_and_single_out_the_best(scores: list[int | None]) -> None:
    priorities = candidates(scores)
    known = [(s, p) for s, p in zip(scores, priorities, strict=True) if s is not None]
    assert all(0 <= p <= 10 for p in priorities)
    if not known:
        return
    best = max(s for s, _ in known)
    for s, p in known:
        assert (p == 10) == (s == best)  # only the best nodes get 10: one full step above the rest
    for s1, p1 in known:
        for s2, p2 in known:
            if s1 < s2:
                assert p1 <= p2  # never reverses the full-resolution order
    if len({s for s, _ in known}) > 1:
        assert min(p for _, p in known) == 0


@given(score_lists, st.sampled_from([CANDIDATES, ABSOLUTE]))
def test_batch_twin_agrees(scores: list[int | None], kind: str) -> None:
    values = np.array([0 if s is None else s for s in scores], dtype=np.int64)
    known = np.array([s is not None for s in scores], dtype=bool)
    assert scale_batch(kind, values, known).tolist() == scale(kind, scores)  # type: ignore[arg-type]


def test_candidates_batch_ignores_values_of_unknown_rows() -> None:
    values = np.array([999, 40, 60], dtype=np.int64)
    known = np.array([False, True, True])
    assert candidates_batch(values, known).tolist() == [0, 0, 10]
