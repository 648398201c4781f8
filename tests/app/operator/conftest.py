"""Helpers of the console tests: the example service, and reading a page's HTML as the browser would."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.config import load_config
from app.http.server import create_app
from app.runtime import build_snapshot_runtime
from app.service import ExtenderService

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"


def example_service(config: str = "config-queues.yaml") -> ExtenderService:
    """The bundled example cluster (examples/cluster.yaml) under one of the example configurations."""
    return build_snapshot_runtime(load_config(str(EXAMPLES / config)), str(EXAMPLES / "cluster.yaml")).service


@pytest.fixture
def console() -> Iterator[Any]:
    """Factory: a client of the real app (verbs, /debug and /ui) of a service."""
    clients: list[TestClient] = []

    def build(service: ExtenderService) -> TestClient:
        client = TestClient(create_app(service))
        clients.append(client)
        return client

    yield build
    for client in clients:
        client.close()


def block(page: str, tag: str, attribute: str, value: str) -> str:
    """The first ``<tag attribute="value">…</tag>`` of a page (tags of that name do not nest here)."""
    match = re.search(rf'<{tag}\b[^>]* {attribute}="{re.escape(html.escape(value))}".*?</{tag}>', page, re.S)
    assert match, f"no <{tag} {attribute}={value!r}> in the page"
    return match.group(0)


def cells(fragment: str, state: str) -> list[str]:
    """The hover titles of the cells of one state, unescaped as the browser shows them."""
    return [html.unescape(t) for t in re.findall(rf'<i class="cell {state}" title="([^"]*)"', fragment)]


def by_id(page: str, element_id: str) -> str:
    """The text of the element with this id (no nested tags), unescaped."""
    match = re.search(rf'id="{element_id}"[^>]*>([^<]*)<', page)
    assert match, f"no element {element_id!r}"
    return html.unescape(match.group(1)).strip()
