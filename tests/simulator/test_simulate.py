"""The simulator: policies, fill and replay, the verbs each pod goes through, metrics and the CLI, on tiny
hand-checked traces (parsing: test_trace.py; the kube-scheduler model: test_scheduler_model.py)."""

from __future__ import annotations

import asyncio
import gc
import json
from pathlib import Path

import pytest

from app.cli import main
from app.config import load_config
from simulator.schedconfig import (
    DEFAULT_SCHEDULER_CONFIG,
    load_scheduler_config,
)
from simulator.simulate import _Scheduler, policy_config, simulate
from simulator.trace import (
    GPU,
    KIND_CPU,
    KIND_MULTI_GPU,
    KIND_ONE_GPU,
    load_nodes_csv,
    load_pods_csv,
)
from tests.conftest import WIRE_FIXTURES

ROOT = Path(__file__).resolve().parents[2]
NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model\n"
POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def trace(tmp_path: Path, nodes: str, pods: str) -> tuple[list, list]:  # type: ignore[type-arg]
    return (
        load_nodes_csv(write(tmp_path, "nodes.csv", NODE_HEADER + nodes)),
        load_pods_csv(write(tmp_path, "pods.csv", POD_HEADER + pods)),
    )


# ------------------------------------------------------------------------------------ policies
def test_policies_are_configs_through_the_same_validation() -> None:
    base = load_config(None)
    assert policy_config(base, "fitplus-sra").plugins == base.plugins
    assert policy_config(base, "random").plugins == []
    least = policy_config(base, "least-allocated").plugins[0].args["resources"]
    assert least == {"cpu": {"type": "LeastAllocated", "weight": 1}, "memory": {"type": "LeastAllocated", "weight": 1}}
    assert policy_config(base, "most-allocated").managed_resource_names == ["cpu", "memory", GPU]
    shipped = policy_config(base, "shipped")  # deploy/'s plugins and its settings that change placement
    assert [p.name for p in shipped.plugins] == [
        "GpuFragmentation",
        "BestFit",
        "GpuCpuBalance",
        "GpuModelBalance",
        "IdleGpuAvoidance",
        "ScarceResourceAvoidance",
    ]
    assert (shipped.priorityScale, shipped.tieBreak) == ("Candidates", {"mostAllocated": [GPU], "random": True})
    assert shipped.filterReturns == "BestScored"
    assert base.tieBreak is None and policy_config(base, "random").tieBreak is None
    assert base.filterReturns == policy_config(base, "random").filterReturns == "Feasible"
    with pytest.raises(ValueError, match="unknown policy 'tetris'"):
        policy_config(base, "tetris")


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_cpu_pod_stays_off_the_gpu_node_under_fitplus_sra(tmp_path: Path, seed: int) -> None:
    # Hand-check (pod 1000m/1Gi, both nodes 8000m/16Gi): FitPlus = (87 + 93) // 2 = 90 on both; SRA is
    # 100 on the CPU node and 0 on the GPU node (its one unrequested type is scarce). Priorities
    # (90+100)//2 = 95 -> 10 and 45 -> 5: the CPU node wins whatever the seed.
    nodes, pods = trace(
        tmp_path, "gpu-node,8000,16384,4,T4\ncpu-node,8000,16384,0,\n", "web,1000,1024,0,0,,LS,Running,0,,0\n"
    )
    result = simulate("fitplus-sra", load_config(None), nodes, pods, seed=seed, sharing="none")
    assert result.placements == {"web": "cpu-node"}
    assert result.cpu_pods_on_gpu_nodes == 0


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_one_gpu_pod_packs_under_most_allocated(tmp_path: Path, seed: int) -> None:
    # Hand-check for the second pod (nodes 16000m/64Gi/4 GPUs, pods 1000m/1Gi/1 GPU): the used node
    # scores (12 + 3 + 50) // 3 = 21 -> 2, the empty one (6 + 1 + 25) // 3 = 10 -> 1.
    nodes, pods = trace(
        tmp_path,
        "a,16000,65536,4,T4\nb,16000,65536,4,T4\n",
        "p1,1000,1024,1,1000,,LS,Running,0,,0\np2,1000,1024,1,1000,,LS,Running,1,,1\n",
    )
    result = simulate("most-allocated", load_config(None), nodes, pods, seed=seed, sharing="none")
    assert result.placements["p1"] == result.placements["p2"]


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_clustering_keeps_shares_and_whole_gpus_on_separate_nodes(tmp_path: Path, seed: int) -> None:
    # Three 2-GPU nodes, GPUs as DRA devices. s1 ties everywhere (idle: 25 + 25·6000 // 8000 = 43);
    # s2 finds s1's node at 75 + 21 (only shares there), the others at 43; w1 (1 GPU) finds the shares'
    # node at 0 + 21 (only another kind) and goes to an idle one, where w2 follows (75 + 21).
    nodes, pods = trace(
        tmp_path,
        "a,16000,65536,2,T4\nb,16000,65536,2,T4\nc,16000,65536,2,T4\n",
        "s1,1000,1024,1,500,,LS,Running,0,,0\ns2,1000,1024,1,300,,LS,Running,1,,1\n"
        "w1,1000,1024,1,1000,,LS,Running,2,,2\nw2,1000,1024,1,1000,,LS,Running,3,,3\n",
    )
    result = simulate("clustering", load_config(None), nodes, pods, seed=seed)
    placed = result.placements
    assert placed["s1"] == placed["s2"] and placed["w1"] == placed["w2"] and placed["s1"] != placed["w1"]


