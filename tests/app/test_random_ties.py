"""tieBreak.random's picks in flight: found by the node table's rows or, without them, by name."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from app.cluster.cache import ClusterCache
from app.cluster.objects import node_from_obj, pod_from_obj
from app.pipeline.random_ties import RandomTies
from scoring.tie_break import choosing, drawing
from tests.conftest import node_obj, pod_obj

NAMES = ["n0", "n1", "n2", "n3"]


def _ties(choose: Callable[[list[str]], str] = max) -> RandomTies:
    cache = ClusterCache(clock=lambda: 100.0)
    cache.replace_nodes(node_from_obj(node_obj(n)) for n in reversed(NAMES))  # rows in another order
    return RandomTies(cache, choosing(choose))


def test_a_pick_in_flight_is_followed_with_and_without_rows() -> None:
    for with_rows in (True, False):
        ties = _ties()
        table = ties.cache.table
        rows = np.array([table.index[n] for n in NAMES], dtype=np.intp) if with_rows else None
        every = np.ones(len(NAMES), dtype=np.bool_)
        first = ties.keep_one(pod_from_obj(pod_obj("a", gpus=1)), NAMES, every, rows)
        assert first.tolist() == [False, False, False, True]  # max: n3
        without_n3 = np.array([True, True, True, False])
        second = ties.keep_one(pod_from_obj(pod_obj("b", gpus=1)), NAMES, without_n3, rows)
        assert second.tolist() == [False, False, True, False]  # n3 is not tied: the plain pick, n2
        # n3 and n2 both hold a pick in flight now; the draw stays among them
        ties.pick = choosing(min)
        kept = ties.keep_one(pod_from_obj(pod_obj("c", gpus=1)), NAMES, every, rows)
        assert kept.tolist() == [False, False, True, False]


def test_a_positional_draw_follows_the_picks_in_flight() -> None:
    """Without a name chooser (the service's default) the draw takes a position among the tied nodes,
    and still among those holding a pick in flight."""
    cache = ClusterCache(clock=lambda: 100.0)
    cache.replace_nodes(node_from_obj(node_obj(n)) for n in NAMES)
    drawn: list[int] = []

    def last(count: int) -> int:
        drawn.append(count)
        return count - 1

    ties = RandomTies(cache, drawing(last))
    every = np.ones(len(NAMES), dtype=np.bool_)
    assert ties.keep_one(pod_from_obj(pod_obj("a", gpus=1)), NAMES, every).tolist() == [False, False, False, True]
    ties.pick = drawing(lambda count: 0)
    without_n3 = np.array([True, True, True, False])
    assert ties.keep_one(pod_from_obj(pod_obj("b", gpus=1)), NAMES, without_n3).tolist() == [True, False, False, False]
    # n0 and n3 hold picks in flight: the draw is among those two
    ties.pick = drawing(last)
    assert ties.keep_one(pod_from_obj(pod_obj("c", gpus=1)), NAMES, every).tolist() == [False, False, False, True]
    assert drawn == [4, 2]
