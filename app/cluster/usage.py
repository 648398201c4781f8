"""What the cluster cache adds up per node (``NodeUsage``), and the pods it counts before the watch
shows them bound (``Assumption``: assumed by /bind, or held for a gang)."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.cluster.pod_kinds import Kinds
from scoring.framework import PodInfo

__all__ = ["Assumption", "NodeUsage"]


@dataclass(slots=True)
class NodeUsage:
    """Incrementally maintained per-node aggregates (bound + assumed pods)."""

    requested: dict[str, int] = field(default_factory=dict)
    non_zero_cpu: int = 0
    non_zero_memory: int = 0
    pod_count: int = 0
    assumed_count: int = 0
    uids: set[str] = field(default_factory=set)  # the pods counted here (preemption looks at one node's pods)
    kinds: dict[str, dict[int, int]] = field(default_factory=dict)  # resource -> pod kind -> pods

    def add_kinds(self, kinds: Kinds, sign: int) -> None:
        for resource, kind in kinds:
            counts = self.kinds.setdefault(resource, {})
            total = counts.get(kind, 0) + sign
            if total:
                counts[kind] = total
            else:
                counts.pop(kind, None)
                if not counts:
                    del self.kinds[resource]

    def add(self, pod: PodInfo, sign: int) -> None:
        if sign > 0:
            self.uids.add(pod.uid)
        else:
            self.uids.discard(pod.uid)
        for name, amount in pod.resources.requests.items():
            total = self.requested.get(name, 0) + sign * amount
            if total:
                self.requested[name] = total
            else:
                self.requested.pop(name, None)
        self.non_zero_cpu += sign * pod.resources.non_zero_cpu
        self.non_zero_memory += sign * pod.resources.non_zero_memory
        self.pod_count += sign


@dataclass(frozen=True, slots=True)
class Assumption:
    """A pod counted on a node before the watch shows it bound: assumed by /bind, or held for a gang
    (``held_for`` names the group) on the node its plan gave it, until the member's /bind or the plan's
    deadline."""

    pod: PodInfo
    node: str
    assumed_at: float
    expires_at: float
    held_for: str = ""