def test_least_allocated_spreads_and_strands_gpus_that_most_allocated_keeps(tmp_path: Path) -> None:
    # Two 2-GPU nodes (8000m/16Gi), two 1-GPU pods, then a 2-GPU pod. LeastAllocated (cpu, memory)
    # puts the second pod on the empty node: (87 + 93) // 2 = 90 -> 9 against (75 + 87) // 2 = 81 -> 8;
    # the 2-GPU pod then fails with 2 of 4 GPUs allocated and the 2 free ones stranded.
    nodes, pods = trace(
        tmp_path,
        "a,8000,16384,2,T4\nb,8000,16384,2,T4\n",
        "p1,1000,1024,1,1000,,LS,Running,0,,0\np2,1000,1024,1,1000,,LS,Running,1,,1\n"
        "big,1000,1024,2,1000,,LS,Running,2,,2\n",
    )
    spread = simulate("least-allocated", load_config(None), nodes, pods, sharing="none")
    assert spread.placements["p1"] != spread.placements["p2"]
    assert spread.failed == {KIND_CPU: 0, KIND_ONE_GPU: 0, KIND_MULTI_GPU: 1}
    failure = spread.first_gpu_failure
    assert failure is not None
    assert (failure.pod, failure.submitted_gpus, failure.allocated_gpus, failure.free_gpus) == ("big", 4, 2, 2)
    assert failure.fragmented_gpus == 2
    assert (spread.gpu_demand, spread.gpu_placed) == (4, 2)
    assert spread.gpu_demand_share == 0.5
    assert spread.curve == [(1, 1), (2, 2), (4, 2)]
    packed = simulate("most-allocated", load_config(None), nodes, pods, sharing="none")
    assert packed.failed[KIND_MULTI_GPU] == 0 and packed.first_gpu_failure is None
    assert packed.gpu_demand_share == 1.0


def test_gpu_spec_restricts_the_model(tmp_path: Path) -> None:
    nodes, pods = trace(
        tmp_path,
        "t4,8000,16384,2,T4\nv100,8000,16384,2,V100M16\n",
        "want-v100,1000,1024,1,1000,V100M16|V100M32,LS,Running,0,,0\nwant-a10,1000,1024,1,1000,A10,LS,Running,1,,1\n",
    )
    for policy in ("fitplus-sra", "least-allocated", "most-allocated", "random"):
        result = simulate(policy, load_config(None), nodes, pods, sharing="none")
        assert result.placements == {"want-v100": "v100"}
        failure = result.first_gpu_failure
        assert failure is not None and failure.pod == "want-a10"
        # No node of an allowed model: 3 GPUs are free, none of them usable for this pod's spec.
        assert (failure.free_gpus, failure.fragmented_gpus) == (3, 0)


