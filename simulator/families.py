"""Workload families derived from a pod trace (``simulate --derive KIND=X``).

The FGD paper (Weng et al., USENIX ATC'23, section 6) measures placement on variants of the openb
default trace that stress one characteristic each. These generators build such variants from any
pod list, deterministically from a seed, by resampling the pods of one class:

* ``multigpu=X``: multi-GPU pods (``num_gpu`` > 1) carry X % of the GPU demand;
* ``gpushare=X``: X % of the GPU pods share a GPU (``gpu_milli`` < 1000);
* ``cpu=X``: the CPU-only pods ask for X % of the milli-CPU the input's CPU-only pods ask for;
* ``gpuspec=X``: X % of the GPU pods are pinned to one GPU model (``gpu_spec``), the models
  chosen in proportion to their GPUs in the node list.

The rules, common to all:

* A class grows by *copies* of its own pods drawn uniformly with replacement from the input's
  members of that class, and shrinks by removing members drawn uniformly without replacement. So
  the class keeps the distribution of every column (cpu, memory, GPUs, per-GPU milli, model
  constraint) in expectation, and the pods outside the classes being resized are untouched.
* A copy is named ``<pod>-d<n>`` (``n`` numbers the copies of one derivation) and keeps every
  column of its source except its arrival: it arrives at the ``creation_time`` of a pod drawn
  uniformly from the whole input (so arrivals follow the input's timeline) and, when its source
  has a ``deletion_time``, lives as long as its source did. The output is in arrival order; a
  trace in file order stays in file order, each copy placed after its drawn pod.
* GPU demand is ``num_gpu · gpu_milli`` milli-GPUs. ``multigpu`` and ``gpushare`` keep the total
  GPU demand of the input: ``multigpu`` resizes the other GPU pods to what the multi-GPU pods
  leave (within half a pod of the input's total); ``gpushare`` chooses both classes' pod counts so
  that their expected demand is the input's total (within the draws' noise, under 1 % on the openb
  default trace). ``cpu`` and ``gpuspec`` leave every GPU pod as it is.
* Resizing to an amount (GPU demand, milli-CPU) adds or removes one drawn pod at a time while that
  brings the class closer to the amount, and stops at the first draw that would not.

``gpuspec`` pins GPU pods drawn uniformly without replacement until X % of the GPU pods have a
``gpu_spec`` (pods already constrained count; more than X % is an error). Each pinned pod gets
the model, among those with a node that could hold it alone (enough GPUs, cpu and memory), whose
pinned GPU demand per GPU of the node list is lowest after adding it (ties by name), so the
pinned demand splits in proportion to the models' GPUs.
"""

from __future__ import annotations

import argparse
import csv
import io
import random
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the simulator's modules load numpy and the service: only when the command runs
    from simulator.trace import SimNode, SimPod

__all__ = [
    "FAMILIES",
    "Derivation",
    "FamilyError",
    "add_derive_arguments",
    "demand_milli",
    "derive",
    "derive_all",
    "derived_pods",
    "describe",
    "parse_derivation",
    "pods_csv",
    "write_derived",
]

WHOLE = 1000  # milli-GPUs of a whole GPU
MIB = 1024 * 1024

# Family -> (lowest, highest) X accepted, inclusive; and what X is.
FAMILIES: dict[str, tuple[float, float, str]] = {
    "multigpu": (0.0, 99.0, "% of the GPU demand from multi-GPU pods"),
    "gpushare": (0.0, 100.0, "% of the GPU pods that share a GPU"),
    "cpu": (0.0, 1000.0, "% of the input's milli-CPU asked by CPU-only pods"),
    "gpuspec": (0.0, 100.0, "% of the GPU pods pinned to one GPU model"),
}
# The ranges the FGD paper measures (section 6), for the documentation and the help text.
PAPER_RANGES = {"multigpu": "20-50", "gpushare": "40-100", "cpu": "50-250", "gpuspec": "10-33"}


class FamilyError(ValueError):
    """A derivation that cannot be built from this trace; the message names the ``--derive`` value."""


@dataclass(frozen=True, slots=True)
class Derivation:
    kind: str
    percent: float

    def __str__(self) -> str:
        return f"{self.kind}={self.percent:g}"


def parse_derivation(text: str) -> Derivation:
    """``KIND=X``; errors name the part that is wrong (argparse shows them under ``--derive``)."""
    kind, sep, value = text.partition("=")
    kind = kind.strip()
    if not sep:
        raise argparse.ArgumentTypeError(f"{text!r}: expected KIND=X, e.g. multigpu=30")
    if kind not in FAMILIES:
        raise argparse.ArgumentTypeError(f"{text!r}: unknown family {kind!r} (known: {', '.join(FAMILIES)})")
    try:
        percent = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: X {value.strip()!r} is not a number") from None
    low, high, meaning = FAMILIES[kind]
    if not low <= percent <= high:
        raise argparse.ArgumentTypeError(f"{text!r}: X ({meaning}) must be between {low:g} and {high:g}")
    return Derivation(kind, percent)


