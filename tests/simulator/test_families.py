"""Workload families derived from a trace (simulator/families.py, ``simulate --derive KIND=X``): the
targets are hit, total GPU demand is kept where the rules say, the other columns keep their
distribution, and a seed gives one trace.

The trace is a synthetic openb-like pod list (3,000 pods: 13 % CPU-only; of the GPU pods about 43 %
sharing a GPU and 1 % multi-GPU), written as a CSV and read by the simulator's own loader.
"""

from __future__ import annotations

import argparse
import random
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from app.cli import main
from simulator.families import (
    FAMILIES,
    Derivation,
    FamilyError,
    demand_milli,
    derive,
    derive_all,
    derived_pods,
    parse_derivation,
    pods_csv,
)
from simulator.trace import MIB, SimNode, SimPod, load_nodes_csv, load_pods_csv

POD_COLUMNS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time"


def _trace_rows(count: int, seed: int, timed: bool = True) -> list[str]:
    rng = random.Random(seed)
    rows, now = [], 0
    for i in range(count):
        now += rng.randrange(1, 600)
        kind = rng.random()
        if kind < 0.13:
            gpus, milli = 0, 0
            cpu, memory = rng.choice([1000, 4000, 8000, 12500, 32000]), rng.choice([2048, 8192, 16384])
        else:
            shape = rng.random()
            if shape < 0.01:
                gpus, milli = rng.choice([2, 4, 8]), 1000
            elif shape < 0.44:
                gpus, milli = 1, rng.choice([100, 250, 460, 500, 810])
            else:
                gpus, milli = 1, 1000
            cpu, memory = rng.choice([2000, 6000, 8000, 12000]) * max(gpus, 1), rng.choice([12288, 24576]) * gpus
        times = f"{now},{now + rng.randrange(60, 86400)}" if timed else ","
        rows.append(f"pod-{i:04d},{cpu},{memory},{gpus},{milli},,LS,Running,{times}")
    return rows


@pytest.fixture(scope="module")
def trace_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("families") / "pods.csv"
    path.write_text("\n".join([POD_COLUMNS, *_trace_rows(3000, 11)]) + "\n")
    return path


@pytest.fixture(scope="module")
def trace(trace_path: Path) -> list[SimPod]:
    return load_pods_csv(trace_path)


NODE_ROWS = [
    *(f"g2-{i},96000,786432,8,G2" for i in range(20)),  # 160 GPUs
    *(f"t4-{i},64000,262144,2,T4" for i in range(15)),  # 30 GPUs
    *(f"p100-{i},32000,131072,2,P100" for i in range(5)),  # 10 GPUs
    "a10-0,8000,65536,1,A10",  # 1 GPU, too small for most pods
    "cpu-0,96000,786432,0,",
]


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> list[SimNode]:
    path = tmp_path_factory.mktemp("families") / "nodes.csv"
    path.write_text("\n".join(["sn,cpu_milli,memory_mib,gpu,model", *NODE_ROWS]) + "\n")
    return load_nodes_csv(path)


def _demand(pods: Sequence[SimPod]) -> int:
    return sum(demand_milli(pod) for pod in pods)


def _multi_share(pods: Sequence[SimPod]) -> float:
    return sum(demand_milli(p) for p in pods if p.gpus > 1) / _demand(pods)


def _sharing_share(pods: Sequence[SimPod]) -> float:
    gpu_pods = [p for p in pods if p.gpus]
    return sum(p.shares_gpu for p in gpu_pods) / len(gpu_pods)


def _fields(pod: SimPod) -> tuple[object, ...]:
    """What a copy keeps of its source: every column but the name and the arrival."""
    return (pod.cpu_milli, pod.memory, pod.gpus, pod.gpu_milli, pod.gpu_spec)


def _source(pod: SimPod) -> str:
    return pod.name.rsplit("-d", 1)[0] if "-d" in pod.name else pod.name


def _close(a: float, b: float, relative: float) -> bool:
    return abs(a - b) <= relative * abs(b)


# ---------------------------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("multigpu=30", Derivation("multigpu", 30)),
        ("gpushare=100", Derivation("gpushare", 100)),
        ("cpu=250", Derivation("cpu", 250)),
        ("gpuspec=12.5", Derivation("gpuspec", 12.5)),
    ],
)
def test_a_derivation_is_kind_equals_percent(text: str, expected: Derivation) -> None:
    assert parse_derivation(text) == expected
    assert str(parse_derivation(text)) == text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("multigpu", "expected KIND=X"),
        ("multi=30", "unknown family 'multi' (known: multigpu, gpushare, cpu, gpuspec)"),
        ("multigpu=abc", "X 'abc' is not a number"),
        ("gpushare=120", "X (% of the GPU pods that share a GPU) must be between 0 and 100"),
        ("multigpu=100", "must be between 0 and 99"),
        ("cpu=-5", "must be between 0 and 1000"),
        ("gpuspec=nan", "must be between 0 and 100"),
    ],
)
def test_a_bad_derivation_names_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=f"^'{text}': .*") as caught:
        parse_derivation(text)
    assert message in str(caught.value)


