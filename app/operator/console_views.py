"""The console's Queues, Decisions, Explain and Health views, built from what /debug, /debug/queues
and /debug/explain answer (the same functions), arranged for a page. Pure reads of the service."""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import metadata
from typing import TYPE_CHECKING, Any

import yaml

from app.operator.debug import debug_view
from fairshare.usage import queues_view

if TYPE_CHECKING:
    from app.service import ExtenderService
    from scoring.framework import PodInfo

__all__ = [
    "ExplainInputError",
    "decisions_view",
    "explain_view",
    "health_view",
    "parse_pod_text",
    "pending_pods",
    "queues_page",
    "version",
]

MAX_PENDING = 200  # pending pods listed on a page
# A decision's fields shown as columns; every other field is one of its reasons or details.
_DECISION_COLUMNS = frozenset({"time", "verb", "pod", "outcome", "source"})


@functools.cache
def version() -> str:
    """The installed package's version (read once: it does not change while the process runs)."""
    try:
        return metadata.version("kube-gpu-extender")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def clock_time(at: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(at))


_BINARY_UNITS = (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))


def quantity(resource: str, value: float, *, milli_cpu: bool = True) -> str:
    """An amount as an operator writes it: cpu in cores (the cache counts millicores, Kueue cores),
    memory and storage in binary units when they divide evenly, anything else as a number."""
    if resource == "cpu":
        return _number(value / 1000 if milli_cpu else value)
    if resource == "memory" or "storage" in resource or resource.startswith("hugepages-"):
        for suffix, size in _BINARY_UNITS:
            if value >= size and value % size == 0:
                return f"{int(value // size)}{suffix}"
    return _number(value)


def requests_text(requests: Mapping[str, float], *, milli_cpu: bool = True) -> str:
    return ", ".join(f"{k}: {quantity(k, v, milli_cpu=milli_cpu)}" for k, v in sorted(requests.items()))


def _number(value: Any) -> str:
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else f"{value:g}"
    return str(value)


