"""What the reclaim loop tells people: the shares behind a decision, and the Events on a victim and on
the pod it made room for."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from app.cluster.eviction import EventNote
from fairshare.reclaim import Workload

if TYPE_CHECKING:
    from app.pipeline.fairness import Fairness
    from app.pipeline.reclaimer import Plan

__all__ = ["decision_shares", "eviction_notes"]


def decision_shares(fairness: Fairness, plan: Plan) -> dict[str, Any]:
    """The queues' shares a decision read: Kueue weighted DRS, KAI allocated / fair share."""
    queues = {plan.queued.queue} | {w.queue for w, _ in plan.choice.victims}
    if plan.queued.kind == "kueue":
        return {q: fairness.usage.share_of(q).share for q in sorted(queues)}
    kai = fairness.kai_ledger()
    shares = kai.fair_shares()
    return {
        q: {"allocated": dict(kai.allocated.get(q, {})), "fairShare": dict(shares.get(q, {}))} for q in sorted(queues)
    }


def eviction_notes(
    plan: Plan, workload: Workload, uid: str, victim: tuple[str, str], shares: dict[str, Any]
) -> tuple[EventNote, EventNote]:
    """``Reclaimed`` on the evicted pod and ``Reclaiming`` on the beneficiary, each naming both queues
    and their shares as the decision read them, and why the victim was chosen."""
    beneficiary, bq, vq = plan.pod, plan.queued.queue, workload.queue
    what = "ClusterQueue" if plan.queued.kind == "kueue" else "KAI queue"
    reason = dict((w.key, r) for w, r in plan.choice.victims)[workload.key]
    namespace, name = victim
    text = f"{what} {vq} (share {_share(shares.get(vq))}) for {what} {bq} (share {_share(shares.get(bq))}), {reason}"
    return (
        EventNote(
            namespace,
            name,
            uid,
            "Reclaimed",
            f"Evicted by kube-gpu-extender: {text}; to make room for pod {beneficiary.key}",
        ),
        EventNote(
            beneficiary.namespace,
            beneficiary.name,
            beneficiary.uid,
            "Reclaiming",
            f"kube-gpu-extender evicted pod {namespace}/{name} of {text}",
        ),
    )


def _share(share: Any) -> str:
    if isinstance(share, float):
        return f"{share:.1f}" if share == share and share != float("inf") else str(share)
    return str(share)
