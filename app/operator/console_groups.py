"""The console's Groups view: every gang with its members' state and the plan in force or why it
waits, and the recent gang decisions, built from what /debug answers under ``gangs`` (the same
function, ``service.gangs_view()``), arranged for a page. Pure reads of the service."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from app.operator.console_views import clock_time, requests_text

if TYPE_CHECKING:
    from app.service import ExtenderService

__all__ = [
    "GROUP_STATES",
    "MAX_GROUPS",
    "MAX_MEMBERS",
    "MEMBER_STATES",
    "OUTCOMES",
    "SOURCES",
    "DecisionRow",
    "GroupRow",
    "GroupsQuery",
    "MemberRow",
    "groups_page",
]

MAX_GROUPS = 200  # groups listed on a page; the JSON has them all
MAX_MEMBERS = 64  # members drawn per group; the rest is a count
# A group's state, as /debug's gangs view gives it.
GROUP_STATES = {
    "planned": "planned: room held for every member not bound yet",
    "waiting": "waiting for members or for its PodGroup (preemption cannot help)",
    "unschedulable": "the whole group fits nowhere now (preemption may help)",
    "released": "its holds were given back; planned again at the next member's filter",
    "complete": "every member bound",
    "new": "not judged yet: no member through /filter since the extender started",
}
OUTCOMES = ("planned", "waiting", "unschedulable", "released", "complete")
# A member's state -> the Cluster page's cell class it is drawn with (held and pending are the Groups page's own).
MEMBER_STATES = {
    "bound": "allocated",
    "binding": "assumed",
    "held": "held",
    "pending": "pending",
    "finished": "pending",
}
SOURCES = {
    "podgroup": "PodGroup (scheduling.k8s.io/v1alpha2)",
    "coscheduling": "coscheduling PodGroup (scheduling.x-k8s.io/v1alpha1)",
    "kueue": "Kueue pod group (pod labels and annotations)",
}


@dataclass(frozen=True, slots=True)
class GroupsQuery:
    group: str = ""  # substring of the group key, any case: filters the groups and the decisions
    state: str = ""  # one of GROUP_STATES, or "" for any
    outcome: str = ""  # one of OUTCOMES, or "" for any (decisions only)


@dataclass(slots=True)
class MemberRow:
    pod: str  # namespace/name
    name: str
    uid: str
    node: str
    state: str  # bound, binding, held, pending, finished

    @property
    def cell(self) -> str:
        return MEMBER_STATES.get(self.state, "pending")


@dataclass(slots=True)
class GroupRow:
    key: str  # "<source>:<namespace>/<name>"
    source: str
    name: str  # namespace/name
    min_count: int
    topology: str
    state: str  # a key of GROUP_STATES
    reason: str  # why it waits, or why its holds were released ("" when planned)
    members: list[MemberRow]
    hidden_members: int = 0
    counts: dict[str, int] = field(default_factory=dict)  # member state -> how many
    domain: str = ""
    planned_at: str = ""  # UTC clock time
    expires_in: float | None = None
    held: str = ""  # the held requests, as an operator writes them


@dataclass(slots=True)
class DecisionRow:
    time: float
    clock: str
    group: str
    source: str
    outcome: str
    reason: str
    count: int


def _split(key: str) -> tuple[str, str]:
    source, _, name = key.partition(":")
    return (source, name) if name else ("", key)


def _group_row(entry: Mapping[str, Any]) -> GroupRow:
    key = str(entry.get("group", ""))
    source, name = _split(key)
    state, reason = str(entry.get("state") or "new"), str(entry.get("reason") or "")
    members = [
        MemberRow(str(m.get("pod", "")), str(m.get("pod", "")).rpartition("/")[2], str(m.get("uid", "")),
                  str(m.get("node") or ""), str(m.get("state", "")))
        for m in entry.get("members") or []
    ]  # fmt: skip
    counts = Counter(m.state for m in members)
    row = GroupRow(
        key=key,
        source=source,
        name=name,
        min_count=int(entry.get("minCount") or 0),
        topology=str(entry.get("topology") or ""),
        state=state,
        reason=reason,
        members=members[:MAX_MEMBERS],
        hidden_members=max(0, len(members) - MAX_MEMBERS),
        counts={s: counts[s] for s in MEMBER_STATES if counts[s]},
    )
    plan = entry.get("plan")
    if isinstance(plan, Mapping):
        row.domain = str(plan.get("domain", ""))
        row.planned_at = clock_time(float(plan.get("plannedAt") or 0.0))
        row.expires_in = float(plan.get("holdExpiresInSeconds") or 0.0)
        row.held = requests_text(plan.get("held") or {})
    return row


def _decision_row(d: Mapping[str, Any]) -> DecisionRow:
    at = float(d.get("time") or 0.0)
    group = str(d.get("group", ""))
    return DecisionRow(
        at, clock_time(at), group, _split(group)[0], str(d.get("outcome", "")), str(d.get("reason", "")),
        int(d.get("count") or 1),
    )  # fmt: skip


def _matches(key: str, text: str) -> bool:
    return not text or text.lower() in key.lower()


def groups_page(service: ExtenderService, query: GroupsQuery) -> dict[str, Any]:
    """The Groups page: the groups matching the query (up to MAX_GROUPS), counts over all of them,
    and the gang decisions matching it, newest first."""
    view = service.gangs_view()
    decisions: Sequence[Mapping[str, Any]] = view.get("decisions") or []
    entries = view.get("groups") or []
    matching = []
    for entry in entries:
        if not _matches(str(entry.get("group", "")), query.group):
            continue
        row = _group_row(entry)
        if query.state and row.state != query.state:
            continue
        matching.append(row)
    members: Counter[str] = Counter()
    states: Counter[str] = Counter()
    for row in matching:
        states[row.state] += 1
        members.update(row.counts)
    rows = [  # kept in the order taken (a repeated decision is the last one, its time renewed): newest first
        _decision_row(d)
        for d in reversed(decisions)
        if _matches(str(d.get("group", "")), query.group) and (not query.outcome or d.get("outcome") == query.outcome)
    ]
    return {
        "view": view,
        "query": query,
        "groups": matching[:MAX_GROUPS],
        "matching": len(matching),
        "total": len(entries),
        "states": states,
        "members": members,
        "decisions": rows,
        "decisions_total": len(decisions),
        "group_states": GROUP_STATES,
        "outcomes": OUTCOMES,
        "member_states": MEMBER_STATES,
        "sources": SOURCES,
    }
