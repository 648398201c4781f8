"""Browser tests of the operator console: one extender and one headless Chromium per module.

Without Chromium, chromium-driver or selenium the tests are skipped with a message saying what to
install; with ``BROWSER_TESTS_REQUIRED=1`` (set by .ci/run) they fail instead.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser.harness import Extender, chromium, example_extender, missing_browser


@pytest.fixture(scope="module")
def extender() -> Iterator[Extender]:
    with example_extender() as running:
        yield running


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    missing = missing_browser()
    if missing is not None:
        if os.environ.get("BROWSER_TESTS_REQUIRED"):
            pytest.fail(f"BROWSER_TESTS_REQUIRED is set and {missing}", pytrace=False)
        pytest.skip(missing)
    with chromium() as driver:
        yield driver
