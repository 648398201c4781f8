"""``tieBreak.random`` in the service: the draw among tied nodes, and the picks still in flight.

kube-scheduler picks among equal totals with its own assumed pods counted: a pod it has just placed
on an empty node makes that node the fullest for the next pod, before the pod's /bind reaches the
extender. When the extender draws instead, it keeps its own picks whose pods it has not seen bound
or assumed yet (at most ``KEPT``, for ``TTL_SECONDS``) and, among tied nodes, draws only among
those that hold such a pick: consecutive pods keep filling the node the first was given, as
kube-scheduler's MostAllocated would have them. Where every bind arrives before the next /filter
(the simulator) no pick is ever in flight and the draw is the plain one.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from app.cluster.cache import ClusterCache
from scoring.framework import PodInfo
from scoring.table import BoolArray
from scoring.tie_break import TiePick, drawing, random_applies

__all__ = ["KEPT", "TTL_SECONDS", "RandomTies"]

KEPT = 64  # picks remembered (oldest dropped first)
TTL_SECONDS = 5.0  # a pick whose pod never shows up bound (kube-scheduler gave up on it) stops counting


class RandomTies:
    __slots__ = ("_picks", "cache", "pick")

    def __init__(self, cache: ClusterCache, pick: TiePick | None = None) -> None:
        """``pick``: which of the tied nodes stays (None: a position drawn at random, which reads no
        name, so thousands of tied nodes cost no list; the simulator passes its model of
        kube-scheduler's pick)."""
        self.cache = cache
        self.pick = pick or drawing(random.Random().randrange)
        self._picks: OrderedDict[str, tuple[str, float]] = OrderedDict()  # pod uid -> (node, when)

    def keep_one(
        self, pod: PodInfo, names: Sequence[str], won: BoolArray, rows: npt.NDArray[np.intp] | None = None
    ) -> BoolArray:
        """Of the tied ``won`` positions, the one drawn (all of them where ``random_applies`` says no);
        ``rows``: the node table's row of every position, when all are known (no scan of the ties)."""
        if not random_applies(pod, self._prefer_no_schedule(names, won)):
            return won
        inflight = self._inflight(pod.uid)
        if inflight:
            if rows is not None:
                table = self.cache.table
                marked = np.zeros(len(table.stamps), dtype=np.bool_)
                marked[[table.index[n] for n in inflight if n in table.index]] = True
                held = won & marked[rows]
            else:
                held = won & np.fromiter((n in inflight for n in names), np.bool_, len(names))
            if held.any():
                won = held
        kept = self.pick(won, names) if np.count_nonzero(won) > 1 else won
        self._picks[pod.uid] = (names[int(kept.nonzero()[0][0])], self.cache.clock())
        self._picks.move_to_end(pod.uid)
        while len(self._picks) > KEPT:
            self._picks.popitem(last=False)
        return kept

    def _prefer_no_schedule(self, names: Sequence[str], won: BoolArray) -> bool:
        """Whether a node among ``won`` has a PreferNoSchedule taint (none in most clusters: no scan)."""
        tainted = self.cache.prefer_no_schedule
        return bool(tainted) and any(names[p] in tainted for p in won.nonzero()[0].tolist())

    def _inflight(self, uid: str) -> set[str]:
        """Nodes of the picks (other pods') not yet counted in the cache, dropping the stale ones."""
        now = self.cache.clock()
        for done in [u for u, (_, when) in self._picks.items() if now - when > TTL_SECONDS]:
            del self._picks[done]
        for counted in [u for u in self._picks if self.cache.counted(u) is not None]:
            del self._picks[counted]
        return {node for other, (node, _) in self._picks.items() if other != uid}
