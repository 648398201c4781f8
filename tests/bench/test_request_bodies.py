"""bench.latency's candidate lists: one order repeated, or new orders as kube-scheduler sends them."""

from __future__ import annotations

import pytest

from bench.latency import main
from bench.request_bodies import reordered

NAMES = [f"node-{i:03d}" for i in range(50)]


def test_reordered_keeps_the_first_list_and_shuffles_the_others_by_seed() -> None:
    orders = reordered(NAMES, 4, seed=7)
    assert len(orders) == 4 and orders[0] is NAMES
    assert all(sorted(order) == NAMES for order in orders)
    assert len({tuple(order) for order in orders}) == 4  # every order differs (50! makes a repeat absurd)
    assert reordered(NAMES, 4, seed=7) == orders
    assert reordered(NAMES, 1, seed=7) == [NAMES]


def test_reorder_below_one_is_refused() -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--reorder", "0", "--sizes", "", "--nodelist", ""])
    assert exit_.value.code == 2