# ---------------------------------------------------------------------------------------- multigpu


@pytest.mark.parametrize("percent", [20, 30, 40, 50])
def test_multigpu_gives_multi_gpu_pods_the_share_of_an_unchanged_gpu_demand(trace: list[SimPod], percent: int) -> None:
    out = derive(trace, Derivation("multigpu", percent), seed=1)
    assert _multi_share(trace) < 0.08
    assert _multi_share(out) == pytest.approx(percent / 100, abs=0.005)
    assert _demand(out) == pytest.approx(_demand(trace), rel=0.002)  # within half a pod
    # CPU-only pods are not touched.
    assert [p for p in out if not p.gpus] == [p for p in trace if not p.gpus]


def test_multigpu_keeps_each_class_distribution(trace: list[SimPod]) -> None:
    out = derive(trace, Derivation("multigpu", 40), seed=2)
    before, after = [p for p in trace if p.gpus > 1], [p for p in out if p.gpus > 1]
    assert len(after) > 5 * len(before)
    share = {g: n / len(before) for g, n in Counter(p.gpus for p in before).items()}
    assert set(Counter(p.gpus for p in after)) == set(share)
    for gpus, fraction in Counter(p.gpus for p in after).items():
        assert fraction / len(after) == pytest.approx(share[gpus], abs=0.12)
    # The pods that make room are drawn at random: sharing and whole 1-GPU pods keep their mix.
    ones_before = [p for p in trace if p.gpus == 1]
    ones_after = [p for p in out if p.gpus == 1]
    assert len(ones_after) < len(ones_before)
    assert _sharing_share(ones_after) == pytest.approx(_sharing_share(ones_before), abs=0.03)
    assert statistics.mean(p.cpu_milli for p in ones_after) == pytest.approx(
        statistics.mean(p.cpu_milli for p in ones_before), rel=0.05
    )
    # Every copy is one of the trace's multi-GPU pods, column for column.
    by_name = {p.name: p for p in trace}
    for pod in out:
        assert _fields(pod) == _fields(by_name[_source(pod)])


# ---------------------------------------------------------------------------------------- gpushare


@pytest.mark.parametrize("percent", [40, 60, 80, 100])
def test_gpushare_sets_the_share_of_sharing_pods_and_keeps_the_gpu_demand(trace: list[SimPod], percent: int) -> None:
    out = derive(trace, Derivation("gpushare", percent), seed=3)
    assert _sharing_share(out) == pytest.approx(percent / 100, abs=0.001)
    assert _demand(out) == pytest.approx(_demand(trace), rel=0.02)
    assert [p for p in out if not p.gpus] == [p for p in trace if not p.gpus]
    if percent == 100:
        assert all(p.shares_gpu for p in out if p.gpus)


def test_gpushare_keeps_the_sharing_pods_distribution(trace: list[SimPod]) -> None:
    out = derive(trace, Derivation("gpushare", 80), seed=4)
    before = Counter(p.gpu_milli for p in trace if p.shares_gpu)
    after = Counter(p.gpu_milli for p in out if p.shares_gpu)
    assert set(after) == set(before)
    for milli, count in after.items():
        assert count / after.total() == pytest.approx(before[milli] / before.total(), abs=0.03)


# ---------------------------------------------------------------------------------------- cpu


@pytest.mark.parametrize("percent", [50, 100, 200, 250])
def test_cpu_scales_the_cpu_only_pods_total_cpu_by_resampling(trace: list[SimPod], percent: int) -> None:
    out = derive(trace, Derivation("cpu", percent), seed=5)
    cpu_before = [p for p in trace if not p.gpus]
    cpu_after = [p for p in out if not p.gpus]
    target = percent / 100 * sum(p.cpu_milli for p in cpu_before)
    largest = max(p.cpu_milli for p in cpu_before)
    assert abs(sum(p.cpu_milli for p in cpu_after) - target) <= largest / 2
    # GPU pods are exactly the trace's; CPU-only pods keep their shapes' mix.
    assert [p for p in out if p.gpus] == [p for p in trace if p.gpus]
    shapes_before = Counter((p.cpu_milli, p.memory) for p in cpu_before)
    shapes_after = Counter((p.cpu_milli, p.memory) for p in cpu_after)
    assert set(shapes_after) <= set(shapes_before)
    assert statistics.mean(p.cpu_milli for p in cpu_after) == pytest.approx(
        statistics.mean(p.cpu_milli for p in cpu_before), rel=0.1
    )


