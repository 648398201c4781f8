"""BatchVerdicts: the passing names, whichever way they are gathered."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from scoring.verdicts import BatchVerdicts


@given(st.lists(st.sampled_from([0, 0, 0, 1, 2]), max_size=40), st.booleans())
def test_passed_names_are_the_passing_positions_in_order(codes: list[int], all_pass: bool) -> None:
    """Every way ``passed`` gathers (all pass, few pass, many pass) gives the passing names in order."""
    if all_pass:
        codes = [0] * len(codes)
    names = [f"n{index}" for index in range(len(codes))]
    verdicts = BatchVerdicts(np.array(codes, dtype=np.int8), np.full(len(codes), -1, dtype=np.int64), [])
    assert verdicts.passed(names) == [name for name, code in zip(names, codes, strict=True) if code == 0]