# ------------------------------------------------------------------------------------ resampling
def demand_milli(pod: SimPod) -> int:
    """GPU demand in milli-GPUs: ``num_gpu · gpu_milli`` (as simulator.metrics.demand_milli)."""
    return pod.gpus * (pod.gpu_milli or WHOLE) if pod.gpus else 0


class _Builder:
    """The pods kept from the input and the copies added, with one generator for every draw."""

    def __init__(self, pods: Sequence[SimPod], rng: random.Random) -> None:
        self.input = list(pods)
        self.rng = rng
        self.removed: set[int] = set()  # input positions
        self.copies: list[SimPod] = []
        self.names = {pod.name for pod in pods}
        self.number = 0  # of the next copy

    def members(self, test: Callable[[SimPod], bool]) -> list[int]:
        return [i for i, pod in enumerate(self.input) if test(pod) and i not in self.removed]

    def copy(self, source: SimPod) -> SimPod:
        from simulator.inflate import renamed

        slot = self.input[self.rng.randrange(len(self.input))]
        name = f"{source.name}-d{self.number}"
        while name in self.names:  # a pod of the input is already named so
            self.number += 1
            name = f"{source.name}-d{self.number}"
        self.number += 1
        self.names.add(name)
        deleted = None
        if source.deleted is not None and not source.file_ordered and not slot.file_ordered:
            deleted = slot.created + (source.deleted - source.created)
        pod = replace(renamed(source, name), created=slot.created, deleted=deleted)
        self.copies.append(pod)
        return pod

    def resize_to_count(self, members: list[int], target: int, what: str) -> None:
        """Remove drawn members, or add copies of drawn members, until there are ``target``."""
        if target < len(members):
            self.removed.update(self.rng.sample(members, len(members) - target))
            return
        sources = [self.input[i] for i in members]
        if target > len(members) and not sources:
            raise ValueError(f"the trace has no {what} to copy")
        for _ in range(target - len(members)):
            self.copy(sources[self.rng.randrange(len(sources))])

    def resize_to_amount(self, members: list[int], target: float, amount: Callable[[SimPod], int], what: str) -> int:
        """Remove or copy drawn members one at a time while that brings their total amount closer to
        ``target``; the total reached."""
        total = sum(amount(self.input[i]) for i in members)
        if total > target:
            order = [i for i in members if amount(self.input[i]) > 0]
            self.rng.shuffle(order)
            for i in order:
                size = amount(self.input[i])
                if abs(total - size - target) >= abs(total - target):
                    break
                self.removed.add(i)
                total -= size
            return total
        sources = [self.input[i] for i in members if amount(self.input[i]) > 0]
        if total < target and not sources:
            raise ValueError(f"the trace has no {what} to copy")
        while sources:
            source = sources[self.rng.randrange(len(sources))]
            size = amount(source)
            if abs(total + size - target) >= abs(total - target):
                break
            self.copy(source)
            total += size
        return total

    def result(self) -> list[SimPod]:
        kept = [(pod.created, 0, i, pod) for i, pod in enumerate(self.input) if i not in self.removed]
        added = [(pod.created, 1, j, pod) for j, pod in enumerate(self.copies)]
        ordered = [pod for *_, pod in sorted([*kept, *added], key=lambda e: e[:3])]
        if any(pod.file_ordered for pod in ordered):
            ordered = [replace(pod, created=float(i)) for i, pod in enumerate(ordered)]
        return ordered


def _is_gpu(pod: SimPod) -> bool:
    return pod.gpus > 0


def _is_multi(pod: SimPod) -> bool:
    return pod.gpus > 1


def _is_sharing(pod: SimPod) -> bool:
    return pod.shares_gpu


def _is_whole(pod: SimPod) -> bool:
    return pod.gpus > 0 and not pod.shares_gpu


def _is_cpu_only(pod: SimPod) -> bool:
    return pod.gpus == 0


def _cpu(pod: SimPod) -> int:
    return pod.cpu_milli


def _multigpu(build: _Builder, share: float) -> None:
    demand = sum(demand_milli(pod) for pod in build.input)
    if not demand:
        raise ValueError("the trace asks for no GPUs")
    multi = build.resize_to_amount(build.members(_is_multi), share * demand, demand_milli, "multi-GPU pod")
    others = build.members(lambda pod: pod.gpus == 1)
    build.resize_to_amount(others, demand - multi, demand_milli, "1-GPU or GPU-sharing pod")


def _mean_demand(pods: Iterable[SimPod]) -> float:
    values = [demand_milli(pod) for pod in pods]
    return sum(values) / len(values) if values else 0.0


