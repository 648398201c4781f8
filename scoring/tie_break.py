"""Breaking the profile's ties among its best nodes: towards the node whose devices are most allocated.

kube-scheduler takes the highest total and picks at random among equal ones. The profile's weighted
mean is an integer, so nodes it cannot tell apart are common: two empty nodes of one kind, or an
empty node and a used one when no type of the target workload fits either (GpuFragmentation scores
them the same, and BestFit's few points vanish in the mean). The random pick then spreads GPU pods
over such nodes. kube-scheduler's own NodeResourcesFit (MostAllocated) can break the tie for a pod
that requests ``nvidia.com/gpu`` in its containers, but sees nothing of a pod whose GPUs come
through ResourceClaims.

``tieBreak.mostAllocated`` names device resources. For a pod that asks for any of them (in its
containers or its claims), among the nodes the profile scores highest only those whose devices would
be most allocated after the pod keep the best priority (``scoring.priority_scale``) and pass
``filterReturns: BestScored``. ``tieBreak.lowestName`` then keeps, for every pod, only the node with
the lexicographically smallest name among those left: a fixed order over nodes, the FGD paper's
artifact's rule (its kube-scheduler's ``selectHost`` takes the smallest name among equal totals).
``tieBreak.random`` keeps one of those left chosen at random, kube-scheduler's own rule among equal
totals, taken by the extender: /filter then passes a single node, and kube-scheduler neither runs its
score plugins nor calls /prioritize for the pod. It leaves the choice to kube-scheduler where its
score plugins could still tell the nodes apart (``random_applies``): for a pod with soft
preferences of its own (``k8s_semantics.preferences``) and among nodes with a PreferNoSchedule taint.
Per resource, MostAllocated in milli-devices:
``min(used + pod, total) * 100 // total``, where ``used`` and ``total`` are DRA's per-device use and
1000 per published device where DRA serves the resource (``NodeInfo.fit_amounts``), and 1000 per
requested and per allocatable device of the device plugin otherwise; the key is the mean over the
resources the pod asks for. A pod that asks for none of them is left to kube-scheduler, as without
a tie-break.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from scoring.devices import pod_devices
from scoring.framework import MILLI_DEVICES, ArgsError, NodeInfo, PodInfo, reject_unknown_fields
from scoring.intree import most_requested_score, most_requested_score_batch
from scoring.row_memo import RowMemo
from scoring.table import Batch, Int64Array, NodeTable

IntpArray = npt.NDArray[np.intp]

__all__ = [
    "NATIVE_RESOURCES",
    "MostAllocatedKeys",
    "NameRanks",
    "TieBreak",
    "TiePick",
    "asks_for_any",
    "choosing",
    "chosen_batch",
    "drawing",
    "drawn_batch",
    "lowest_name",
    "lowest_name_batch",
    "most_allocated",
    "most_allocated_batch",
    "random_applies",
    "winners",
]

# Not device resources: counting them in milli-devices has no meaning.
NATIVE_RESOURCES = frozenset({"cpu", "memory", "pods", "ephemeral-storage"})


@dataclass(frozen=True, slots=True)
class TieBreak:
    most_allocated: tuple[str, ...] = ()
    lowest_name: bool = False
    random: bool = False

    @classmethod
    def parse(cls, raw: Any, path: str = "tieBreak") -> TieBreak:
        if not isinstance(raw, Mapping):
            raise ArgsError(
                f"{path}: must be a mapping with 'mostAllocated' (a list of device resource names) and/or "
                "'lowestName' or 'random' (true)"
            )
        reject_unknown_fields(raw, path, ("mostAllocated", "lowestName", "random"))
        lowest, random = raw.get("lowestName", False), raw.get("random", False)
        for field, value in (("lowestName", lowest), ("random", random)):
            if not isinstance(value, bool):
                raise ArgsError(f"{path}.{field}: must be true or false, got {value!r}")
        if lowest and random:
            raise ArgsError(f"{path}: set at most one of 'lowestName' and 'random' (each keeps a single node)")
        if "mostAllocated" not in raw:
            if not (lowest or random):
                raise ArgsError(
                    f"{path}: set 'mostAllocated', 'lowestName: true' or 'random: true', or one of them with it"
                )
            return cls((), lowest, random)
        names = raw.get("mostAllocated")
        if not isinstance(names, list) or not names:
            raise ArgsError(f"{path}.mostAllocated: must be a non-empty list of device resource names, got {names!r}")
        for index, name in enumerate(names):
            where = f"{path}.mostAllocated[{index}]"
            if not isinstance(name, str) or not name:
                raise ArgsError(f"{where}: must be a non-empty resource name, got {name!r}")
            if name in NATIVE_RESOURCES or name.startswith("hugepages-"):
                raise ArgsError(f"{where}: {name!r} is not a device resource (one such as nvidia.com/gpu)")
            if name in names[:index]:
                raise ArgsError(f"{where}: duplicate resource name {name!r}")
        return cls(tuple(names), lowest, random)


def _amounts(node: NodeInfo, resource: str) -> tuple[int, int]:
    """(in use, total) milli-devices of ``resource`` on ``node``: DRA's per-device use where DRA
    serves it, whole devices of the device plugin otherwise."""
    requested, allocatable = node.fit_amounts(resource, 0)
    if node.dra_allocatable.get(resource, 0) > 0:
        return requested, allocatable
    return requested * MILLI_DEVICES, allocatable * MILLI_DEVICES


def asks_for_any(pod: PodInfo, resources: Sequence[str]) -> bool:
    """Whether the pod asks for any of ``resources`` (in its containers or its claims)."""
    return any(pod_devices(pod, resource).count > 0 for resource in resources)


def most_allocated(pod: PodInfo, node: NodeInfo, resources: Sequence[str]) -> int | None:
    """The tie key of ``node`` (the definition); None when the pod asks for none of ``resources``."""
    scores = []
    for resource in resources:
        demand = pod_devices(pod, resource)
        if demand.count == 0:
            continue
        used, total = _amounts(node, resource)
        scores.append(most_requested_score(used + demand.total, total))
    return sum(scores) // len(scores) if scores else None


def most_allocated_batch(
    pod: PodInfo, batch: Batch, resources: Sequence[str], at: IntpArray | None = None
) -> Int64Array | None:
    """``most_allocated`` for every node of ``batch`` (or only at the positions ``at``, in that order);
    None when the pod asks for none of ``resources`` (or an amount is too large for int64: the caller
    works node by node)."""
    total_scores: Int64Array | None = None
    asked = 0
    if at is not None:
        batch = batch.take(at)  # the columns of those positions alone (a few of thousands, often)
    for resource in resources:
        demand = pod_devices(pod, resource)
        if demand.count == 0:
            continue
        amounts = batch.fit_amounts(resource, 0)
        if amounts is None:
            return None
        requested, allocatable = amounts
        served = batch.column(batch.table.dra_allocatable, resource) > 0
        scale = np.where(served, 1, MILLI_DEVICES)
        score = most_requested_score_batch(requested * scale + demand.total, allocatable * scale)
        total_scores = score if total_scores is None else total_scores + score
        asked += 1
    return None if total_scores is None else total_scores // asked


class _Overflow(Exception):
    """An amount too large for int64: the caller works node by node."""


class MostAllocatedKeys:
    """``most_allocated_batch`` at the tied positions of a batch, kept per table row while the row is
    unchanged (``scoring.row_memo``) and the pod's demand is the same. Why: the best nodes of a pod
    are often hundreds of nodes in one state (a cluster's empty nodes of a kind), and gathering their
    columns for every pod cost more than reading the kept keys."""

    def __init__(self) -> None:
        self._memo = RowMemo()

    def at(self, pod: PodInfo, batch: Batch, resources: Sequence[str], positions: IntpArray) -> Int64Array | None:
        """``most_allocated_batch(pod, batch, resources, at=positions)``."""
        demands = [pod_devices(pod, resource) for resource in resources]
        key = ("mostAllocated", tuple(resources), tuple(d.total if d.count else -1 for d in demands))

        def compute(rows: Batch) -> Int64Array:
            keys = most_allocated_batch(pod, rows, resources)
            if keys is None:
                raise _Overflow
            return keys

        try:
            kept = self._memo.get(key, batch, compute)
        except _Overflow:
            return None
        return kept[positions]


def lowest_name(best: Sequence[bool], names: Sequence[str]) -> list[bool]:
    """Among the ``best`` nodes, only the one with the lexicographically smallest name."""
    first = min((name for is_best, name in zip(best, names, strict=True) if is_best), default=None)
    return [is_best and name == first for is_best, name in zip(best, names, strict=True)]


def lowest_name_batch(best: npt.NDArray[np.bool_], names: Sequence[str]) -> npt.NDArray[np.bool_]:
    """``lowest_name`` over a mask: only the ``best`` positions' names are read (a few of many)."""
    at = best.nonzero()[0].tolist()
    won = np.zeros(len(best), dtype=np.bool_)
    if at:
        first = min(map(names.__getitem__, at))
        won[[index for index in at if names[index] == first]] = True
    return won


class NameRanks:
    """Per table row, its node's place among the table's names in sorted order, so ``lowest_name``
    over known nodes is an argmin over their rows instead of comparing their names (hundreds of
    equal best nodes, with the FGD artifact's sigmoid); worked out again only after the table's
    names changed (``NodeTable.version``)."""

    def __init__(self) -> None:
        self._kept: tuple[NodeTable, int, Int64Array] | None = None  # (the table, its version, ranks)

    def of(self, table: NodeTable) -> Int64Array:
        kept = self._kept
        if kept is not None and kept[0] is table and kept[1] == table.version:  # a new row: a new version
            return kept[2]
        ranks = np.full(len(table.stamps), len(table.index), dtype=np.int64)  # free rows: past every name
        for rank, name in enumerate(sorted(table.index)):
            ranks[table.index[name]] = rank
        ranks.flags.writeable = False
        self._kept = (table, table.version, ranks)
        return ranks

    def lowest_name_batch(self, best: npt.NDArray[np.bool_], batch: Batch) -> npt.NDArray[np.bool_]:
        """``lowest_name_batch`` for a batch whose names are all known to its table (none repeated)."""
        at = best.nonzero()[0]
        won = np.zeros(len(best), dtype=np.bool_)
        if len(at):
            won[at[self.of(batch.table)[batch.rows[at]].argmin()]] = True
        return won


def chosen_batch(
    best: npt.NDArray[np.bool_], names: Sequence[str], choose: Callable[[list[str]], str]
) -> npt.NDArray[np.bool_]:
    """Among the ``best`` positions, only the one whose name ``choose`` picks from theirs (in position
    order): ``random.Random.choice`` for ``tieBreak.random``."""
    at = best.nonzero()[0].tolist()
    won = np.zeros(len(best), dtype=np.bool_)
    if at:
        among = list(map(names.__getitem__, at))
        won[at[among.index(choose(among))]] = True
    return won


def drawn_batch(best: npt.NDArray[np.bool_], draw: Callable[[int], int]) -> npt.NDArray[np.bool_]:
    """Among the ``best`` positions, the one at ``draw(count)`` in position order: ``chosen_batch``
    with a uniform pick, without reading a name (``random.Random.randrange`` draws the position that
    ``random.Random.choice`` would)."""
    at = best.nonzero()[0]
    won = np.zeros(len(best), dtype=np.bool_)
    if len(at):
        won[at[draw(len(at))]] = True
    return won


TiePick = Callable[[npt.NDArray[np.bool_], Sequence[str]], npt.NDArray[np.bool_]]
"""``tieBreak.random``'s pick: of the tied ``best`` positions, the one kept (names read only by a
pick by name)."""


def drawing(draw: Callable[[int], int]) -> TiePick:
    """The pick at the position ``draw(count)`` gives (``random.Random.randrange``): reads no name."""
    return lambda best, names: drawn_batch(best, draw)


def choosing(choose: Callable[[list[str]], str]) -> TiePick:
    """The pick by name (``min``: the FGD artifact's smallest name), over the tied names in order."""
    return lambda best, names: chosen_batch(best, names, choose)


def random_applies(pod: PodInfo, prefer_no_schedule: bool) -> bool:
    """Whether ``tieBreak.random`` may keep a single node: not for a pod with soft preferences of its
    own, nor when a tied node has a PreferNoSchedule taint (``prefer_no_schedule``): kube-scheduler's
    score plugins (NodeAffinity, InterPodAffinity, PodTopologySpread, TaintToleration) could still
    tell such nodes apart, so they keep the tie and kube-scheduler chooses."""
    return not pod.soft_preferences and not prefer_no_schedule


def winners(best: Sequence[bool], keys: Sequence[int]) -> list[bool]:
    """Among the ``best`` nodes, those with the highest key (the others are not winners)."""
    top = max((key for is_best, key in zip(best, keys, strict=True) if is_best), default=None)
    return [is_best and key == top for is_best, key in zip(best, keys, strict=True)]
