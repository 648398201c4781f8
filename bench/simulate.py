"""Wall time of ``simulate`` per policy on a trace, against the per-run targets (fill: 60 s;
inflate: 5 s for one policy x one seed), and with ``--experiment N`` the whole inflate experiment
(the ten policies of the FGD paper's Figure 9a run, docs/simulate.md, x N seeds in a process pool of
``--workers``) against 5 minutes.

Runs in process, one policy after the other, with the same code as ``kube-gpu-extender simulate``
(the same scheduler config: ``--scheduler-config FILE|none``, default the shipped
deploy/kube-scheduler-config.yaml, and ``--scheduler-profile NAME``); ``--profile`` adds a cProfile
of one policy (sorted by own time) to find what to speed up.

``--policy`` (repeatable) times only those policies (with ``--profile`` and no ``--policy``, only the
profiled one); ``--repeat N`` runs them N rounds, in turn, and judges each policy by the median of
its runs (this machine's speed moves a single run by 10 % or more: a change is best compared on
medians of alternated runs).

    python -m bench.simulate --nodes openb_node_list_gpu_node.csv --pods openb_pod_list_default.csv
    python -m bench.simulate ... --mode inflate --policy shipped --policy fgd --repeat 3
    python -m bench.simulate ... --mode inflate --sharing dra --experiment 10 --workers 2
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import time

from app.config import load_config
from simulator.experiment import Run, run_pool
from simulator.schedconfig import load_scheduler_config_argument
from simulator.simulate import MODES, POLICIES, SHARING, simulate
from simulator.trace import load_nodes_csv, load_pods

TARGET_SECONDS = {"fill": 60.0, "replay": 60.0, "inflate": 5.0}  # one policy x one seed
EXPERIMENT_TARGET_SECONDS = 300.0  # the ten policies x 10 seeds, 130 %, 2 cores
# The policies of docs/simulate.md's Figure 9a run, in its order.
EXPERIMENT_POLICIES = (
    "random",
    "dot-product",
    "gpu-packing",
    "best-fit",
    "clustering",
    "fgd",
    "fgd-best-fit",
    "fgd-cpu-balance",
    "fitplus-sra",
    "shipped",
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", required=True)
    parser.add_argument("--pods", required=True)
    parser.add_argument("--mode", choices=MODES, default="fill")
    parser.add_argument(
        "--profile", choices=POLICIES, help="cProfile this policy's run (without --policy, time only this one)"
    )
    parser.add_argument("--scheduler-config", metavar="FILE|none", help="default: deploy/kube-scheduler-config.yaml")
    parser.add_argument("--scheduler-profile", metavar="NAME", help="schedulerName of the profile (default: the first)")
    parser.add_argument("--sharing", choices=SHARING, default="dra")
    parser.add_argument(
        "--experiment", type=int, metavar="SEEDS", help="also time the ten policies of the Figure 9a run x SEEDS seeds"
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--policy", action="append", choices=POLICIES, help="time only this policy (repeatable; default: every one)"
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="rounds over the policies; each is judged by its median (default 1)"
    )
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, got {args.repeat}")
    nodes, pods, config = load_nodes_csv(args.nodes), load_pods(args.pods), load_config(None)
    scheduler = load_scheduler_config_argument(args.scheduler_config, args.scheduler_profile)
    target = TARGET_SECONDS[args.mode]
    print(
        f"{len(nodes)} nodes, {len(pods)} pods, mode {args.mode}, sharing {args.sharing}, target {target:.0f} s per run"
    )
    print(f"scheduler config: {scheduler.describe() if scheduler is not None else 'none'}")
    chosen = list(dict.fromkeys(args.policy or ([args.profile] if args.profile else POLICIES)))
    runs: dict[str, list[float]] = {policy: [] for policy in chosen}
    submitted: dict[str, int] = {}
    for _ in range(args.repeat):  # in turn, so a slow minute of the machine touches every policy alike
        for policy in chosen:
            result = simulate(policy, config, nodes, pods, mode=args.mode, scheduler=scheduler, sharing=args.sharing)
            runs[policy].append(result.wall_seconds)
            submitted[policy] = result.pods
    worst = 0.0
    for policy in chosen:
        median = statistics.median(runs[policy])
        per_pod = 1000 * median / max(submitted[policy], 1)
        low, high = min(runs[policy]), max(runs[policy])
        spread = f" [{low:.2f}-{high:.2f}], median of {args.repeat}" if args.repeat > 1 else ""
        print(f"{policy:16} {median:6.2f} s{spread}  ({per_pod:.2f} ms per pod)")
        worst = max(worst, median)
    if args.profile:
        profiler = cProfile.Profile()
        profiler.runcall(
            simulate, args.profile, config, nodes, pods, mode=args.mode, scheduler=scheduler, sharing=args.sharing
        )
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(20)
    met = worst <= target
    print("per-run target met" if met else "per-run target MISSED")
    if args.experiment:
        run = Run(config, nodes, pods, "inflate", args.sharing, 1.3, False, scheduler)
        started = time.perf_counter()
        results = run_pool(run, EXPERIMENT_POLICIES, range(args.experiment), args.workers)
        seconds = time.perf_counter() - started
        print(
            f"experiment: {len(results)} runs ({len(EXPERIMENT_POLICIES)} policies x {args.experiment} seeds), "
            f"{args.workers} workers: {seconds:.0f} s (target {EXPERIMENT_TARGET_SECONDS:.0f} s)"
        )
        met = met and seconds <= EXPERIMENT_TARGET_SECONDS
        print("experiment target met" if seconds <= EXPERIMENT_TARGET_SECONDS else "experiment target MISSED")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
