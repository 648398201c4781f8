"""Where the reclaimer could put a pending pod: the nodes its nodeSelector and required affinity
allow (Kueue: where its queue may use a flavor), each with what is free for what the pod asks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.pipeline.fairness import Fairness
from fairshare.admission import Verdict
from fairshare.assignment import QueuedPod, judge
from fairshare.flavor import PodPlacement, node_matches_placement
from fairshare.quota import TreeUsage
from fairshare.reclaim import NodeRoom
from scoring.framework import PodInfo

__all__ = ["MAX_PLACEMENTS_KEPT", "NodeRooms"]

MAX_PLACEMENTS_KEPT = 256  # distinct pending-pod placements whose nodes are kept between rounds


class NodeRooms:
    def __init__(self, fairness: Fairness) -> None:
        self.fairness = fairness
        self._eligible_nodes: dict[Any, list[str]] = {}  # placement -> the nodes it allows (``_eligible``)
        self._eligible_version = -1  # the cache's nodes_version they were found at

    def of(
        self, pod: PodInfo, queued: QueuedPod, snap: TreeUsage, moved: Mapping[str, Mapping[str, int]]
    ) -> list[NodeRoom]:
        """Nodes the pod may go to (its nodeSelector and required affinity; Kueue: a flavor its queue
        may use there), with what is free for what it asks (``moved``: what earlier decisions of this
        round free or take per node); Kueue: in flavor order, then by name."""
        fairness, cache = self.fairness, self.fairness.cache
        if cache is None:
            return []
        placement = fairness.placement(pod.uid) or PodPlacement()
        wanted = [r for r, v in pod.resources.requests.items() if v > 0]
        verdicts: dict[int, Any] = {}
        rooms: list[tuple[int, str, NodeRoom]] = []
        for name in self._eligible(placement):
            node = cache.nodes[name]
            info = cache.node_info(name)
            if info is None:
                continue
            delta = moved.get(name, {})
            free = {r: info.allocatable.get(r, 0) - info.requested.get(r, 0) + delta.get(r, 0) for r in wanted}
            if queued.kind != "kueue":
                rooms.append((0, name, NodeRoom(name, free)))
                continue
            sid = fairness.signatures.by_node.get(name, -1)
            if sid not in verdicts:
                labels = fairness.signatures.labels[sid] if sid >= 0 else dict(node.labels)
                verdicts[sid] = judge(fairness.config, queued, placement, labels, snap)
            judged = verdicts[sid]
            if judged.verdict is Verdict.UNRESOLVABLE:
                continue
            rooms.append((judged.flavor_index, name, NodeRoom(name, free, judged.request)))
        rooms.sort(key=lambda item: (item[0], item[1]))
        return [room for _, _, room in rooms]

    def _eligible(self, placement: PodPlacement) -> list[str]:
        """The schedulable nodes the placement allows, kept per placement while no node changes."""
        cache = self.fairness.cache
        assert cache is not None
        if self._eligible_version != cache.nodes_version or len(self._eligible_nodes) > MAX_PLACEMENTS_KEPT:
            self._eligible_nodes.clear()
            self._eligible_version = cache.nodes_version
        try:
            key: Any = (tuple(sorted(placement.node_selector.items())), placement.affinity_terms)
            found = self._eligible_nodes.get(key)
        except TypeError:  # something unhashable in the terms: not kept
            key, found = None, None
        if found is None:
            found = [
                name
                for name, node in cache.nodes.items()
                if not node.unschedulable and node_matches_placement(node.labels, placement)
            ]
            if key is not None:
                self._eligible_nodes[key] = found
        return found