def test_sharing_pods_take_a_whole_gpu_and_are_counted(tmp_path: Path) -> None:
    nodes, pods = trace(
        tmp_path,
        "a,8000,16384,1,T4\n",
        "s1,1000,1024,1,500,,LS,Running,0,,0\ns2,1000,1024,1,250,,LS,Running,1,,1\n",
    )
    result = simulate("fitplus-sra", load_config(None), nodes, pods, sharing="none")
    assert result.shared_gpu_pods == 2
    assert result.placed[KIND_ONE_GPU] == 1 and result.failed[KIND_ONE_GPU] == 1


def test_cpu_and_memory_are_checked_too(tmp_path: Path) -> None:
    nodes, pods = trace(
        tmp_path,
        "a,4000,4096,0,\n",
        "p1,3000,1024,0,0,,LS,Running,0,,0\np2,2000,1024,0,0,,LS,Running,1,,1\np3,1000,4096,0,0,,LS,Running,2,,2\n",
    )
    result = simulate("random", load_config(None), nodes, pods, sharing="none")
    assert list(result.placements) == ["p1"]  # p2: 5000m > 4000m; p3: 5 GiB > 4 GiB
    assert result.failed[KIND_CPU] == 2


def test_lowest_name_tie_break_plays_the_fgd_artifacts_select_host(tmp_path: Path) -> None:
    # policy random: every feasible node ties, so the tie-break alone decides
    nodes, pods = trace(
        tmp_path,
        "n2,8000,16384,2,T4\nn0,8000,16384,2,T4\nn1,8000,16384,2,T4\n",
        "".join(f"p{i},1000,1024,1,1000,,LS,Running,{i},,{i}\n" for i in range(5)),
    )
    for seed in range(3):
        result = simulate("random", load_config(None), nodes, pods, seed=seed, sharing="none", tie_break="lowest-name")
        assert list(result.placements.values()) == ["n0", "n0", "n1", "n1", "n2"]
    spread = {
        tuple(simulate("random", load_config(None), nodes, pods, seed=seed, sharing="none").placements.values())
        for seed in range(8)
    }
    assert len(spread) > 1  # kube-scheduler's random pick: the seed changes where pods go
    with pytest.raises(ValueError, match="unknown tie-break 'first'"):
        simulate("random", load_config(None), nodes, pods, sharing="none", tie_break="first")


def test_each_pod_goes_through_the_services_filter_prioritize_and_bind(tmp_path: Path) -> None:
    nodes, pods = trace(tmp_path, "a,8000,16384,2,T4\nb,8000,16384,0,\n", "p,1000,1024,1,1000,,LS,Running,0,,0\n")
    scheduler = _Scheduler(policy_config(load_config(None), "fitplus-sra"), nodes, seed=0)
    node = asyncio.run(scheduler.schedule(pods[0]))
    assert node == "a"  # b has no GPU: the filter rejects it
    decisions = list(scheduler.service.decisions)
    assert [d["verb"] for d in decisions] == ["filter", "prioritize", "bind"]
    assert decisions[0]["passed"] == 1 and decisions[2]["outcome"] == "bound"
    assert scheduler.cache.counted(pods[0].uid) is not None
    assert scheduler.cache.usage("a").requested[GPU] == 1
    scheduler.cache.check_invariants()


def test_shipped_filter_passes_its_best_node_alone_and_kube_scheduler_takes_it_unscored(tmp_path: Path) -> None:
    # deploy/'s filterReturns: BestScored, as in a cluster: one node passes, no /prioritize call.
    nodes, pods = trace(
        tmp_path,
        "a,8000,16384,2,T4\nb,8000,16384,2,T4\n",
        "p,1000,1024,1,1000,,LS,Running,0,,0\nq,1000,1024,1,1000,,LS,Running,0,,0\n",
    )
    profile = load_scheduler_config(DEFAULT_SCHEDULER_CONFIG)
    scheduler = _Scheduler(policy_config(load_config(None), "shipped"), nodes, seed=0, scheduler=profile)
    first = asyncio.run(scheduler.schedule(pods[0]))
    assert asyncio.run(scheduler.schedule(pods[1])) == first  # the node with a GPU in use: packed
    decisions = list(scheduler.service.decisions)
    # Two empty nodes tie: tieBreak.random passes one of them; then one node is best.
    assert [d["verb"] for d in decisions] == ["filter", "bind", "filter", "bind"]
    assert [(d["passed"], d["feasible"]) for d in decisions if d["verb"] == "filter"] == [(1, 2), (1, 2)]


