"""Job traces: the CSV, the generator, racks, and pod-by-pod placement against gangs on tiny clusters."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from app.cli import main
from app.config import load_config
from simulator.jobreport import JobResult
from simulator.jobs import (
    DURATION_RANGE,
    GPUS_PER_POD,
    MAX_JOB_GPUS,
    PODS_PER_JOB,
    RACK_LABEL,
    Job,
    jobs_csv,
    load_jobs_csv,
    make_jobs,
    with_racks,
)
from simulator.jobsim import JOB_POLICIES, simulate_jobs
from simulator.trace import GPU, MIB, SimNode, SimPod, TraceError, load_nodes_csv

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "jobs.csv"
HEADER = "name,size,gpus_per_pod,cpu_milli,memory_mib,arrival,duration\n"


def node(name: str, gpus: int = 4, cpu: int = 32000, memory_gib: int = 256) -> SimNode:
    return SimNode(name, {"cpu": cpu, "memory": memory_gib * 2**30, GPU: gpus})


def job(name: str, size: int, gpus: int, arrival: int = 0, duration: int = 100, topology: str = "") -> Job:
    return Job(name, size, gpus, 1000, 1024, arrival, duration, topology)


def run(policy: str, nodes: list[SimNode], jobs: list[Job], **kwargs: object) -> JobResult:
    kwargs.setdefault("scheduler", None)
    kwargs.setdefault("sharing", "none")
    return simulate_jobs(policy, load_config(None), nodes, jobs, **kwargs)  # type: ignore[arg-type]


def openb_like_pods(count: int = 200, seed: int = 1) -> list[SimPod]:
    """A small openb-like pod list: whole-GPU pods of 1, 2, 4 and 8 GPUs with lifetimes, and shares."""
    rng = random.Random(seed)
    pods = []
    for index in range(count):
        gpus = rng.choice([1, 1, 1, 2, 4, 8])
        share = index % 7 == 0
        created = float(rng.randrange(0, 10_000))
        pods.append(
            SimPod(
                f"p{index}",
                b"{}",
                gpus * rng.choice([4000, 8000]),
                gpus * 16384 * MIB,
                gpus,
                500 if share else 1000,
                created=created,
                deleted=created + rng.choice([60, 900, 4000, 100_000]),
            )
        )
    return pods


# ------------------------------------------------------------------------------------ the CSV
def test_job_rows_round_trip_through_the_csv(tmp_path: Path) -> None:
    jobs = [job("a", 2, 8, 0, 600), job("b", 4, 1, 30, 60, "preferred"), job("c", 16, 4, 30, 7200, "none")]
    path = tmp_path / "jobs.csv"
    path.write_text(jobs_csv(jobs), encoding="utf-8")
    assert load_jobs_csv(path) == jobs
    plain = [job("a", 2, 8)]
    assert jobs_csv(plain).splitlines()[0] == HEADER.strip()  # no topology column when no job names one


@pytest.mark.parametrize(
    ("row", "error"),
    [
        ("a,2,x,1000,1024,0,10", "jobs.csv:2: column gpus_per_pod: 'x' is not an integer"),
        ("a,0,1,1000,1024,0,10", "jobs.csv:2: column size: must be >= 1, got 0"),
        ("a,2,1,1000,1024,-5,10", "jobs.csv:2: column arrival: must be >= 0, got -5"),
        ("a,2,1,1000,1024,0,0", "jobs.csv:2: column duration: must be >= 1, got 0"),
        ("a,2,1,1000,1024,0,10\na,2,1,1000,1024,0,10", "jobs.csv:3: column name: duplicate job 'a'"),
        (",2,1,1000,1024,0,10", "jobs.csv:2: column name: empty job name"),
    ],
)
def test_a_bad_job_row_names_file_line_and_column(tmp_path: Path, row: str, error: str) -> None:
    path = tmp_path / "jobs.csv"
    path.write_text(HEADER + row + "\n", encoding="utf-8")
    with pytest.raises(TraceError) as caught:
        load_jobs_csv(path)
    assert str(caught.value) == f"{path}:{error.split(':', 1)[1]}"


def test_a_bad_topology_and_a_missing_column_are_named(tmp_path: Path) -> None:
    path = tmp_path / "jobs.csv"
    path.write_text(HEADER.strip() + ",topology\na,2,1,1000,1024,0,10,rack\n", encoding="utf-8")
    with pytest.raises(TraceError, match=r"jobs.csv:2: column topology: 'rack' is not one of required, preferred"):
        load_jobs_csv(path)
    path.write_text("name,size,gpus_per_pod\na,2,1\n", encoding="utf-8")
    with pytest.raises(TraceError, match=r"jobs.csv:1: missing column\(s\) cpu_milli, memory_mib, arrival, duration"):
        load_jobs_csv(path)
    path.write_text(HEADER, encoding="utf-8")
    with pytest.raises(TraceError, match="no jobs"):
        load_jobs_csv(path)


def test_racks_are_consecutive_nodes_of_the_list() -> None:
    racked = with_racks([node(f"n{i}") for i in range(5)], 2)
    assert [n.labels[RACK_LABEL] for n in racked] == ["rack-000", "rack-000", "rack-001", "rack-001", "rack-002"]
    with pytest.raises(ValueError, match="rack size"):
        with_racks([node("n0")], 0)


# ------------------------------------------------------------------------------------ the generator
def test_the_generator_is_deterministic_and_follows_its_rule() -> None:
    pods = openb_like_pods()
    jobs = make_jobs(pods, 300, 1000, load=1.2, seed=7)
    assert jobs == make_jobs(pods, 300, 1000, load=1.2, seed=7)
    assert jobs != make_jobs(pods, 300, 1000, load=1.2, seed=8)
    shapes = {(p.gpus, p.cpu_milli, p.memory // MIB) for p in pods if not p.shares_gpu}
    for j in jobs:
        assert j.gpus_per_pod in GPUS_PER_POD and (j.gpus_per_pod, j.cpu_milli, j.memory_mib) in shapes
        assert j.gpus <= MAX_JOB_GPUS and any(j.size == s >> k for s in PODS_PER_JOB for k in range(4))
        assert DURATION_RANGE[0] <= j.duration <= DURATION_RANGE[1]
    assert [j.arrival for j in jobs] == sorted(j.arrival for j in jobs) and jobs[0].arrival == 0
    # The offered load: GPU-seconds asked per second of arrivals, about load x the cluster's GPUs.
    offered = sum(j.gpus * j.duration for j in jobs) / jobs[-1].arrival / 1000
    assert 1.0 < offered < 1.45


def test_the_generator_needs_shapes_and_lifetimes() -> None:
    only_ones = [p for p in openb_like_pods() if p.gpus == 1]
    with pytest.raises(ValueError, match="no whole-GPU pod with 2 GPU"):
        make_jobs(only_ones, 10, 100)
    with pytest.raises(ValueError, match="job count"):
        make_jobs(openb_like_pods(), 0, 100)


def test_the_example_job_trace_loads_and_follows_the_rule() -> None:
    jobs = load_jobs_csv(EXAMPLE)
    assert len(jobs) == 2000 and EXAMPLE.stat().st_size < 200_000
    assert [j.name for j in jobs] == [f"job-{i:04d}" for i in range(2000)]
    assert all(j.gpus_per_pod in GPUS_PER_POD and j.gpus <= MAX_JOB_GPUS for j in jobs)
    assert all(DURATION_RANGE[0] <= j.duration <= DURATION_RANGE[1] for j in jobs)
    assert [j.arrival for j in jobs] == sorted(j.arrival for j in jobs)
    # Its first jobs run on a small cluster of 8-GPU nodes like every other trace.
    nodes = [node(f"n{i:02d}", 8, 128000, 1024) for i in range(16)]
    result = run("gang", nodes, jobs[:40], rack_size=4)
    assert result.placed == 40 and result.partial_gpu_seconds == 0


# ------------------------------------------------------------------------------------ pod by pod against gangs
def deadlock_case() -> tuple[list[SimNode], list[Job]]:
    """Two 4-GPU nodes. F (one 2-GPU pod) runs 100 s; A (two 4-GPU pods) then takes the empty node and
    waits for the other; B (three 2-GPU pods) takes the 2 GPUs left beside F, and when F ends, the 2 F
    leaves: A and B each hold 4 GPUs and wait for the other's."""
    nodes = [node("n0"), node("n1")]
    jobs = [job("f", 1, 2, 0, 100), job("a", 2, 4, 1, 50), job("b", 3, 2, 2, 50)]
    return nodes, jobs


