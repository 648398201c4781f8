"""Queues: Kueue ClusterQueues (flavors, quota, fair sharing) and KAI queues, through the
``app.pipeline.fairness.Fairness`` adapter over the pure ``fairshare`` policy.

Filter drops nodes whose flavor the pod's queue may not use or has no quota left on; bind re-checks
that (kube-scheduler filters the next pod before the previous one's bind arrives) and records the
admission; preempt replaces the scheduler's victims by fair-sharing ones. Scoring is the profile's
FlavorFairness plugin.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from app.cluster.objects import ObjectError, pod_placement
from app.http import wire
from app.pipeline.fairness import Fairness
from app.pipeline.framework import BindCycle, FilterCycle, Participant, Refusal, VictimChoice
from scoring.framework import Code, PodInfo, Status

__all__ = ["Queues"]


class Queues(Participant):
    name = "fairness"

    def __init__(self, fairness: Fairness) -> None:
        self.fairness = fairness

    def applies(self, pod: PodInfo) -> bool:
        return bool(pod.queue_labels)

    def prepare(self, pod: PodInfo, obj: Mapping[str, Any] | bytes) -> None:
        """Keep the pod's nodeSelector, affinity and tolerations: which flavors it may use."""
        if self.fairness.has_placement(pod.uid):
            return
        try:
            raw = wire.decode_pod(obj) if isinstance(obj, bytes) else obj
            self.fairness.remember_placement(pod.uid, pod_placement(raw))
        except ObjectError as exc:
            raise wire.WireError(f"Pod: {exc}") from None

    def filter(self, cycle: FilterCycle) -> None:
        positions = cycle.passing()
        names = list(map(cycle.names.__getitem__, positions))
        batch = cycle.batch
        rows = batch.rows[positions] if batch is not None and batch.all_known else None
        rejected = self.fairness.filter(cycle.pod, names, rows)
        if not rejected:
            return
        for position, name in zip(positions, names, strict=True):
            rejection = rejected.get(name)
            if rejection is not None:
                unresolvable, reason = rejection
                code = Code.UNSCHEDULABLE_AND_UNRESOLVABLE if unresolvable else Code.UNSCHEDULABLE
                cycle.verdicts.set(position, Status(code, reason))

    def select_victims(self, pod: PodInfo, node: str, victims: Sequence[str]) -> VictimChoice | None:
        choice = self.fairness.preempt_choice(pod, node, victims)
        self.fairness.record_preempt(pod, node, choice)
        if choice.action == "drop":
            return VictimChoice(drop=choice.reason)
        if choice.action == "replace":
            return VictimChoice(choice.victims, chosen_by="the queue victims")
        return None

    def admit(self, pod: PodInfo, node: str) -> Refusal | None:
        refusal = self.fairness.admits(pod, node)
        if refusal is None:
            return None
        return Refusal("quota", f"the queue of pod {pod.key} can no longer use node {node}: {refusal}")

    def post_bind(self, cycle: BindCycle) -> None:
        self.fairness.record_bind(cycle.pod, cycle.node)

    def explain(self, pod: PodInfo, names: Sequence[str]) -> Mapping[str, Any]:
        return self.fairness.explain(pod, names)

    def metrics(self) -> dict[str, dict[str, float]]:
        return {"queue_weighted_share": {key: drs.share for key, drs in self.fairness.usage.shares().items()}}