# ---------------------------------------------------------------------------------------- gpuspec


@pytest.mark.parametrize("percent", [10, 20, 25, 33])
def test_gpuspec_pins_the_share_of_gpu_pods_in_proportion_to_the_models_gpus(
    trace: list[SimPod], nodes: list[SimNode], percent: int
) -> None:
    out = derive(trace, Derivation("gpuspec", percent), seed=6, nodes=nodes)
    gpu_pods = [p for p in out if p.gpus]
    pinned = [p for p in gpu_pods if p.gpu_spec]
    assert len(pinned) == round(percent / 100 * len(gpu_pods))
    assert all(len(p.gpu_spec) == 1 for p in pinned)
    demand: Counter[str] = Counter()
    for pod in pinned:
        demand[next(iter(pod.gpu_spec))] += demand_milli(pod)
    capacity = {"G2": 160, "T4": 30, "P100": 10, "A10": 1}
    for model in ("G2", "T4", "P100"):
        assert demand[model] / demand.total() == pytest.approx(capacity[model] / 201, abs=0.01)
    # Each pinned pod fits alone on a node of its model; nothing else changed.
    for pod in pinned:
        (model,) = pod.gpu_spec
        assert any(n.model == model and n.gpus >= pod.gpus and n.allocatable["cpu"] >= pod.cpu_milli for n in nodes)
    assert [(p.name, p.cpu_milli, p.memory, p.gpus, p.gpu_milli, p.created) for p in out] == [
        (p.name, p.cpu_milli, p.memory, p.gpus, p.gpu_milli, p.created) for p in trace
    ]


def test_gpuspec_needs_the_node_list_and_counts_pods_already_pinned(trace: list[SimPod], nodes: list[SimNode]) -> None:
    with pytest.raises(FamilyError, match=r"^--derive gpuspec=20: needs the node list"):
        derive(trace, Derivation("gpuspec", 20))
    twenty = derive(trace, Derivation("gpuspec", 20), seed=1, nodes=nodes)
    thirty = derive(twenty, Derivation("gpuspec", 30), seed=1, nodes=nodes)
    assert _pinned(thirty) == pytest.approx(0.30, abs=0.001)
    assert all(b.gpu_spec == a.gpu_spec for a, b in zip(twenty, thirty, strict=True) if a.gpu_spec)
    with pytest.raises(FamilyError, match=r"already have a gpu_spec, more than the \d+ asked"):
        derive(thirty, Derivation("gpuspec", 10), nodes=nodes)


def _pinned(pods: Sequence[SimPod]) -> float:
    gpu_pods = [p for p in pods if p.gpus]
    return sum(bool(p.gpu_spec) for p in gpu_pods) / len(gpu_pods)


# ---------------------------------------------------------------------------------------- common rules


@pytest.mark.parametrize("derivation", ["multigpu=35", "gpushare=70", "cpu=150", "gpuspec=15"])
def test_one_seed_gives_one_trace(trace: list[SimPod], nodes: list[SimNode], derivation: str) -> None:
    parsed = parse_derivation(derivation)
    first = pods_csv(derive(trace, parsed, seed=9, nodes=nodes))
    assert pods_csv(derive(list(trace), parsed, seed=9, nodes=nodes)) == first
    assert pods_csv(derive(trace, parsed, seed=10, nodes=nodes)) != first


def test_copies_arrive_on_the_trace_timeline_and_live_as_long_as_their_source(trace: list[SimPod]) -> None:
    out = derive(trace, Derivation("multigpu", 30), seed=7)
    by_name = {p.name: p for p in trace}
    arrivals = {p.created for p in trace}
    copies = [p for p in out if p.name not in by_name]
    assert copies and len({p.name for p in out}) == len(out)
    for copy in copies:
        source = by_name[_source(copy)]
        assert copy.name.startswith(f"{source.name}-d")
        assert copy.created in arrivals
        assert source.deleted is not None and copy.deleted is not None
        assert copy.deleted - copy.created == source.deleted - source.created
        assert copy.uid == f"sim-{copy.name}" and copy.name.encode() in copy.body
    assert [p.created for p in out] == sorted(p.created for p in out)


def test_a_trace_in_file_order_stays_in_file_order(tmp_path: Path) -> None:
    path = tmp_path / "untimed.csv"
    path.write_text("\n".join([POD_COLUMNS, *_trace_rows(800, 5, timed=False)]) + "\n")
    pods = load_pods_csv(path)
    out = derive(pods, Derivation("gpushare", 90), seed=0)
    assert all(p.file_ordered and p.deleted is None for p in out)
    assert [p.created for p in out] == [float(i) for i in range(len(out))]
    written = tmp_path / "derived.csv"
    written.write_text(pods_csv(out))
    assert load_pods_csv(written) == out


