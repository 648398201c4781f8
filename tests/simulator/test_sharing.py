"""GPU sharing in the simulator, the inflate draw and the FGD paper's measures on tiny clusters."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli import main
from app.config import load_config
from simulator import sharing
from simulator.experiment import summarise
from simulator.inflate import inflate, renamed
from simulator.metrics import GpuLedger, Leftover, Shape, ShareMetrics, typical_shapes
from simulator.report import format_leftover
from simulator.simulate import PolicyResult, simulate
from simulator.trace import SimNode, SimPod, load_pods_csv
from tests.simulator.test_simulate import NODE_HEADER, POD_HEADER, trace, write


def pod(name: str, gpus: int = 1, milli: int = 1000, cpu: int = 1000, spec: frozenset[str] = frozenset()) -> SimPod:
    body = json.dumps({"metadata": {"name": name, "namespace": "sim", "uid": f"sim-{name}"}, "spec": {}})
    return SimPod(name, body.encode(), cpu, 1024, gpus, milli if gpus else 0, spec)


def node(name: str, gpus: int, model: str = "T4", cpu: int = 8000) -> SimNode:
    allocatable = {"cpu": cpu, "memory": 1 << 34, **({"nvidia.com/gpu": gpus} if gpus else {})}
    return SimNode(name, allocatable, {"nvidia.com/gpu.product": model})


# ------------------------------------------------------------------------------------ sharing
def test_four_quarter_gpu_pods_share_one_gpu_with_dra_and_take_four_without(tmp_path: Path) -> None:
    nodes, pods = trace(
        tmp_path, "a,8000,16384,1,T4\nb,8000,16384,3,T4\n", "".join(f"p{i},100,64,1,250\n" for i in range(4))
    )
    shared = simulate("most-allocated", load_config(None), nodes, pods, sharing="dra")
    assert shared.metrics is not None and shared.metrics.allocated[-1] == 1000  # four quarters: one GPU's worth
    assert sum(shared.placed.values()) == 4
    whole = simulate("most-allocated", load_config(None), nodes, pods, sharing="none")
    assert whole.metrics is not None and whole.metrics.allocated[-1] == 4000  # each holds a GPU whole


def test_a_fifth_share_does_not_fit_a_full_gpu(tmp_path: Path) -> None:
    nodes, pods = trace(tmp_path, "a,8000,16384,1,T4\n", "".join(f"p{i},100,64,1,300\n" for i in range(4)))
    result = simulate("random", load_config(None), nodes, pods, sharing="dra")
    assert result.metrics is not None
    assert result.metrics.placed["shared-gpu"] == 3 and result.metrics.failed["shared-gpu"] == 1


def test_sharing_none_gives_todays_results_on_a_small_trace(tmp_path: Path) -> None:
    nodes, pods = trace(
        tmp_path,
        "".join(f"n{i},16000,65536,{2 + 2 * (i % 3)},{'T4' if i % 2 else 'V100'}\n" for i in range(12)),
        "".join(
            f"p{i},{1000 + 500 * (i % 5)},2048,{1 + (i % 7 == 0)},{250 if i % 3 == 0 else 1000},"
            f"{'T4' if i % 4 == 0 else ''},LS,Running,{i},,{i}\n"
            for i in range(60)
        ),
    )
    for policy in ("fitplus-sra", "most-allocated", "random"):
        result = simulate(policy, load_config(None), nodes, pods, sharing="none", seed=3)
        # whole GPUs: what the ledger says is allocated is exactly the pods' GPU count
        assert result.metrics is not None
        assert result.metrics.allocated[-1] == 1000 * result.final_allocated_gpus
        again = simulate(policy, load_config(None), nodes, pods, sharing="none", seed=3)
        assert again.placements == result.placements


# ------------------------------------------------------------------------------------ inflate
def test_inflate_draws_copies_with_replacement_up_to_the_target_and_is_seeded() -> None:
    nodes = [node("a", 4), node("b", 4)]  # 8,000 milli-GPUs
    pods = [pod("x", 1), pod("y", 1, 500), pod("z", 0)]  # 1,500 milli
    first = inflate(pods, nodes, 1.3, seed=5)
    demand = sum(p.gpus * (p.gpu_milli or 0) for p in first)
    assert demand <= 10_400 and demand > 10_400 - 1000  # the next draw would pass 130 %
    assert {p.name for p in pods} <= {p.name for p in first}  # the trace is all there
    copies = [p for p in first if "-c" in p.name]
    assert len({p.name for p in first}) == len(first) and copies  # copies are renamed, drawn again
    assert len({p.name.split("-c")[0] for p in copies}) <= 3
    assert [p.name for p in inflate(pods, nodes, 1.3, seed=5)] == [p.name for p in first]
    assert [p.name for p in inflate(pods, nodes, 1.3, seed=6)] != [p.name for p in first]
    assert all(p.uid == f"sim-{p.name}" and p.name.encode() in p.body for p in copies)


def test_inflate_below_the_trace_removes_pods_at_random() -> None:
    nodes = [node("a", 2)]
    pods = [pod(f"p{i}", 1) for i in range(4)]  # 200 % of the GPUs
    kept = inflate(pods, nodes, 1.0, seed=1)
    assert len(kept) == 2


# ------------------------------------------------------------------------------------ measures
def test_typical_shapes_cover_95_percent_and_renormalise() -> None:
    pods = [pod(f"a{i}", 1, 500) for i in range(19)] + [pod("b", 2)]
    shapes = typical_shapes(pods)
    assert [(s.gpus, s.gpu_milli, round(s.weight, 3)) for s in shapes] == [(1, 500, 1.0)]


def test_fragmentation_on_a_hand_computed_node() -> None:
    # one node, 4 GPUs with 200, 1000, 1000, 500 milli free, 1,000 milli-CPU free
    nodes = [node("n", 4, "1080", cpu=4000)]
    shapes = [
        Shape(1000, 600, 1, frozenset(), 0.5),
        Shape(5000, 600, 1, frozenset(), 0.25),
        Shape(100, 0, 0, frozenset(), 0.25),
    ]
    ledger = GpuLedger(nodes, shapes)
    ledger.take(pod("x", 1, 800, cpu=1500), "n", {0: 800})
    ledger.take(pod("y", 1, 500, cpu=1500), "n", {3: 500})
    fragmented, free = ledger.fragmentation()
    assert free == 2700
    # shape 1 fits (two GPUs with >= 600): the 200 + 500 on smaller GPUs are fragments; shape 2
    # lacks cpu (Q4) and the CPU-only shape (XL): all 2,700 free milli-GPUs count
    assert fragmented == pytest.approx(0.5 * 700 + 0.25 * 2700 + 0.25 * 2700)
    ledger.track(True)
    ledger.give_back(pod("y", 1, 500, cpu=1500))
    assert ledger.fragmentation() == (pytest.approx(0.5 * 200 + 0.5 * 3200), 3200)


def test_leftover_groups_the_free_milli_gpus_by_the_shares_on_their_gpu() -> None:
    ledger = GpuLedger([node("a", 4), node("b", 2)], [])
    ledger.take(pod("x", 1, 810), "a", {0: 810})
    ledger.take(pod("y", 1, 470), "a", {1: 470})
    ledger.take(pod("z", 1, 470), "a", {1: 470})
    ledger.take(pod("w", 1, 810), "b", {1: 810})
    ledger.take(pod("whole", 2, 1000), "a", {2: 1000, 3: 1000})  # full GPUs: nothing free, not listed
    assert ledger.leftover() == [
        Leftover((), 1, 1000),  # b's idle GPU
        Leftover((810,), 2, 380),
        Leftover((470, 470), 1, 60),
    ]
    ledger.give_back(pod("w", 1, 810))
    assert ledger.leftover() == [Leftover((), 2, 2000), Leftover((810,), 1, 190), Leftover((470, 470), 1, 60)]


def test_a_runs_leftover_holds_every_milli_gpu_left_unallocated(tmp_path: Path) -> None:
    nodes, pods = trace(
        tmp_path,
        "a,32000,65536,4,T4\nb,32000,65536,2,T4\n",
        "".join(f"p{i},500,64,1,{(810, 470, 300, 1000)[i % 4]}\n" for i in range(9)),
    )
    result = simulate("best-fit", load_config(None), nodes, pods, sharing="dra")
    assert result.metrics is not None
    free = sum(group.free_milli for group in result.leftover)
    assert free == 6000 - result.metrics.allocated[-1] > 0
    assert sum(group.gpus for group in result.leftover) <= 6
    held = sorted(milli for group in result.leftover for milli in group.beside)
    assert held and all(milli in (300, 470, 810) for milli in held)  # whole GPUs leave nothing free


def test_leftover_summary_takes_medians_with_a_missing_group_as_zero() -> None:
    def run(seed: int, groups: list[Leftover]) -> PolicyResult:
        return PolicyResult("p", "inflate", 8, seed=seed, leftover=groups)

    runs = [
        run(0, [Leftover((810,), 10, 1900), Leftover((470, 470), 5, 300)]),
        run(1, [Leftover((810,), 12, 2280)]),
        run(2, [Leftover((810,), 8, 1520), Leftover((470, 470), 3, 180), Leftover((), 1, 1000)]),
    ]
    (entry,) = summarise(runs)
    assert entry["leftover"] == [
        {"beside": [810], "freeGpus": 1.9, "gpus": 10},
        {"beside": [470, 470], "freeGpus": 0.18, "gpus": 3},
        {"beside": [], "freeGpus": 0.0, "gpus": 0},
    ]
    assert (
        format_leftover([entry], shown=2).splitlines()[1]
        == "  p: 1.9 beside 810 on 10 GPUs; 0.2 beside 470+470 on 3 GPUs"
    )
    assert format_leftover([{"policy": "q", "leftover": [{"beside": [], "freeGpus": 2.0, "gpus": 2}]}]).endswith(
        "q: 2.0 on 2 idle GPUs"
    )


def test_a_shape_of_another_model_counts_all_free_gpus() -> None:
    ledger = GpuLedger([node("n", 2, "T4")], [Shape(100, 1000, 1, frozenset({"V100"}), 1.0)])
    assert ledger.fragmentation() == (2000.0, 2000)


def test_checkpoints_average_the_events_at_the_rounded_percent_or_next_to_it() -> None:
    metrics = ShareMetrics(total_milli=10_000)
    metrics.arrived = [8_960, 9_040, 9_100, 9_700]  # 89.6, 90.4, 91.0, 97.0 %
    metrics.allocated = [8_900, 9_000, 9_100, 9_500]
    metrics.fragmented = {0: (100.0, 1100), 1: (300.0, 1000)}
    figures = metrics.checkpoints((90, 95, 98, 100))
    assert figures[90] == pytest.approx(
        {
            "allocation": 89.5,
            "unallocated": 10.5,
            "unallocatedGpus": 1.05,
            "fragmentation": 100 * (100 / 1100 + 0.3) / 2,
            "fragmentedGpus": 0.2,
        }
    )
    assert figures[95] is None  # nothing within a percent
    assert figures[98] is not None and figures[98]["allocation"] == 95.0  # 97 % is within one of 98
    assert figures[100] is None


# ------------------------------------------------------------------------------------ trace order
def test_replay_without_creation_time_is_an_error_and_fill_warns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = write(tmp_path, "nodes.csv", NODE_HEADER + "a,8000,16384,2,T4\n")
    pods = write(
        tmp_path, "pods.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1000,1024,1,500\nq,1000,1024,0,0\n"
    )
    assert all(p.file_ordered for p in load_pods_csv(pods))
    args = ["simulate", "--nodes", str(nodes), "--pods", str(pods), "--no-progress", "--policy", "random"]
    assert main([*args, "--mode", "replay"]) == 2
    assert "mode replay needs creation_time" in capsys.readouterr().err
    assert main(args) == 0
    assert "--shuffle" in capsys.readouterr().err
    assert main([*args, "--shuffle"]) == 0
    assert "warning" not in capsys.readouterr().err
    with pytest.raises(ValueError, match="creation_time"):
        simulate("random", load_config(None), [node("a", 2)], load_pods_csv(pods), mode="replay")


def test_cli_inflate_with_seeds_table_json_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes = write(tmp_path, "nodes.csv", NODE_HEADER + "a,32000,65536,4,T4\nb,32000,65536,4,T4\n")
    pods = write(
        tmp_path,
        "pods.csv",
        POD_HEADER + "".join(f"p{i},1000,1024,1,{300 + 100 * (i % 7)},,LS,Running,{i},,{i}\n" for i in range(8)),
    )
    plot = tmp_path / "fig.png"
    args = ["simulate", "--nodes", str(nodes), "--pods", str(pods), "--no-progress", "--mode", "inflate"]
    assert main([*args, "--seeds", "2", "--workers", "1", "--policy", "random", "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    assert "GPU allocation @130%" in out and "failed shared-gpu pods" in out
    assert "free GPUs at the end" in out and "  random: " in out
    assert plot.stat().st_size > 0
    assert main([*args, "--seeds", "2", "--workers", "2", "--policy", "random", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["summary"][0]["seeds"] == [0, 1]
    assert report["results"][0]["arrivedPercent"] <= 130
    assert set(report["results"][0]["leftover"][0]) == {"beside", "gpus", "freeGpus"}
    assert report["summary"][0]["leftover"][0]["freeGpus"] > 0


def test_a_pod_asks_for_its_claim_by_its_own_name_whichever_run_made_it_first(tmp_path: Path) -> None:
    # with_claim is kept per pod (an experiment's runs share the trace): a copy under another name
    # gets a body naming its own claim, and the same pod the same answer.
    _, pods = trace(tmp_path, "a,8000,16384,1,T4\n", "p,1000,1024,1,500,,LS,Running,0,,0\n")
    first = sharing.with_claim(pods[0])
    assert sharing.with_claim(pods[0]) is first
    copy = sharing.with_claim(renamed(pods[0], "p-c1"))
    claims = [json.loads(pod.body)["spec"]["resourceClaims"] for pod in (first, copy)]
    assert claims == [
        [{"name": "gpu", "resourceClaimName": "p-gpu"}],
        [{"name": "gpu", "resourceClaimName": "p-c1-gpu"}],
    ]
