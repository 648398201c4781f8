"""Toleration edge cases: core/v1 ToleratesTaint (device taints share it) plus Gt/Lt (KEP-5471)."""

from __future__ import annotations

import pytest

from k8s_semantics.taints import Taint, Toleration, tolerates

SPOT = Taint("spot", "true", "NoSchedule")


@pytest.mark.parametrize(
    ("toleration", "taint", "tolerated"),
    [
        (Toleration(operator="Exists"), SPOT, True),  # empty key + Exists: every taint
        (Toleration(operator="Exists", effect="NoExecute"), SPOT, False),
        (Toleration(operator="Equal"), SPOT, False),  # an empty key is valid with Exists only
        (Toleration("spot", "Equal", "true"), SPOT, True),
        (Toleration("spot", "", "true"), SPOT, True),  # no operator means Equal
        (Toleration("spot", "Equal", "false"), SPOT, False),
        (Toleration("spot", "Exists", "ignored"), SPOT, True),  # Exists ignores the value
        (Toleration("spot", "Exists", effect="NoExecute"), SPOT, False),
        (Toleration("spot", "Exists", effect="NoSchedule"), SPOT, True),
        (Toleration("other", "Exists"), SPOT, False),
        (Toleration("gen", "Gt", "3"), Taint("gen", "5"), True),
        (Toleration("gen", "Gt", "5"), Taint("gen", "5"), False),
        (Toleration("gen", "Lt", "3"), Taint("gen", "5"), False),
        (Toleration("gen", "Lt", "6"), Taint("gen", "5"), True),
        (Toleration("gen", "Gt", "3"), Taint("gen", "high"), False),  # both must be integers
        (Toleration("gen", "Gt", "x"), Taint("gen", "5"), False),
        (Toleration("gen", "Gt", "3"), Taint("gen", "1_0"), False),  # ParseInt syntax, not Python's
        (Toleration("spot", "Matches", "true"), SPOT, False),  # unknown operator
    ],
)
def test_tolerates(toleration: Toleration, taint: Taint, tolerated: bool) -> None:
    assert tolerates(toleration, taint) is tolerated


def test_device_taints_use_the_same_rules() -> None:
    from allocator.types import DeviceTaint, DeviceToleration

    taint = DeviceTaint("gpu.example.com/unhealthy", "NoSchedule", "true")
    assert DeviceToleration("gpu.example.com/unhealthy", "Exists").tolerates(taint)
    assert DeviceToleration(operator="Exists").tolerates(taint)
    assert not DeviceToleration("gpu.example.com/unhealthy", "Equal", "false").tolerates(taint)
