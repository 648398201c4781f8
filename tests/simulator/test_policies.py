"""simulator.policies: the FGD paper's baselines and ours as extender configurations, with the
target workload taken from the trace."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from app.cli import main
from app.config import load_config
from scoring.fragmentation import GpuFragmentationArgs
from simulator.policies import POLICIES, cpu_per_gpu, policy_config, workload
from simulator.trace import SimPod


def sim_pod(name: str, cpu: int, gpus: int, milli: int) -> SimPod:
    return SimPod(name=name, body=b"{}", cpu_milli=cpu, memory=0, gpus=gpus, gpu_milli=milli)


def test_workload_is_the_most_popular_task_types() -> None:
    pods = [sim_pod(f"a{i}", 4000, 1, 500) for i in range(6)]
    pods += [sim_pod(f"b{i}", 8000, 1, 1000) for i in range(3)]
    pods += [sim_pod("c", 1000, 0, 0)]
    # 95 % of 10 pods: the first two types cover 9, the third is needed for the tenth
    assert workload(pods) == [
        {"cpu": 4000, "gpuMilli": 500, "gpus": 1, "popularity": 6},
        {"cpu": 8000, "gpuMilli": 1000, "gpus": 1, "popularity": 3},
        {"cpu": 1000, "gpuMilli": 0, "gpus": 0, "popularity": 1},
    ]
    assert workload(pods, popularity=0.5) == [{"cpu": 4000, "gpuMilli": 500, "gpus": 1, "popularity": 6}]


def test_every_policy_is_a_valid_configuration() -> None:
    base = load_config(None)
    pods = [sim_pod("a", 4000, 1, 500), sim_pod("b", 1000, 0, 0)]
    for policy in POLICIES:
        config = policy_config(base, policy, pods)
        config.build_profile()
    fgd = policy_config(base, "fgd", pods)
    assert [p.name for p in fgd.plugins] == ["GpuFragmentation"]
    # the FGD artifact's GPU choice inside the node and its scheduler's rule among equal scores
    assert (fgd.deviceChoice, fgd.tieBreak) == ("LeastFragmentation", {"lowestName": True})
    assert policy_config(base, "best-fit", pods).deviceChoice == "FirstFit"


def test_print_workload_writes_args_gpu_fragmentation_accepts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "pods.csv"
    trace.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,4000,1024,1,500\np1,4000,1024,1,500\np2,8000,1024,2,1000\n"
    )
    assert main(["simulate", "--pods", str(trace), "--print-workload"]) == 0
    out = capsys.readouterr().out
    args = GpuFragmentationArgs.parse(yaml.safe_load(out))
    assert [(t.cpu, t.gpu_milli, t.gpus, t.popularity) for t in args.workload] == [
        (4000, 500, 1, 2),
        (8000, 1000, 2, 1),
    ]
    # 16,000 milli-CPU for 3,000 milli-GPUs
    assert out.splitlines()[-1].startswith("# GpuCpuBalance: cpuPerGpu: 5333 ")


def test_cpu_per_gpu_is_the_gpu_pods_cpu_per_whole_gpu() -> None:
    pods = [sim_pod("a", 4000, 1, 500), sim_pod("b", 8000, 2, 1000), sim_pod("c", 64000, 0, 0)]
    assert cpu_per_gpu(pods) == 4800  # 12,000 milli-CPU over 2.5 GPUs; CPU-only pods do not count
    assert cpu_per_gpu([sim_pod("c", 64000, 0, 0)]) == 1
    assert cpu_per_gpu([sim_pod("a", 0, 1, 500)]) == 1
    config = policy_config(load_config(None), "fgd-cpu-balance", pods)
    assert [(p.name, p.weight) for p in config.plugins] == [
        ("GpuFragmentation", 19),
        ("BestFit", 1),
        ("GpuCpuBalance", 10),
    ]
    assert config.plugins[2].args == {"cpuPerGpu": 4800, "milliPerPoint": 10}


def test_shipped_own_is_the_shipped_config_with_the_traces_own_per_cluster_values() -> None:
    pods = [sim_pod("a", 4000, 1, 500), sim_pod("b", 8000, 2, 1000), sim_pod("c", 64000, 0, 0)]
    base = load_config(None)
    shipped, own = policy_config(base, "shipped", pods), policy_config(base, "shipped-own", pods)
    assert [(p.name, p.weight) for p in own.plugins] == [(p.name, p.weight) for p in shipped.plugins]
    assert "GpuModelBalance" in [p.name for p in own.plugins]
    for plugin, shipped_plugin in zip(own.plugins, shipped.plugins, strict=True):
        if plugin.name == "GpuFragmentation":
            assert plugin.args == {**shipped_plugin.args, "workload": workload(pods)}
        elif plugin.name == "GpuCpuBalance":
            assert plugin.args == {**shipped_plugin.args, "cpuPerGpu": 4800}
        else:
            assert plugin.args == shipped_plugin.args
    settings = ("priorityScale", "tieBreak", "filterReturns", "deviceChoice", "filterFailures")
    assert [getattr(own, key) for key in settings] == [getattr(shipped, key) for key in settings]


def test_simulate_without_nodes_is_an_error_that_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--pods", "x.csv"]) == 2
    assert "--nodes or --snapshot" in capsys.readouterr().err