def test_pod_by_pod_deadlocks_two_competing_jobs_and_gangs_do_not() -> None:
    nodes, jobs = deadlock_case()
    alone = run("pod-by-pod", nodes, jobs)
    assert (alone.placed, alone.partial_at_end, alone.partly_placed) == (1, 2, 2)
    # A holds 4 GPUs from t=1, B 2 from t=2 and 4 from t=100, when the run ends: nothing else can happen.
    assert alone.partial_gpu_seconds == 4 * 99 + 2 * 98
    assert alone.curve[-1] == (100.0, 8, 8)
    gang = run("gang", nodes, jobs)
    assert (gang.placed, gang.partial_gpu_seconds, gang.partly_placed, gang.partial_at_end) == (3, 0.0, 0, 0)
    assert gang.waits == [0.0, 0.0, 99.0]  # F, B at once; A when F is gone
    # A give-up breaks the deadlock: A is withdrawn at t=201 and B runs then.
    given_up = run("pod-by-pod", nodes, jobs, give_up=200)
    assert (given_up.placed, given_up.gave_up, given_up.partial_at_end) == (2, 1, 0)
    assert given_up.partial_gpu_seconds == 4 * 200 + 2 * 98 + 4 * 101


@pytest.mark.parametrize("policy", JOB_POLICIES)
def test_a_job_run_leaves_nothing_for_the_cycle_collector(policy: str) -> None:
    """As a pod run: the run's service and cache go by reference counting when it ends."""
    import gc

    nodes, jobs = random_cluster(0)
    gc.collect()
    gc.disable()
    try:
        assert run(policy, nodes, jobs, rack_size=3).placed > 0
        assert gc.collect() == 0
    finally:
        gc.enable()


