"""The simulator's kube-scheduler: in-tree scores against the extender's weight, one feasible node taken
unscored, pods the extender is not asked about, and the CLI's scheduler config."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import pytest
import yaml

from app.cli import main
from app.config import ExtenderConfiguration, load_config
from simulator.schedconfig import (
    DEFAULT_SCHEDULER_CONFIG,
    SchedulerConfig,
    load_scheduler_config,
    parse_scheduler_config,
)
from simulator.simulate import PolicyResult, _Scheduler, policy_config, simulate
from simulator.trace import (
    GPU,
    KIND_MULTI_GPU,
)
from tests.simulator.test_simulate import NODE_HEADER, POD_HEADER, ROOT, trace, write

LOW_WEIGHT = ROOT / "tests" / "fixtures" / "low-weight-profile"


def low_weight_profile() -> tuple[ExtenderConfiguration, SchedulerConfig]:
    """A profile where kube-scheduler's own scores outweigh the extender's: in-tree LeastAllocated and
    BalancedAllocation scoring, extender weight 1, Absolute priorities."""
    return (
        load_config(LOW_WEIGHT / "extender-config.yaml"),
        load_scheduler_config(LOW_WEIGHT / "kube-scheduler-config.yaml"),
    )


def shipped_profile() -> tuple[ExtenderConfiguration, SchedulerConfig]:
    return load_config(None), load_scheduler_config(DEFAULT_SCHEDULER_CONFIG)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_in_tree_scores_outweigh_a_weight_one_extender(tmp_path: Path, seed: int) -> None:
    # Two 8-GPU nodes (64 cores, 512Gi); p1 (8 cores, 64Gi, 1 GPU) lands on one of them (a tie), then
    # p2, the same size. On p1's node the extender scores FitPlus (25·2 + 75 + 75) // 4 = 50, SRA 100:
    # (50 + 100) // 2 = 75 -> Absolute 8; on the empty node (12·2 + 87 + 87) // 4 = 49 -> 74 -> 7.
    # kube-scheduler adds LeastAllocated (75 vs 87) and BalancedAllocation (75 on both: the balance
    # does not change), so with weight 1: 75 + 75 + 8·10 = 230 against 87 + 75 + 7·10 = 232 -> the
    # empty node. With the shipped profile only the extender counts (Candidates: 10 vs 0, x 200).
    nodes, pods = trace(
        tmp_path,
        "a,64000,524288,8,A100\nb,64000,524288,8,A100\n",
        "p1,8000,65536,1,1000,,LS,Running,0,,0\np2,8000,65536,1,1000,,LS,Running,1,,1\n",
    )
    low_config, low_scheduler = low_weight_profile()
    spread = simulate("fitplus-sra", low_config, nodes, pods, seed=seed, scheduler=low_scheduler, sharing="none")
    assert spread.placements["p1"] != spread.placements["p2"]
    # the extender's priority alone: 8 > 7
    alone = simulate("fitplus-sra", low_config, nodes, pods, seed=seed, sharing="none")
    assert alone.placements["p1"] == alone.placements["p2"]
    shipped_config, shipped_scheduler = shipped_profile()
    packed = simulate(
        "fitplus-sra", shipped_config, nodes, pods, seed=seed, scheduler=shipped_scheduler, sharing="none"
    )
    assert packed.placements["p1"] == packed.placements["p2"]


def _gpu_cluster(tmp_path: Path) -> tuple[list, list]:  # type: ignore[type-arg]
    """40 nodes of 8 GPUs and 10 CPU nodes; 260 pods (9 in 10 ask for one GPU, sizes drawn with a
    fixed seed), then an 8-GPU pod."""
    draw = random.Random(20261124)
    rows = []
    for index in range(260):
        gpus = 1 if draw.random() < 0.9 else 0
        cpu, memory = draw.choice([2000, 4000, 8000]), draw.choice([8192, 16384, 32768])
        rows.append(f"p{index},{cpu},{memory},{gpus},{1000 if gpus else 0},,LS,Running,{index},,{index}\n")
    rows.append("big,16000,65536,8,1000,,LS,Running,1000,,1000\n")
    node_rows = [f"g{i},64000,524288,8,A100\n" for i in range(40)] + [f"c{i},64000,262144,0,\n" for i in range(10)]
    return trace(tmp_path, "".join(node_rows), "".join(rows))


@pytest.mark.parametrize("seed", [0, 1])
def test_a_low_weight_profile_spreads_gpus_that_the_shipped_one_packs(tmp_path: Path, seed: int) -> None:
    nodes, pods = _gpu_cluster(tmp_path)
    one_gpu = [p.name for p in pods if p.gpus == 1]

    def gpu_nodes_used(result: PolicyResult) -> set[str]:
        return {result.placements[name] for name in one_gpu if name in result.placements}

    low_config, low_scheduler = low_weight_profile()
    low = simulate("fitplus-sra", low_config, nodes, pods, seed=seed, scheduler=low_scheduler, sharing="none")
    shipped_config, shipped_scheduler = shipped_profile()
    shipped = simulate(
        "fitplus-sra", shipped_config, nodes, pods, seed=seed, scheduler=shipped_scheduler, sharing="none"
    )
    placed = [name for name in one_gpu if name in shipped.placements]
    assert len(gpu_nodes_used(shipped)) <= -(-len(placed) // 8) + 3  # packed: close to the fewest whole nodes
    assert len(gpu_nodes_used(low)) >= len(gpu_nodes_used(shipped)) + 5  # spread over many more GPU nodes
    # The 8-GPU pod comes last, at high GPU use: the low-weight profile has left no GPU node empty
    # (enough GPUs are free, none of them together), the shipped one still has whole nodes.
    failure = low.first_gpu_failure
    assert failure is not None and failure.pod == "big"
    assert failure.allocated_gpus >= 0.6 * low.total_gpus and failure.fragmented_gpus >= 8
    assert "big" in shipped.placements and shipped.failed[KIND_MULTI_GPU] == 0
    demand, allocated = shipped.curve[-1]
    assert demand == shipped.gpu_demand and allocated - 8 >= 0.6 * shipped.total_gpus  # GPUs in use before it


def test_one_feasible_node_is_taken_without_prioritize(tmp_path: Path) -> None:
    nodes, pods = trace(
        tmp_path,
        "a,8000,16384,2,T4\nb,8000,16384,0,\n",
        "p,1000,1024,1,1000,,LS,Running,0,,0\nq,1000,1024,0,0,,LS,Running,1,,1\n",
    )
    config, shipped = shipped_profile()
    scheduler = _Scheduler(policy_config(config, "fitplus-sra"), nodes, seed=0, scheduler=shipped)
    assert asyncio.run(scheduler.schedule(pods[0])) == "a"  # b has no GPU: one node passes
    assert [d["verb"] for d in scheduler.service.decisions] == ["filter", "bind"]  # as kube-scheduler: no scoring
    asyncio.run(scheduler.schedule(pods[1]))  # a CPU pod: both pass, so the extender is asked
    assert [d["verb"] for d in scheduler.service.decisions][2:] == ["filter", "prioritize", "bind"]


def test_the_extender_is_not_asked_about_pods_without_its_managed_resources(tmp_path: Path) -> None:
    nodes, pods = trace(
        tmp_path,
        "a,8000,16384,2,T4\nb,8000,16384,0,\n",
        "web,1000,1024,0,0,,LS,Running,0,,0\ngpu,1000,1024,1,1000,,LS,Running,1,,1\n",
    )
    data = yaml.safe_load(DEFAULT_SCHEDULER_CONFIG.read_text(encoding="utf-8"))
    data["extenders"][0]["managedResources"] = [{"name": GPU, "ignoredByScheduler": False}]
    scheduler_config = parse_scheduler_config(data, "managed")
    scheduler = _Scheduler(policy_config(load_config(None), "fitplus-sra"), nodes, seed=0, scheduler=scheduler_config)
    asyncio.run(scheduler.schedule(pods[0]))  # CPU pod, two nodes pass: kube-scheduler alone scores (all tie)
    assert [d["verb"] for d in scheduler.service.decisions] == ["filter", "bind"]


def test_cli_shows_and_takes_the_scheduler_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes = write(tmp_path, "nodes.csv", NODE_HEADER + "a,8000,16384,2,T4\nb,8000,16384,2,T4\n")
    pods = write(tmp_path, "pods.csv", POD_HEADER + "p,1000,1024,1,1000,,LS,Running,0,,0\n")
    args = ["simulate", "--nodes", str(nodes), "--pods", str(pods), "--no-progress", "--policy", "random"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "scheduler config: deploy/kube-scheduler-config.yaml (default), profile gpu-scheduler" in out
    assert "extender weight 200" in out
    assert main([*args, "--scheduler-config", "none"]) == 0
    assert "scheduler config: none (the extender's priority alone decides)" in capsys.readouterr().out
    low_weight = str(LOW_WEIGHT / "kube-scheduler-config.yaml")
    assert main([*args, "--scheduler-config", low_weight, "--profile", "gpu-scheduler", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["schedulerConfig"]
    assert report["source"] == low_weight and report["extenderWeight"] == 1
    assert {"name": "NodeResourcesFit", "weight": 1, "modelled": True} in report["scorePlugins"]
    assert main([*args, "--scheduler-config", str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read scheduler config" in capsys.readouterr().err
    assert main([*args, "--profile", "nope"]) == 2
    assert "no profile with schedulerName 'nope'" in capsys.readouterr().err
    assert main([*args, "--scheduler-config", "none", "--profile", "x"]) == 2
    assert "--profile needs a scheduler config" in capsys.readouterr().err


def test_cli_warns_when_kube_scheduler_would_score_a_sample(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes = write(tmp_path, "nodes.csv", NODE_HEADER + "".join(f"n{i},8000,16384,1,T4\n" for i in range(100)))
    pods = write(tmp_path, "pods.csv", POD_HEADER + "p,1000,1024,1,1000,,LS,Running,0,,0\n")
    data = yaml.safe_load(DEFAULT_SCHEDULER_CONFIG.read_text(encoding="utf-8"))
    del data["profiles"][0]["percentageOfNodesToScore"]  # adaptive: a sample of 100+ nodes
    sampled = write(tmp_path, "sampled.yaml", yaml.safe_dump(data))
    args = ["simulate", "--nodes", str(nodes), "--pods", str(pods), "--no-progress", "--policy", "random"]
    assert main([*args, "--scheduler-config", str(sampled)]) == 0
    assert "percentageOfNodesToScore is adaptive (unset)" in capsys.readouterr().err
    assert main(args) == 0  # the shipped profile scores 100 %
    assert "percentageOfNodesToScore" not in capsys.readouterr().err
