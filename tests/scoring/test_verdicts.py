"""BatchVerdicts: the passing names, whichever way they are gathered."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from scoring.table import NodeTable
from scoring.verdicts import BatchVerdicts


@given(st.lists(st.sampled_from([0, 0, 0, 1, 2]), max_size=40), st.booleans())
def test_passed_names_are_the_passing_positions_in_order(codes: list[int], all_pass: bool) -> None:
    """Every way ``passed`` gathers (all pass, few pass, many pass) gives the passing names in order."""
    if all_pass:
        codes = [0] * len(codes)
    names = [f"n{index}" for index in range(len(codes))]
    verdicts = BatchVerdicts(np.array(codes, dtype=np.int8), np.full(len(codes), -1, dtype=np.int64), [])
    assert verdicts.passed(names) == [name for name, code in zip(names, codes, strict=True) if code == 0]


@given(st.lists(st.lists(st.sampled_from([0, 0, 1]), min_size=5, max_size=5), min_size=1, max_size=4))
def test_names_picked_from_the_tables_array_are_those_picked_from_the_list(rounds: list[list[int]]) -> None:
    """The same candidate list, pod after pod: the table gives its object array from the second pod on,
    and the survivors are the same names in the same order either way."""
    table = NodeTable()
    names = [f"n{index}" for index in range(5)]
    for round_index, codes in enumerate(rounds):
        array = table.names_array(names)
        assert (array is None) == (round_index == 0)
        verdicts = BatchVerdicts(np.array(codes, dtype=np.int8), np.full(5, -1, dtype=np.int64), [])
        assert verdicts.passed(names, array) == verdicts.passed(names)
    assert table.names_array(list(names)) is None  # an equal list, not the one seen: no array
