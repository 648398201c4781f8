"""The README and the documentation site: short, written for the reader, examples that are tested files,
and the README's "Try it" tour run against `make run`'s configuration with its documented answers."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from app.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
SNIPPET = re.compile(r'^\s*--8<--\s+"([^"]+)"\s*$')
FENCE = re.compile(r"^(\s*)```(\w*)")


def _blocks(text: str) -> Iterator[tuple[str, list[str]]]:
    """(language, lines) of every fenced code block of a Markdown text."""
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        end = index + 1
        while end < len(lines) and not lines[end].strip().startswith("```"):
            end += 1
        yield opening.group(2), lines[index + 1 : end]
        index = end + 1


def test_the_readme_is_a_front_page() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250
    headings = [line for line in lines if line.startswith("## ")]
    assert headings[:2] == ["## Two commands", "## Try it"]
    commands = next(block for lang, block in _blocks("\n".join(lines)) if lang == "sh")
    assert [line.split("#")[0].strip() for line in commands] == ["make run", "make test"]


def test_the_docs_are_written_for_the_reader() -> None:
    story = re.compile(
        r"this round|last round|fourth round|third round|previous round|round after|issue [0-9]+|"
        r"this session|the session's",
        re.IGNORECASE,
    )
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in [README, *PAGES]
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if story.search(line)
    ]
    assert not found, "\n".join(found)


def _included() -> dict[str, list[str]]:
    """Snippet-included file -> the pages that include it."""
    seen: dict[str, list[str]] = {}
    for page in PAGES:
        for _, block in _blocks(page.read_text(encoding="utf-8")):
            for line in block:
                match = SNIPPET.match(line)
                if match:
                    seen.setdefault(match.group(1).split(":")[0], []).append(str(page.relative_to(ROOT)))
    return seen


def test_yaml_and_json_examples_in_the_docs_are_included_files() -> None:
    """An example typed into a page is never run; one included from a file is what the tests load."""
    inline = []
    for page in PAGES:
        for lang, block in _blocks(page.read_text(encoding="utf-8")):
            if lang in ("yaml", "yml", "json") and any(line.strip() and not SNIPPET.match(line) for line in block):
                inline.append(f"{page.relative_to(ROOT)}: {block[0].strip() if block else ''}")
    assert not inline, "include these from examples/ with --8<--:\n" + "\n".join(inline)


def test_every_included_example_is_a_tested_file() -> None:
    """Included files live under examples/ (each loaded by tests/test_examples.py, which checks that
    every one is) or deploy/ (tests/deploy); extender configurations among them pass check-config."""
    included = _included()
    assert included, "the docs include no example files"
    for name, pages in included.items():
        path = ROOT / name
        assert path.is_file(), f"{name} (included by {pages}) does not exist"
        assert name.startswith(("examples/", "deploy/")), f"{name} (included by {pages}) is not a tested example"
        if path.suffix not in (".yaml", ".yml") or name.startswith("deploy/"):
            continue
        documents = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]
        if any(isinstance(d, dict) and d.get("kind") == "ExtenderConfiguration" for d in documents):
            if "tls/" in path.read_text(encoding="utf-8") or "debugTokenFile" in path.read_text(encoding="utf-8"):
                continue  # loaded with its files by tests/test_examples.py
            try:
                load_config(path)
            except ConfigError as exc:
                pytest.fail(f"{name} (included by {pages}): {exc}")


# ------------------------------------------------------------------------------------------ Try it
def _tour() -> list[tuple[str, list[Any]]]:
    """The README's "Try it" commands, each with the answers documented under it (`# => JSON`)."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## Try it", 1)[1].split("\n## ", 1)[0]
    block = next(lines for lang, lines in _blocks(section) if lang == "sh")
    tour: list[tuple[str, list[Any]]] = []
    for line in block:
        if line.startswith("curl "):
            tour.append((line.split("  #")[0].strip(), []))
        elif line.startswith("# => "):
            tour[-1][1].append(json.loads(line.removeprefix("# => ")))
    return tour


def _contains(actual: Any, documented: Any) -> bool:
    """Whether ``documented`` is part of ``actual``: mappings by key, lists as an ordered subsequence."""
    if isinstance(documented, dict):
        return isinstance(actual, dict) and all(k in actual and _contains(actual[k], v) for k, v in documented.items())
    if isinstance(documented, list):
        if not isinstance(actual, list):
            return False
        rest = iter(actual)
        return all(any(_contains(item, wanted) for item in rest) for wanted in documented)
    return bool(actual == documented)


def test_contains_is_strict_where_it_must_be() -> None:
    assert _contains({"a": [1, 2, 3], "b": {"c": 1, "d": 2}}, {"a": [1, 3], "b": {"c": 1}})
    assert not _contains({"a": [1, 2, 3]}, {"a": [3, 1]})
    assert not _contains({"a": {"c": 1}}, {"a": {"c": 2}})
    assert not _contains({"a": 1}, {"b": 1})


def _make_run_command(port: int) -> list[str]:
    """`make run`'s own command line, from the Makefile, on another port."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = makefile.split("\nrun:", 1)[1].splitlines()[1].strip()
    words = shlex.split(recipe)
    assert words[0] == "$(VENV)/bin/kube-gpu-extender"
    return [sys.executable, "-m", "app.cli", *words[1:], "--port", str(port)]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_try_it_tour_answers_what_the_readme_says() -> None:
    tour = _tour()
    assert len(tour) >= 8 and all(answers for _, answers in tour), "every command documents its answer"
    port = _free_port()
    process = subprocess.Popen(
        _make_run_command(port),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                assert process.poll() is None and time.monotonic() < deadline, "make run's service did not start"
            time.sleep(0.05)
        for command, answers in tour:
            run = command.replace("127.0.0.1:8888", f"127.0.0.1:{port}")
            done = subprocess.run(run, shell=True, cwd=ROOT, capture_output=True, text=True, timeout=30, check=True)
            actual = json.loads(done.stdout)
            for documented in answers:
                assert _contains(actual, documented), f"{command}\ndocumented: {documented}\nanswered: {actual}"
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
