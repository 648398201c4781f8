"""bench.simulate's experiment is the Figure 9a run the Simulate page documents."""

from __future__ import annotations

import re
from pathlib import Path

from bench.simulate import EXPERIMENT_POLICIES
from simulator.simulate import POLICIES

DOCS = Path(__file__).resolve().parents[2] / "docs" / "simulate.md"


def test_the_experiment_times_the_policies_of_the_documented_figure_9a_run() -> None:
    section = DOCS.read_text().split("## The FGD experiment on the openb trace", 1)[1]
    command = section.split("```sh", 1)[1].split("```", 1)[0]
    assert tuple(re.findall(r"--policy (\S+)", command)) == EXPERIMENT_POLICIES
    assert set(EXPERIMENT_POLICIES) <= set(POLICIES)
