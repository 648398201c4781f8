"""What /debug and the console show of the gangs: every group the cache knows, its state, its
members and the plan in force with what it holds. Pure reads of the ``Gangs`` participant."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.pipeline.gangs import GangPlan, Gangs

__all__ = ["gangs_view"]


def gangs_view(gangs: Gangs) -> dict[str, Any]:
    """/debug's ``gangs``: every gang the cache knows (by its members or its PodGroup), its ``state``
    (planned, waiting, unschedulable, released, complete, or new: not judged yet), each member's node
    and state (bound, binding, held on its planned node, pending, finished), the plan with its holds
    or why the group waits; and the recent decisions. A read: a plan whose holds ran out shows until
    the next member's filter releases it."""
    cache = gangs.cache
    groups = []
    policies = cache.groups.policies
    keys = set(cache.groups.members) | {k for k, p in policies.items() if p.min_count > 0}
    for key in sorted(keys):
        members = sorted(cache.groups.members_of(key), key=lambda uid: cache.pods[uid].name)
        group = gangs.group_of(cache.pods[members[0]]) if members else gangs.policy_group(key)
        if group is None:
            continue
        plan = gangs.plans.get(key)
        outcome, reason = gangs.last.get(key, ("new", ""))
        entry: dict[str, Any] = {
            "group": key,
            "minCount": group.min_count,
            "topology": group.topology.describe() if group.topology else None,
            "state": "planned" if plan is not None else outcome,
            "members": [_member_view(gangs, uid, plan) for uid in members],
            "plan": None,
            "reason": group.missing or (reason if plan is None and outcome != "complete" else ""),
        }
        if plan is not None:
            entry["plan"] = {
                "domain": plan.domain,
                "plannedAt": plan.planned_at,
                "holdExpiresInSeconds": round(plan.deadline - cache.clock(), 3),
                "held": _held_totals(gangs, plan),
            }
        groups.append(entry)
    return {"enabled": True, "groups": groups, "decisions": list(gangs.decisions)}


def _member_view(gangs: Gangs, uid: str, plan: GangPlan | None) -> dict[str, Any]:
    pod = gangs.cache.pods[uid]
    assumption = gangs.cache.ledger.get(uid)
    if pod.terminal:
        state, node = "finished", pod.node_name
    elif pod.node_name:
        state, node = "bound", pod.node_name
    elif assumption is not None:
        state, node = ("held" if assumption.held_for else "binding"), assumption.node
    else:
        state, node = "pending", plan.placements.get(uid, "") if plan is not None else ""
    return {"pod": pod.key, "uid": uid, "node": node, "state": state}


def _held_totals(gangs: Gangs, plan: GangPlan) -> dict[str, int]:
    totals: Counter[str] = Counter()
    for uid in plan.placements:
        assumption = gangs.cache.ledger.get(uid)
        if assumption is not None and assumption.held_for == plan.group.key:
            totals.update({r: a for r, a in assumption.pod.resources.requests.items() if a > 0})
    return dict(totals)
