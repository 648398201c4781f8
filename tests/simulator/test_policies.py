"""simulator.policies: the FGD paper's baselines and ours as extender configurations, with the
target workload taken from the trace."""

from __future__ import annotations

from app.config import load_config
from simulator.policies import POLICIES, policy_config, workload
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
    names = [p.name for p in policy_config(base, "fgd", pods).plugins]
    assert names == ["GpuFragmentation"]