def _layout(body: bytes) -> bytes:
    """A NodeNames-mode body with the Pod and the names cut out: the fields, their order and spelling."""
    pod_end = body.index(b',"Nodes":')
    names_start = body.index(b'"NodeNames":[') + len(b'"NodeNames":[')
    return body[: len(b'{"Pod":')] + body[pod_end:names_start] + body[body.rindex(b"]") :]


def test_filter_and_prioritize_bodies_have_kube_schedulers_layout(tmp_path: Path) -> None:
    # The extender splits a body in Go's layout without decoding it (app.http.wire): the simulator
    # must send what kube-scheduler sends, or it measures a slower path than a cluster takes.
    captured = (WIRE_FIXTURES / "filter-allpods-nodecache-true.request.json").read_bytes().strip()
    nodes, pods = trace(tmp_path, "a,8000,16384,2,T4\nb,8000,16384,2,T4\n", "p,1000,1024,1,1000,,LS,Running,0,,0\n")
    scheduler = _Scheduler(policy_config(load_config(None), "fitplus-sra"), nodes, seed=0)
    sent: list[bytes] = []
    filter_, priorities = scheduler.service.filter_passed, scheduler.service.priorities
    scheduler.service.filter_passed = lambda body: sent.append(body) or filter_(body)  # type: ignore[method-assign]
    scheduler.service.priorities = lambda body: sent.append(body) or priorities(body)  # type: ignore[method-assign]
    assert asyncio.run(scheduler.schedule(pods[0])) in ("a", "b")
    assert len(sent) == 2  # filter, then prioritize with the two nodes that passed
    assert {_layout(body) for body in sent} == {_layout(captured)} == {b'{"Pod":,"Nodes":null,"NodeNames":[]}'}


def test_a_run_tunes_the_cyclic_gc_as_the_service_does_and_restores_it(tmp_path: Path) -> None:
    rows = "".join(f"p{i},10,16,0,0,,LS,Running,0,,0\n" for i in range(256))
    nodes, pods = trace(tmp_path, "a,8000,16384,2,T4\n", rows)
    before = gc.get_threshold()
    seen: list[tuple[int, ...]] = []
    progress = lambda _: seen.append(gc.get_threshold())  # noqa: E731
    simulate("random", load_config(None), nodes, pods, sharing="none", progress=progress)
    assert seen == [(50_000, 20, 20)]  # during the run (progress every 256 events)
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0  # app.gctuning.tuned


@pytest.mark.parametrize("sharing", ["none", "dra"])
def test_a_run_leaves_nothing_for_the_cycle_collector(tmp_path: Path, sharing: str) -> None:
    """The run's service, cache and everything they hold go by reference counting when it returns
    (ExtenderService.close): a full collection of them took a third of a second per openb run."""
    rows = "".join(f"p{i},1000,1024,1,{500 if i % 2 else 1000},,LS,Running,0,,0\n" for i in range(64))
    nodes, pods = trace(tmp_path, "a,32000,65536,4,T4\nb,32000,65536,4,T4\n", rows)
    gc.collect()
    gc.disable()
    try:
        result = simulate("shipped", load_config(None), nodes, pods, sharing=sharing)
        assert result.gpu_placed > 0
        assert gc.collect() == 0
    finally:
        gc.enable()