def detail_text(value: Any) -> str:
    """A decision detail as one line: mappings as ``k: v``, lists joined, the rest as JSON scalars."""
    if isinstance(value, Mapping):
        return ", ".join(f"{k}: {detail_text(v)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return ", ".join(detail_text(v) for v in value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _number(value)
    return str(value)


# ---------------------------------------------------------------------------------------------- pending
def pending_pods(service: ExtenderService, limit: int = MAX_PENDING) -> tuple[list[PodInfo], int]:
    """Pods the watch shows unbound and not finished, not assumed by us: (the first ``limit`` by
    namespace/name, how many in all)."""
    cache = service.cache
    found = [p for p in cache.pods.values() if not p.node_name and not p.terminal and p.uid not in cache.ledger]
    found.sort(key=lambda p: p.key)
    return found[:limit], len(found)


def _last_decisions(service: ExtenderService) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """The latest verb decision and the latest queue decision per pod (namespace/name)."""
    verbs = {d["pod"]: d for d in service.decisions if d.get("verb") in ("filter", "bind", "preempt")}
    fairness = service.fairness
    queue = {d["pod"]: d for d in fairness.decisions} if fairness is not None else {}
    return verbs, queue


def why_pending(verb: dict[str, Any] | None, queue: dict[str, Any] | None) -> str:
    """What the last decisions say about a pending pod, or that none was taken yet."""
    parts = []
    if queue is not None:
        reasons = queue.get("reasons") or queue.get("reason") or queue.get("action") or ""
        parts.append(f"queue {queue['verb']}: {detail_text(reasons)}")
    if verb is not None:
        if verb.get("error"):
            parts.append(f"{verb['verb']}: {verb['error']}")
        elif verb["verb"] == "filter":
            failed = verb.get("failed") or {}
            passed = verb.get("passed", 0)
            text = f"{passed} node(s) passed" + (f"; {detail_text(failed)}" if failed else "")
            parts.append(f"last filter: {text}")
        else:
            parts.append(f"last {verb['verb']}: {verb['outcome']}")
    return "; ".join(parts) if parts else "no decision yet (not through /filter since the extender started)"


# ---------------------------------------------------------------------------------------------- queues
@dataclass(slots=True)
class TreeRow:
    key: str
    name: str
    kind: str
    depth: int
    entry: dict[str, Any]


def _tree_rows(nodes: Mapping[str, dict[str, Any]]) -> list[TreeRow]:
    """The quota tree in pre-order (a cohort, then its members), children by name."""
    children: dict[str | None, list[str]] = {}
    for key, entry in nodes.items():
        children.setdefault(entry.get("parent"), []).append(key)
    rows: list[TreeRow] = []

    def visit(key: str, depth: int) -> None:
        kind, _, name = key.partition("/")
        rows.append(TreeRow(key, name, "Cohort" if kind == "cohort" else "ClusterQueue", depth, nodes[key]))
        for child in sorted(children.get(key, [])):
            visit(child, depth + 1)

    for root in sorted(children.get(None, [])):
        visit(root, 0)
    return rows


def _kai_rows(kai: Mapping[str, Any]) -> list[TreeRow]:
    queues: Mapping[str, dict[str, Any]] = kai.get("queues", {})
    children: dict[str | None, list[str]] = {}
    for name, entry in queues.items():
        children.setdefault(entry.get("parent"), []).append(name)
    rows: list[TreeRow] = []

    def visit(name: str, depth: int) -> None:
        rows.append(TreeRow(name, name, "Queue", depth, queues[name]))
        for child in sorted(children.get(name, [])):
            visit(child, depth + 1)

    for root in sorted(n for p, names in children.items() if p is None or p not in queues for n in names):
        visit(root, 0)
    return rows


@dataclass(slots=True)
class PendingRow:
    pod: str
    uid: str
    queue: str
    kind: str
    requests: str
    why: str


def queues_page(service: ExtenderService) -> dict[str, Any]:
    fairness = service.fairness
    view = fairness.view() if fairness is not None else queues_view(None)
    if service.kueue_source is not None:
        view["source"] = service.kueue_source.view()
    rows = _tree_rows(view.get("nodes", {}))
    kai_rows = _kai_rows(view["kai"]) if "kai" in view else []
    pending: list[PendingRow] = []
    queued_total = 0
    if fairness is not None:
        verbs, queue = _last_decisions(service)
        pods, _ = pending_pods(service, limit=len(service.cache.pods))
        for pod in pods:
            queued = fairness.queued(pod)
            if queued is None:
                continue
            queued_total += 1
            if len(pending) < MAX_PENDING:
                why = why_pending(verbs.get(pod.key), queue.get(pod.key))
                if queued.missing:
                    why = f"{queued.missing}; {why}"
                # Kueue counts cpu in cores, KAI and the cache in millicores.
                kueue = queued.kind == "kueue" and bool(queued.requests)
                requests = requests_text(queued.requests or pod.resources.requests, milli_cpu=not kueue)
                pending.append(PendingRow(pod.key, pod.uid, queued.queue, queued.kind, requests, why))
    decisions = list(reversed(view.get("decisions", [])))[:50]
    return {
        "view": view,
        "rows": rows,
        "kai_rows": kai_rows,
        "pending": pending,
        "pending_total": queued_total,
        "decisions": decisions,
    }


# ---------------------------------------------------------------------------------------------- decisions
@dataclass(slots=True)
class DecisionRow:
    time: float
    clock: str
    verb: str
    source: str
    pod: str
    outcome: str
    details: list[tuple[str, str]] = field(default_factory=list)


def _nodes_of(decision: Mapping[str, Any]) -> set[str]:
    """The nodes a decision names: its node, the nodes preemption kept or dropped."""
    nodes = set()
    if isinstance(decision.get("node"), str):
        nodes.add(decision["node"])
    for key in ("kept", "dropped"):
        value = decision.get(key)
        if isinstance(value, list | dict):
            nodes.update(str(n) for n in value)
    return nodes


def decisions_view(service: ExtenderService, pod: str = "", node: str = "") -> tuple[list[DecisionRow], int]:
    """The verbs', the queues' and the gangs' recent decisions, newest first, filtered by pod
    (substring of namespace/name; of the group's key for a gang decision) and node (exact: gang
    decisions name none); also how many there are before filtering."""
    entries: list[tuple[str, Mapping[str, Any]]] = [("verb", d) for d in service.decisions]
    if service.fairness is not None:
        entries += [("queue", d) for d in service.fairness.decisions]
    entries += [("gang", d) for d in service.gangs_view()["decisions"]]
    rows = []
    for source, d in entries:
        who = str(d.get("group" if source == "gang" else "pod", ""))
        if pod and pod.lower() not in who.lower():
            continue
        if node and node not in _nodes_of(d):
            continue
        details = [(k, detail_text(v)) for k, v in d.items() if k not in _DECISION_COLUMNS]
        if source == "gang":
            details = [(k, v) for k, v in details if k != "group" and (k, v) != ("count", "1")]
        outcome = str(d.get("outcome") or d.get("action") or "")
        at = float(d.get("time", 0.0))
        verb = "gang" if source == "gang" else str(d.get("verb", ""))
        rows.append(DecisionRow(at, clock_time(at), verb, source, who, outcome, details))
    rows.sort(key=lambda r: r.time, reverse=True)
    return rows, len(entries)


# ---------------------------------------------------------------------------------------------- explain
class ExplainInputError(ValueError):
    """A pasted pod the console cannot explain; the message says why."""


class _NoAliasLoader(yaml.SafeLoader):
    """YAML without aliases: a few KB of nested ones expand to gigabytes once the pod is encoded as
    JSON (and that would run on the event loop the verbs share)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
            raise yaml.composer.ComposerError(None, None, "YAML aliases (*name) are not accepted here", mark)
        return super().compose_node(parent, index)


def parse_pod_text(text: str) -> tuple[dict[str, Any], list[str] | None]:
    """A pasted Pod (YAML or JSON), or a whole ExtenderArgs body: (the pod, its NodeNames if given)."""
    if not text.strip():
        raise ExplainInputError("paste a Pod (YAML or JSON) or pick a pending pod")
    try:
        obj = json.loads(text)
    except ValueError:
        try:
            obj = yaml.load(text, Loader=_NoAliasLoader)  # a SafeLoader, minus aliases
        except yaml.YAMLError as exc:
            raise ExplainInputError(f"neither JSON nor YAML: {exc}") from None
        try:
            json.dumps(obj)
        except (TypeError, ValueError) as exc:  # an unquoted date, say
            raise ExplainInputError(f"the YAML holds a value JSON cannot: {exc}") from None
    if not isinstance(obj, dict):
        raise ExplainInputError(f"expected a Pod object, got {type(obj).__name__}")
    names = None
    if isinstance(obj.get("Pod"), dict):  # an ExtenderArgs body, as /debug/explain takes
        given = obj.get("NodeNames")
        names = [str(n) for n in given] if isinstance(given, list) else None
        obj = obj["Pod"]
    kind = obj.get("kind", "Pod")
    if kind != "Pod":
        raise ExplainInputError(f"expected kind Pod, got {kind!r}")
    if not isinstance(obj.get("metadata"), dict) or not obj["metadata"].get("name"):
        raise ExplainInputError("the pod needs metadata.name")
    return obj, names


@dataclass(slots=True)
class ExplainRow:
    name: str
    passed: bool
    reason: str
    code: str
    scores: list[tuple[str, int, int, int | None]]  # plugin, raw, weight, raw times weight (None: sat out)
    node_score: int | None
    score: int | None
    managed: str
    dra: str
    queue: str


def _dra_text(entry: Any) -> str:
    if not isinstance(entry, Mapping):
        return ""
    return detail_text(entry)


def _queue_text(entry: Any) -> str:
    if not isinstance(entry, Mapping):
        return ""
    verdict = "passes" if entry.get("passed") else f"refused: {entry.get('reason', '')}"
    extra = [f"{entry.get('kind', '')} queue {entry.get('queue', '')}", verdict]
    if entry.get("flavors"):
        extra.append(f"flavors {detail_text(entry['flavors'])}")
    if entry.get("borrowing"):
        extra.append("borrowing")
    return "; ".join(extra)


def explain_view(service: ExtenderService, result: Mapping[str, Any]) -> list[ExplainRow]:
    """/debug/explain's answer as rows: nodes that pass first, best score first, then the others."""
    weights = {spec.plugin.name: spec.weight for spec in service.profile.scorers}
    rows = []
    for entry in result.get("nodes", []):
        verdict = entry.get("filter", {})
        sat_out = set(entry.get("satOut", ()))
        scores = [
            (p, raw, weights.get(p, 0), None if p in sat_out else raw * weights.get(p, 0))
            for p, raw in entry.get("scores", {}).items()
        ]
        managed = entry.get("managed", {})
        rows.append(
            ExplainRow(
                name=entry["name"],
                passed=bool(verdict.get("passed")),
                reason=str(verdict.get("reason", "")),
                code=str(verdict.get("code", "")),
                scores=scores,
                node_score=entry.get("nodeScore"),
                score=entry.get("score"),
                managed=", ".join(
                    f"{r}: {m['requested']}/{m['allocatable']} used, pod {m['pod']}" for r, m in managed.items()
                ),
                dra=_dra_text(entry.get("dra")),
                queue=_queue_text(entry.get("fairness")),
            )
        )
    rows.sort(key=lambda r: (not r.passed, -(r.score if r.score is not None else -1), r.name))
    return rows


# ---------------------------------------------------------------------------------------------- health
def health_view(service: ExtenderService) -> dict[str, Any]:
    view = debug_view(service, include_nodes=False, decisions=0)
    errors: list[tuple[str, str]] = []
    for name, source in view["cache"]["sources"].items():
        if source["lastError"]:
            errors.append((f"watch {name}", source["lastError"]))
    kueue = service.kueue_source.view() if service.kueue_source is not None else None
    if kueue is not None and kueue.get("lastError"):
        errors.append(("Kueue objects", kueue["lastError"]))
    failures = [d for d in reversed(service.decisions) if d.get("error") or d.get("outcome") == "error"][:20]
    return {
        "view": view,
        "kueue": kueue,
        "errors": errors,
        "failures": [
            (clock_time(float(d.get("time", 0))), d.get("verb", ""), d.get("pod", ""), d.get("error", ""))
            for d in failures
        ],
        "ready_detail": service.ready_detail(),
        "version": version(),
    }