def random_cluster(seed: int) -> tuple[list[SimNode], list[Job]]:
    rng = random.Random(seed)
    nodes = [node(f"n{i:02d}", rng.choice([2, 4, 8]), 64000, 512) for i in range(12)]
    jobs = [
        Job(f"j{i:02d}", rng.choice([1, 2, 3, 4]), rng.choice([1, 2, 4]), 4000, 8192, rng.randrange(0, 600), 300)
        for i in range(40)
    ]
    return nodes, jobs


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gangs_never_hold_gpus_for_partly_placed_jobs(seed: int) -> None:
    nodes, jobs = random_cluster(seed)
    for policy in JOB_POLICIES[1:]:
        result = run(policy, nodes, jobs, rack_size=3, seed=seed)
        assert (result.partial_gpu_seconds, result.partly_placed, result.bind_errors) == (0.0, 0, 0), policy
        assert all(partial == 0 for _, _, partial in result.curve)
        assert result.placed + result.partial_at_end <= len(jobs)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_required_rack_is_never_spanned(seed: int) -> None:
    nodes, jobs = random_cluster(seed)
    racks = {n.name: n.labels[RACK_LABEL] for n in with_racks(nodes, 3)}
    result = run("gang-topology", nodes, jobs, rack_size=3, seed=seed)
    assert result.spanning == 0 and result.placed > 0
    by_job: dict[str, set[str]] = {}
    for pod, where in result.placements.items():
        by_job.setdefault(pod.rsplit("-", 1)[0], set()).add(racks[where])
    assert by_job and all(len(used) == 1 for used in by_job.values())
    # Without a topology request the same jobs do span racks.
    assert run("gang", nodes, jobs, rack_size=3, seed=seed).spanning > 0


def test_a_jobs_topology_column_overrides_the_policy() -> None:
    nodes = [node(f"n{i}") for i in range(4)]  # racks of 2 nodes: 8 GPUs each
    wide = [job("wide", 3, 4)]  # 12 GPUs: never in one rack
    assert run("gang-topology", nodes, wide, rack_size=2).placed == 0
    assert run("gang-topology-preferred", nodes, wide, rack_size=2).spanning == 1
    assert run("gang-topology", nodes, [job("wide", 3, 4, topology="none")], rack_size=2).placed == 1
    preferred = run("gang-topology", nodes, [job("wide", 3, 4, topology="preferred")], rack_size=2)
    assert (preferred.placed, preferred.spanning) == (1, 1)