# ------------------------------------------------------------------------------------ modes
def test_replay_frees_capacity_at_deletion_and_fill_ignores_it(tmp_path: Path) -> None:
    nodes, pods = trace(
        tmp_path,
        "a,8000,16384,1,T4\n",
        "first,1000,1024,1,1000,,LS,Running,0,10,0\nsecond,1000,1024,1,1000,,LS,Running,20,30,20\n"
        "third,1000,1024,1,1000,,LS,Running,30,,30\n",
    )
    replay = simulate("fitplus-sra", load_config(None), nodes, pods, mode="replay", sharing="none")
    # first runs 0..10, second 20..30, third arrives at 30 when second leaves (deletions go first).
    assert replay.placed[KIND_ONE_GPU] == 3 and replay.first_gpu_failure is None
    assert replay.placements == {"third": "a"}
    assert replay.final_allocated_gpus == 1
    assert replay.curve == [(1, 1), (2, 1), (3, 1)]
    assert replay.peak_allocated_gpus == 1
    fill = simulate("fitplus-sra", load_config(None), nodes, pods, mode="fill", sharing="none")
    assert fill.placed[KIND_ONE_GPU] == 1 and fill.failed[KIND_ONE_GPU] == 2
    assert fill.placements == {"first": "a"}


def test_replay_deletes_a_pod_that_ends_the_instant_it_starts_after_creating_it(tmp_path: Path) -> None:
    nodes, pods = trace(
        tmp_path,
        "a,8000,16384,1,T4\n",
        "blink,1000,1024,1,1000,,LS,Running,5,5,5\nnext,1000,1024,1,1000,,LS,Running,6,,6\n",
    )
    result = simulate("fitplus-sra", load_config(None), nodes, pods, mode="replay", sharing="none")
    assert result.placements == {"next": "a"} and result.failed[KIND_ONE_GPU] == 0


def test_the_seed_makes_runs_repeatable(tmp_path: Path) -> None:
    nodes, pods = trace(
        tmp_path,
        "".join(f"n{i},8000,16384,2,T4\n" for i in range(8)),
        "".join(f"p{i},1000,1024,1,1000,,LS,Running,{i},,{i}\n" for i in range(12)),
    )
    first = simulate("random", load_config(None), nodes, pods, seed=7, sharing="none")
    again = simulate("random", load_config(None), nodes, pods, seed=7, sharing="none")
    assert first.placements == again.placements and len(first.placements) == 12


def test_unknown_mode_is_refused(tmp_path: Path) -> None:
    nodes, pods = trace(tmp_path, "a,1,1,0,\n", "p,1,1,0,0,,LS,Running,0,,0\n")
    with pytest.raises(ValueError, match="unknown mode 'shrink'"):
        simulate("random", load_config(None), nodes, pods, mode="shrink", sharing="none")


# ------------------------------------------------------------------------------------ CLI
def test_cli_json_table_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes = write(tmp_path, "nodes.csv", NODE_HEADER + "a,8000,16384,2,T4\nb,8000,16384,0,\n")
    pods = write(
        tmp_path, "pods.csv", POD_HEADER + "p,1000,1024,1,1000,,LS,Running,0,,0\nq,500,512,0,0,,LS,Running,1,,1\n"
    )
    plot = tmp_path / "out.png"
    args = ["simulate", "--nodes", str(nodes), "--pods", str(pods), "--no-progress"]
    assert main([*args, "--json", "--plot", str(plot), "--policy", "fitplus-sra", "--policy", "random"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in report["results"]] == ["fitplus-sra", "random"]
    assert report["results"][0]["placed"] == {KIND_CPU: 1, KIND_ONE_GPU: 1, KIND_MULTI_GPU: 0}
    assert report["results"][0]["cpuPodsOnGpuNodes"] == 0
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(args) == 0
    table = capsys.readouterr().out
    for policy in ("fitplus-sra", "least-allocated", "most-allocated", "random"):
        assert policy in table
    assert "GPU demand placed" in table and "1/1 (100.0%)" in table


def test_cli_reports_bad_traces_and_policies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes = write(tmp_path, "nodes.csv", NODE_HEADER + "a,8000,16384,x,T4\n")
    pods = write(tmp_path, "pods.csv", POD_HEADER)
    assert main(["simulate", "--nodes", str(nodes), "--pods", str(pods)]) == 2
    assert "nodes.csv:2: column gpu: 'x' is not an integer" in capsys.readouterr().err
    assert main(["simulate", "--nodes", str(nodes), "--pods", str(pods), "--policy", "tetris"]) == 2
    assert "unknown policy tetris" in capsys.readouterr().err