def _gpushare(build: _Builder, share: float) -> None:
    sharing, whole = build.members(_is_sharing), build.members(_is_whole)
    if share > 0 and not sharing:
        raise ValueError("the trace has no GPU-sharing pod (gpu_milli < 1000) to copy")
    if share < 1 and not whole:
        raise ValueError("the trace has no whole-GPU pod to copy")
    if not sharing and not whole:
        raise ValueError("the trace has no GPU pod")
    demand = sum(demand_milli(pod) for pod in build.input)
    per_pod = share * _mean_demand(build.input[i] for i in sharing)
    per_pod += (1 - share) * _mean_demand(build.input[i] for i in whole)
    pods = demand / per_pod
    sharing_target = round(share * pods)
    whole_target = round(pods) - sharing_target
    build.resize_to_count(sharing, sharing_target, "GPU-sharing pod")
    build.resize_to_count(whole, whole_target, "whole-GPU pod")


def _cpu_family(build: _Builder, share: float) -> None:
    members = build.members(_is_cpu_only)
    total = sum(build.input[i].cpu_milli for i in members)
    if not total:
        raise ValueError("the trace has no CPU-only pod asking for cpu")
    build.resize_to_amount(members, share * total, _cpu, "CPU-only pod")


def _fits_alone(pod: SimPod, node: SimNode) -> bool:
    return (
        node.gpus >= pod.gpus
        and node.allocatable.get("cpu", 0) >= pod.cpu_milli
        and node.allocatable.get("memory", 0) >= pod.memory
    )


def _gpuspec(build: _Builder, share: float, nodes: Sequence[SimNode]) -> list[SimPod]:
    capacity: dict[str, int] = {}
    for node in nodes:
        if node.gpus and node.model:
            capacity[node.model] = capacity.get(node.model, 0) + node.gpus
    if not capacity:
        raise ValueError("the node list names no GPU model")
    gpu_pods = [pod for pod in build.input if _is_gpu(pod)]
    target = round(share * len(gpu_pods))
    pinned = sum(1 for pod in gpu_pods if pod.gpu_spec)
    if pinned > target:
        raise ValueError(f"{pinned} GPU pods of the trace already have a gpu_spec, more than the {target} asked")
    free = [i for i, pod in enumerate(build.input) if _is_gpu(pod) and not pod.gpu_spec]
    build.rng.shuffle(free)
    models = sorted(capacity)
    hosts = {model: [node for node in nodes if node.model == model and node.gpus] for model in models}
    assigned = dict.fromkeys(models, 0)
    out = list(build.input)
    for i in free:
        if pinned == target:
            break
        pod = out[i]
        feasible = [m for m in models if any(_fits_alone(pod, node) for node in hosts[m])]
        if not feasible:
            continue
        demand = demand_milli(pod)
        model = min(feasible, key=lambda m: ((assigned[m] + demand) / capacity[m], m))
        assigned[model] += demand
        out[i] = replace(pod, gpu_spec=frozenset([model]))
        pinned += 1
    if pinned < target:
        raise ValueError(f"only {pinned} GPU pods fit a node of a single model alone, fewer than the {target} asked")
    return out


def derive(
    pods: Sequence[SimPod], derivation: Derivation, seed: int = 0, nodes: Sequence[SimNode] = ()
) -> list[SimPod]:
    """The pods of ``derivation`` built from ``pods``: the same for the same input and seed."""
    rng = random.Random(f"{derivation}/{seed}")
    share = derivation.percent / 100
    build = _Builder(pods, rng)
    try:
        if derivation.kind == "multigpu":
            _multigpu(build, share)
        elif derivation.kind == "gpushare":
            _gpushare(build, share)
        elif derivation.kind == "cpu":
            _cpu_family(build, share)
        elif derivation.kind == "gpuspec":
            if not nodes:
                raise ValueError("needs the node list (--nodes or --snapshot) for the GPU models' capacity")
            build.input = _gpuspec(build, share, nodes)
        else:
            raise ValueError(f"unknown family (known: {', '.join(FAMILIES)})")
    except ValueError as exc:
        raise FamilyError(f"--derive {derivation}: {exc}") from None
    return build.result()


def derive_all(
    pods: Sequence[SimPod], derivations: Sequence[Derivation], seed: int = 0, nodes: Sequence[SimNode] = ()
) -> list[SimPod]:
    """Each derivation applied to the result of the previous, in order."""
    kinds = [d.kind for d in derivations]
    repeated = sorted({k for k in kinds if kinds.count(k) > 1})
    if repeated:
        raise FamilyError(f"--derive: {', '.join(repeated)} given more than once")
    out = list(pods)
    for derivation in derivations:
        out = derive(out, derivation, seed, nodes)
    return out


