"""Wall time of ``simulate`` per policy on a trace, against the 60 s per-policy target.

Runs in process, one policy after the other, with the same code as ``kube-gpu-extender simulate``
(the same scheduler config: ``--scheduler-config FILE|none``, default the shipped
deploy/kube-scheduler-config.yaml, and ``--scheduler-profile NAME``); ``--profile`` adds a cProfile
of one policy (sorted by own time) to find what to speed up.

    python -m bench.simulate --nodes openb_node_list_gpu_node.csv --pods openb_pod_list_default.csv
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys

from app.config import load_config
from simulator.schedconfig import load_scheduler_config_argument
from simulator.simulate import MODES, POLICIES, simulate
from simulator.trace import load_nodes_csv, load_pods

TARGET_SECONDS = 60.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", required=True)
    parser.add_argument("--pods", required=True)
    parser.add_argument("--mode", choices=MODES, default="fill")
    parser.add_argument("--profile", choices=POLICIES, help="cProfile this policy's run")
    parser.add_argument("--scheduler-config", metavar="FILE|none", help="default: deploy/kube-scheduler-config.yaml")
    parser.add_argument("--scheduler-profile", metavar="NAME", help="schedulerName of the profile (default: the first)")
    args = parser.parse_args()
    nodes, pods, config = load_nodes_csv(args.nodes), load_pods(args.pods), load_config(None)
    scheduler = load_scheduler_config_argument(args.scheduler_config, args.scheduler_profile)
    print(f"{len(nodes)} nodes, {len(pods)} pods, mode {args.mode}, target {TARGET_SECONDS:.0f} s per policy")
    print(f"scheduler config: {scheduler.describe() if scheduler is not None else 'none'}")
    worst = 0.0
    for policy in POLICIES:
        result = simulate(policy, config, nodes, pods, mode=args.mode, scheduler=scheduler)
        per_pod = 1000 * result.wall_seconds / max(len(pods), 1)
        print(f"{policy:16} {result.wall_seconds:6.2f} s  ({per_pod:.2f} ms per pod)")
        worst = max(worst, result.wall_seconds)
    if args.profile:
        profiler = cProfile.Profile()
        profiler.runcall(simulate, args.profile, config, nodes, pods, mode=args.mode, scheduler=scheduler)
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(20)
    print("target met" if worst <= TARGET_SECONDS else "target MISSED")
    return 0 if worst <= TARGET_SECONDS else 1


if __name__ == "__main__":
    sys.exit(main())
