"""Fixtures of the app tests that talk to the fake API server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakeapi import FakeAPIServer


@pytest.fixture
def fake() -> Iterator[FakeAPIServer]:
    """A fake API server on 127.0.0.1 for one test."""
    with FakeAPIServer() as server:
        yield server
