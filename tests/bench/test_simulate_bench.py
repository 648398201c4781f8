"""bench.simulate: its experiment is the Figure 9a run the Simulate page documents; --policy and --repeat."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.simulate import EXPERIMENT_POLICIES, main
from simulator.simulate import POLICIES
from tests.simulator.test_simulate import NODE_HEADER, POD_HEADER

DOCS = Path(__file__).resolve().parents[2] / "docs" / "simulate.md"


def test_the_experiment_times_the_policies_of_the_documented_figure_9a_run() -> None:
    section = DOCS.read_text().split("## The FGD experiment on the openb trace", 1)[1]
    command = section.split("```sh", 1)[1].split("```", 1)[0]
    assert tuple(re.findall(r"--policy (\S+)", command)) == EXPERIMENT_POLICIES
    assert set(EXPERIMENT_POLICIES) <= set(POLICIES)


def test_chosen_policies_are_timed_by_the_median_of_their_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes, pods = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    nodes.write_text(NODE_HEADER + "g0,32000,65536,2,T4\ng1,32000,65536,2,T4\n", encoding="utf-8")
    rows = "".join(f"p{i},1000,1024,1,{500 if i % 2 else 1000},,LS,Running,{i},,0\n" for i in range(6))
    pods.write_text(POD_HEADER + rows, encoding="utf-8")
    common = ["--nodes", str(nodes), "--pods", str(pods), "--mode", "inflate", "--scheduler-config", "none"]
    main([*common, "--policy", "fgd", "--policy", "best-fit", "--repeat", "3"])
    lines = capsys.readouterr().out.splitlines()
    timed = [line.split()[0] for line in lines if "ms per pod" in line]
    assert timed == ["fgd", "best-fit"]  # those alone, in the order asked
    assert all(re.search(r"\[\d+\.\d\d-\d+\.\d\d\], median of 3", line) for line in lines if "ms per pod" in line)
    with pytest.raises(SystemExit):
        main([*common, "--repeat", "0"])
    assert "--repeat must be at least 1, got 0" in capsys.readouterr().err


def test_a_profile_without_policies_times_only_the_profiled_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes, pods = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    nodes.write_text(NODE_HEADER + "g0,32000,65536,2,T4\n", encoding="utf-8")
    pods.write_text(POD_HEADER + "p0,1000,1024,1,500,,LS,Running,0,,0\n", encoding="utf-8")
    common = ["--nodes", str(nodes), "--pods", str(pods), "--mode", "inflate", "--scheduler-config", "none"]
    main([*common, "--profile", "best-fit"])
    out = capsys.readouterr().out
    assert [line.split()[0] for line in out.splitlines() if "ms per pod" in line] == ["best-fit"]
    assert "function calls" in out  # the profile itself
    main([*common, "--profile", "best-fit", "--policy", "fgd", "--policy", "best-fit"])
    timed = [line.split()[0] for line in capsys.readouterr().out.splitlines() if "ms per pod" in line]
    assert timed == ["fgd", "best-fit"]  # named policies are timed as asked
