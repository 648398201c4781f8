"""bench.cpu_sampler counts where a process's CPU time goes between SIGUSR1 and SIGUSR2, and
bench.cpu_report reads its folded stacks by part of the extender's work."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from bench import cpu_report, cpu_sampler
from tests.e2e.binaries import REPO
from tests.e2e.process import wait_for


def test_a_sampled_process_reports_the_function_that_used_its_cpu(tmp_path: Path) -> None:
    out = tmp_path / "busy.folded"
    argv = [sys.executable, "-m", *cpu_sampler.runner(out), "tests.bench.busy", str(tmp_path)]
    proc = subprocess.Popen(argv, cwd=REPO)
    try:
        wait_for("the busy process", (tmp_path / "ready").exists, 30)
        cpu_sampler.start(proc.pid, out)
        (tmp_path / "go").touch()
        wait_for("the busy process's work", (tmp_path / "done").exists, 30)
        stacks = cpu_report.read_folded(cpu_sampler.collect(proc.pid, out))
    finally:
        (tmp_path / "stop").touch()
        proc.wait(timeout=30)
    assert proc.returncode == 0
    assert sum(stacks.values()) > 0
    spinning = sum(count for stack, count in stacks.items() if "tests/bench/busy.py:spin" in stack)
    assert spinning >= 0.8 * sum(stacks.values())  # the waits use no CPU to speak of
    root_first = next(stack for stack in stacks if "tests/bench/busy.py:spin" in stack).split(";")
    assert root_first.index("tests/bench/busy.py:main") < root_first.index("tests/bench/busy.py:spin")
    # The stages' CPU (bench.stage_cpu) is written beside the stacks: none of the extender's ran here.
    assert cpu_sampler.stages_path(out).exists()
    assert cpu_sampler.collect_stages(out) == {}


def test_nothing_is_counted_before_the_start_signal() -> None:
    sampler = cpu_sampler.Sampler()
    sampler._sample(0, sys._getframe())
    assert not sampler.stacks
    sampler.start()
    sampler._sample(0, sys._getframe())
    assert list(sampler.stacks.values()) == [1]
    assert sampler.folded().endswith("test_cpu_sampler.py:test_nothing_is_counted_before_the_start_signal 1\n")


def test_frame_names_are_short_paths_and_qualified_names() -> None:
    frame = sys._getframe()
    assert cpu_sampler.frame_name(frame) == (
        "tests/bench/test_cpu_sampler.py:test_frame_names_are_short_paths_and_qualified_names"
    )
    library = pytest.raises.__code__.co_filename  # an installed package's file
    assert "site-packages/" in library
    name = cpu_sampler.frame_name(_frame_of(pytest.raises.__code__))
    assert name.startswith("_pytest/") and name.endswith(":raises")


def _frame_of(code: object) -> object:
    class _Frame:
        f_code = code

    return _Frame()


KUBE_BIND = "app/cluster/kube.py:KubeClient.bind"
LOG = "logging/__init__.py:Logger.info"
HTTPTOOLS = "uvicorn/protocols/http/httptools_impl.py:HttpToolsProtocol"
WRITE = "app/http/coalesce.py:CoalescingTransport.write_now"


def test_a_sample_goes_to_the_first_part_on_its_stack() -> None:
    stacks = cpu_report.read_folded(
        "\n".join(
            [
                f"uvicorn/server.py:Server.run;app/bind.py:BindVerb.bind;{KUBE_BIND};aiohttp/client.py:x 6",
                "uvicorn/server.py:Server.run;app/bind.py:BindVerb.bind;app/pipeline/fit.py:ResourceFit.reserve 2",
                f"uvicorn/server.py:Server.run;app/bind.py:BindVerb.bind;{LOG} 1",
                "uvicorn/server.py:Server.run;app/cluster/reflector.py:Reflector.run 3",
                f"uvicorn/server.py:Server.run;{HTTPTOOLS}.data_received 4",
                "asyncio/runners.py:Runner.run;ssl.py:SSLObject.read 2",
                "",
            ]
        )
    )
    assert cpu_report.parts(stacks) == Counter(
        {
            "/bind: Binding POST": 6,
            "/bind: admit, reserve, assume": 2,
            "logging": 1,
            "watch events": 3,
            "HTTP server": 4,
            cpu_report.OTHER: 2,
        }
    )
    assert cpu_report.own_frames(stacks)["ssl.py:SSLObject.read"] == 2


def test_parts_read_as_microseconds_per_pod() -> None:
    per_pod = cpu_report.per_pod(Counter({"/filter": 3, "watch events": 1}), cpu_seconds=2.0, pods=1000)
    assert per_pod == {"/filter": 1500.0, "watch events": 500.0}
    assert cpu_report.per_pod(Counter(), cpu_seconds=2.0, pods=1000) == {}


def test_a_malformed_line_is_named() -> None:
    with pytest.raises(ValueError, match="line 2: not 'frames count'"):
        cpu_report.read_folded("a;b 1\na;b x\n")


def test_the_report_prints_parts_and_own_frames(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folded = tmp_path / "phase.folded"
    folded.write_text(f"app/bind.py:BindVerb.bind;{KUBE_BIND} 3\n{WRITE} 1\n")
    assert cpu_report.main([str(folded), "--cpu-seconds", "0.4", "--pods", "100"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"75\.0 %  /bind: Binding POST +3000\.0 µs per pod", out)
    assert f"75.0 %  {KUBE_BIND}" in out and f"25.0 %  {WRITE}" in out
    assert cpu_report.main([str(tmp_path / "missing.folded")]) == 2