@pytest.mark.parametrize("policy", JOB_POLICIES)
def test_skipped_retries_change_no_placement(policy: str) -> None:
    nodes, jobs = random_cluster(3)
    hinted = run(policy, nodes, jobs, rack_size=3, seed=5)
    full = run(policy, nodes, jobs, rack_size=3, seed=5, retry_hints=False)
    assert hinted.placements == full.placements and hinted.curve == full.curve
    assert hinted.attempts < full.attempts


def test_gangs_of_dra_gpus_fill_a_node_without_over_committing_it() -> None:
    nodes = [node("n0"), node("n1")]
    result = run("gang", nodes, [job("j", 4, 2)], sharing="dra")
    assert (result.placed, result.bind_errors, result.partial_gpu_seconds) == (1, 0, 0.0)


# ------------------------------------------------------------------------------------ the CLI
def test_the_cli_compares_job_policies_and_draws_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes_csv = tmp_path / "nodes.csv"
    nodes_csv.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,32000,262144,4,\nn1,32000,262144,4,\n")
    nodes, jobs = deadlock_case()
    jobs_path = tmp_path / "jobs.csv"
    jobs_path.write_text(jobs_csv(jobs), encoding="utf-8")
    assert len(load_nodes_csv(nodes_csv)) == len(nodes)
    args = ["simulate", "--nodes", str(nodes_csv), "--jobs", str(jobs_path), "--sharing", "none"]
    args += ["--scheduler-config", "none", "--workers", "1", "--no-progress"]
    assert main([*args, "--json", "--job-policy", "pod-by-pod", "--job-policy", "gang"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["jobs"], report["racks"], report["policy"]) == (3, 1, "shipped")
    by_policy = {s["jobPolicy"]: s for s in report["summary"]}
    assert by_policy["pod-by-pod"]["placed"]["median"] == 1 and by_policy["gang"]["placed"]["median"] == 3
    assert by_policy["pod-by-pod"]["partlyPlacedGpuHours"]["median"] == round(592 / 3600, 3)
    plot = tmp_path / "jobs.png"
    assert main([*args, "--plot", str(plot), "--seeds", "2"]) == 0
    table = capsys.readouterr().out
    assert "GPU-hours held by partly placed jobs" in table and "gang-topology-preferred" in table
    assert "per job policy over seeds 0..1" in table
    assert plot.stat().st_size > 10_000


def test_the_cli_makes_a_job_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes_csv = tmp_path / "nodes.csv"
    nodes_csv.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,96000,393216,8,G2\n")
    pods_csv = tmp_path / "pods.csv"
    lines = ["name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time"]
    for index, gpus in enumerate([1, 2, 4, 8, 1, 8]):
        lines.append(f"p{index},{8000 * gpus},{16384 * gpus},{gpus},1000,,LS,Running,{index},{index + 900}")
    pods_csv.write_text("\n".join(lines) + "\n")
    args = ["simulate", "--nodes", str(nodes_csv), "--pods", str(pods_csv), "--make-jobs", "25", "--seed", "3"]
    assert main(args) == 0
    first = capsys.readouterr().out
    assert main(args) == 0 and capsys.readouterr().out == first
    out = tmp_path / "made.csv"
    out.write_text(first, encoding="utf-8")
    made = load_jobs_csv(out)
    assert len(made) == 25 and {j.duration for j in made} == {900}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--pods", "x.csv"], "--jobs replaces --pods"),
        (["--job-policy", "gangs"], "unknown job policy gangs"),
        (["--policy", "random", "--policy", "fgd"], "one scoring --policy"),
        (["--rack-size", "0"], "--rack-size must be >= 1"),
        (["--give-up", "0"], "--give-up must be > 0"),
    ],
)
def test_the_cli_refuses_bad_job_arguments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    nodes_csv = tmp_path / "nodes.csv"
    nodes_csv.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,32000,262144,4,\n")
    assert main(["simulate", "--nodes", str(nodes_csv), "--jobs", str(EXAMPLE), *extra]) == 2
    assert message in capsys.readouterr().err


def test_the_cli_needs_pods_or_jobs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--nodes", "nodes.csv"]) == 2
    assert "one of --pods or --jobs is required" in capsys.readouterr().err
    assert main(["simulate", "--nodes", "nodes.csv", "--pods", "p.csv", "--job-policy", "gang"]) == 2
    assert "--job-policy needs --jobs" in capsys.readouterr().err