# ------------------------------------------------------------------------------------ output, CLI
def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def pods_csv(pods: Sequence[SimPod]) -> str:
    """The pods as an openb pod list (``load_pods_csv`` reads it back)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(
        ["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "creation_time", "deletion_time"]
    )
    for pod in pods:
        timed = not pod.file_ordered
        writer.writerow(
            [
                pod.name,
                pod.cpu_milli,
                pod.memory // MIB,
                pod.gpus,
                (pod.gpu_milli or WHOLE) if pod.gpus else 0,
                "|".join(sorted(pod.gpu_spec)),
                _number(pod.created) if timed else "",
                _number(pod.deleted) if timed and pod.deleted is not None else "",
            ]
        )
    return out.getvalue()


def add_derive_arguments(parser: argparse.ArgumentParser) -> None:
    """``--derive``, ``--derive-seed`` and ``--derive-out`` of ``simulate``."""
    ranges = ", ".join(f"{kind} {PAPER_RANGES[kind]}" for kind in FAMILIES)
    parser.add_argument(
        "--derive",
        action="append",
        type=parse_derivation,
        metavar="KIND=X",
        help="simulate a workload family derived from --pods: multigpu=X (%% of GPU demand from multi-GPU "
        "pods), gpushare=X (%% of GPU pods sharing a GPU), cpu=X (%% of the CPU-only pods' milli-CPU), "
        f"gpuspec=X (%% of GPU pods pinned to one model); the FGD paper's ranges: {ranges}. Repeatable: "
        "applied in order",
    )
    parser.add_argument(
        "--derive-seed",
        type=int,
        default=0,
        metavar="N",
        help="seed of the --derive draws (default 0; not --seed's runs)",
    )
    parser.add_argument(
        "--derive-out", metavar="FILE.csv", help="with --derive: write the derived pod list (openb CSV) and exit"
    )


def describe(pods: Sequence[SimPod]) -> str:
    """The figures the families set, for the note ``--derive`` prints."""
    gpu_pods = [pod for pod in pods if pod.gpus]
    demand = sum(demand_milli(pod) for pod in pods)
    multi = sum(demand_milli(pod) for pod in gpu_pods if pod.gpus > 1)
    sharing = sum(1 for pod in gpu_pods if pod.shares_gpu)
    pinned = sum(1 for pod in gpu_pods if pod.gpu_spec)
    cpu = sum(pod.cpu_milli for pod in pods if not pod.gpus)

    def percent(part: float, whole: float) -> str:
        return f"{100 * part / whole:.1f} %" if whole else "-"

    return (
        f"{len(pods):,} pods, {demand / WHOLE:,.1f} GPUs of demand ({percent(multi, demand)} from multi-GPU pods), "
        f"{len(gpu_pods):,} GPU pods ({percent(sharing, len(gpu_pods))} sharing a GPU, "
        f"{percent(pinned, len(gpu_pods))} pinned to a model), CPU-only pods asking {cpu / 1000:,.1f} cores"
    )


def derived_pods(args: argparse.Namespace, pods: Sequence[SimPod], nodes: Sequence[SimNode] = ()) -> list[SimPod]:
    """``pods`` as ``--derive`` asks (unchanged without it), with a note on stderr of what the input
    and the result hold; a derivation that cannot be built is a ``TraceError`` (exit 2)."""
    from simulator.trace import TraceError

    derivations = getattr(args, "derive", None) or []
    if not derivations:
        return list(pods)
    seed = getattr(args, "derive_seed", 0)
    try:
        out = derive_all(pods, derivations, seed, nodes)
    except FamilyError as exc:
        raise TraceError(str(exc)) from None
    print(f"note: --pods: {describe(pods)}", file=sys.stderr)
    named = " ".join(f"--derive {d}" for d in derivations)
    print(f"note: {named} (--derive-seed {seed}): {describe(out)}", file=sys.stderr)
    return out


def write_derived(args: argparse.Namespace) -> int:
    """``--derive-out``: the derived pod list as an openb CSV, without simulating."""
    from simulator.trace import TraceError, load_nodes_csv, load_pods, load_snapshot_nodes

    if not args.derive:
        print("error: --derive-out needs --derive", file=sys.stderr)
        return 2
    if not args.pods:
        print("error: --derive needs --pods", file=sys.stderr)
        return 2
    try:
        nodes: list[SimNode] = []
        if args.nodes or args.snapshot:
            nodes = load_nodes_csv(args.nodes) if args.nodes else load_snapshot_nodes(args.snapshot)
        pods = derived_pods(args, load_pods(args.pods), nodes)
    except TraceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        with open(args.derive_out, "w", encoding="utf-8", newline="") as handle:
            handle.write(pods_csv(pods))
    except OSError as exc:
        print(f"error: cannot write {args.derive_out}: {exc.strerror}", file=sys.stderr)
        return 2
    return 0