def test_the_written_trace_reads_back_as_derived(trace: list[SimPod], tmp_path: Path) -> None:
    out = derive(trace, Derivation("multigpu", 25), seed=0)
    written = tmp_path / "derived.csv"
    written.write_text(pods_csv(out))
    assert load_pods_csv(written) == out
    assert all(p.memory % MIB == 0 for p in out)


def test_derivations_compose_in_order(trace: list[SimPod], nodes: list[SimNode]) -> None:
    both = derive_all(trace, [Derivation("cpu", 200), Derivation("gpuspec", 20)], seed=0, nodes=nodes)
    assert both == derive(derive(trace, Derivation("cpu", 200), 0), Derivation("gpuspec", 20), 0, nodes)
    with pytest.raises(FamilyError, match="cpu given more than once"):
        derive_all(trace, [Derivation("cpu", 200), Derivation("cpu", 50)])


@pytest.mark.parametrize(
    ("keep", "derivation", "message"),
    [
        (lambda p: p.gpus <= 1, "multigpu=30", "the trace has no multi-GPU pod to copy"),
        (lambda p: not p.shares_gpu, "gpushare=50", "the trace has no GPU-sharing pod (gpu_milli < 1000) to copy"),
        (lambda p: p.gpus > 0, "cpu=150", "the trace has no CPU-only pod asking for cpu"),
        (lambda p: p.gpus == 0, "multigpu=30", "the trace asks for no GPUs"),
    ],
)
def test_a_family_the_trace_cannot_give_is_an_error(
    trace: list[SimPod], keep: Callable[[SimPod], bool], derivation: str, message: str
) -> None:
    with pytest.raises(FamilyError) as caught:
        derive([p for p in trace if keep(p)], parse_derivation(derivation))
    assert str(caught.value) == f"--derive {derivation}: {message}"


def test_every_family_is_documented_with_its_range() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "simulate.md").read_text(encoding="utf-8")
    for kind in FAMILIES:
        assert f"`{kind}=X`" in page


# ---------------------------------------------------------------------------------------- command line


def test_without_derive_the_pods_are_the_trace(trace: list[SimPod]) -> None:
    args = argparse.Namespace(derive=None, derive_seed=0)
    assert derived_pods(args, trace) == trace


def test_derive_out_writes_the_derived_trace(
    trace_path: Path, trace: list[SimPod], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "multigpu30.csv"
    argv = ["simulate", "--pods", str(trace_path), "--derive", "multigpu=30", "--derive-seed", "4"]
    assert main([*argv, "--derive-out", str(out)]) == 0
    assert load_pods_csv(out) == derive(trace, Derivation("multigpu", 30), seed=4)
    err = capsys.readouterr().err
    assert "note: --pods: 3,000 pods" in err
    assert "note: --derive multigpu=30 (--derive-seed 4): " in err and "(30.0 % from multi-GPU pods)" in err


def test_print_workload_reads_the_derived_trace(trace_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--pods", str(trace_path), "--print-workload"]) == 0
    plain = capsys.readouterr().out
    assert main(["simulate", "--pods", str(trace_path), "--print-workload", "--derive", "gpushare=100"]) == 0
    shared = capsys.readouterr().out
    assert plain != shared and "gpuMilli: 1000" in plain
    assert all("gpuMilli: 1000" not in line for line in shared.splitlines())


def test_derive_errors_exit_2_naming_the_value(
    trace_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["simulate", "--pods", str(trace_path), "--derive", "gpushare=120"])
    assert exited.value.code == 2
    assert "argument --derive: 'gpushare=120': X (% of the GPU pods that share a GPU)" in capsys.readouterr().err
    out = str(tmp_path / "x.csv")
    assert main(["simulate", "--pods", str(trace_path), "--derive", "gpuspec=20", "--derive-out", out]) == 2
    assert "error: --derive gpuspec=20: needs the node list" in capsys.readouterr().err
    assert main(["simulate", "--pods", str(trace_path), "--derive-out", out]) == 2
    assert "error: --derive-out needs --derive" in capsys.readouterr().err


def test_simulate_runs_a_derived_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pods = tmp_path / "pods.csv"
    pods.write_text("\n".join([POD_COLUMNS, *_trace_rows(60, 3)]) + "\n")
    node_list = tmp_path / "nodes.csv"
    node_list.write_text("sn,cpu_milli,memory_mib,gpu,model\n" + "\n".join(NODE_ROWS[:4] + NODE_ROWS[20:22]) + "\n")
    argv = ["simulate", "--nodes", str(node_list), "--pods", str(pods), "--policy", "best-fit", "--no-progress"]
    assert main([*argv, "--derive", "gpuspec=30", "--derive", "cpu=200", "--json"]) == 0
    captured = capsys.readouterr()
    assert '"pods": ' in captured.out and "--derive gpuspec=30 --derive cpu=200" in captured.err
