"""Each domain package raises errors of one base class, so callers can catch by package."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from allocator import AllocatorError, parse_device_class, parse_node_selector
from allocator.cel import SelectorCache
from fairshare.errors import FairshareError
from fairshare.flavor import parse_resource_flavor
from k8s_semantics.errors import SemanticsError
from k8s_semantics.quantity import parse_quantity
from scoring.errors import ScoringError
from scoring.fitplus import NodeResourcesFitPlusArgs


@pytest.mark.parametrize(
    ("base", "fail"),
    [
        (SemanticsError, lambda: parse_quantity("12xyz")),
        (ScoringError, lambda: NodeResourcesFitPlusArgs.parse({"resources": {"cpu": {"type": "Spread"}}}, "args")),
        (AllocatorError, lambda: parse_node_selector("not an object")),
        (AllocatorError, lambda: parse_device_class({"metadata": {}})),
        (AllocatorError, lambda: SelectorCache().compile("device.driver ==")),
        (FairshareError, lambda: parse_resource_flavor({"metadata": {"name": "f"}, "spec": "x"}, "flavor")),
    ],
)
def test_errors_share_their_package_base(base: type[Exception], fail: Callable[[], Any]) -> None:
    with pytest.raises(base):
        fail()
