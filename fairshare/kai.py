"""KAI-Scheduler proportion plugin: fair share per queue and resource.

Each resource is divided independently and each hierarchy level separately (children split their
parent's fair share). Default algorithm: everyone gets min(deserved, requestable) — not capped by
capacity — then what is left goes over quota bucket by bucket (highest priority first) in
proportion to overQuotaWeight, floor-rounded, with leftover whole units handed to the largest
remainders. ``priority_based_fair_share`` (KAI design "priority-based fair share", PR #326): per
bucket, phase 1 min(deserved, requestable, remaining), phase 2 the weighted routine, phase 3 the
routine again with every weight 1 (so weight-0 queues with demand still get capacity).
Ties are deterministic: older creation time first, then name.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from fairshare.errors import QueueConfigError
from fairshare.flavor import crd_object

__all__ = ["DEFAULT_PRIORITY", "UNLIMITED", "KaiQueue", "QueueResource", "divide", "fair_shares", "parse_kai_queue"]

UNLIMITED = -1.0
DEFAULT_PRIORITY = 100


@dataclass(frozen=True, slots=True)
class QueueResource:
    """One resource of a queue: deserved (KAI ``quota``), limit, overQuotaWeight, request."""

    deserved: float = 0.0
    limit: float = UNLIMITED
    over_quota_weight: float = 1.0
    request: float = 0.0  # allocated + pending
    usage: float = 0.0  # normalised historical usage; 0 without time-based fairness


@dataclass(frozen=True, slots=True)
class KaiQueue:
    name: str
    priority: int = DEFAULT_PRIORITY
    parent: str | None = None
    creation: float = 0.0  # creation timestamp; only orders ties
    resources: Mapping[str, QueueResource] = field(default_factory=dict)


@dataclass(slots=True)
class _Entry:
    name: str
    priority: int
    creation: float
    deserved: float
    limit: float
    weight: float
    requestable: float
    usage: float
    share: float = 0.0

    @property
    def unsatisfied(self) -> bool:
        return self.requestable - self.share > 0


def _over_quota(bucket: Sequence[_Entry], remaining: float, k_value: float, remainders: dict[str, float]) -> float:
    """KAI's weighted over-quota rounds on one priority bucket; returns what is left."""
    while remaining > 0:
        unsatisfied = [e for e in bucket if e.unsatisfied and e.weight > 0]
        total_weight = sum(e.weight for e in unsatisfied)
        if total_weight == 0:
            break
        share_weights = {}
        for e in unsatisfied:
            nw = e.weight / total_weight
            share_weights[e.name] = max(0.0, nw + k_value * (nw - e.usage))
        total_share = sum(share_weights.values())
        if total_share == 0:
            break
        amount = remaining  # fixed for the round
        another = False
        for e in unsatisfied:
            fair = amount * share_weights[e.name] / total_share
            req = e.requestable - e.share
            if req <= fair:
                given = req
                remainders.pop(e.name, None)
            else:
                given = math.floor(fair)
                if fair - given > 0:
                    remainders[e.name] = fair - given
            e.share += given
            remaining -= given
            if req < fair:
                another = True
        if not another:
            break
    return remaining


def _leftover_units(buckets: Sequence[Sequence[_Entry]], remaining: float, remainders: dict[str, float]) -> float:
    for bucket in buckets:
        if remaining <= 0:
            break
        for e in sorted(
            (e for e in bucket if e.name in remainders), key=lambda e: (-remainders[e.name], e.creation, e.name)
        ):
            if remaining <= 0:
                break
            given = min(1.0, remaining)
            e.share += given
            remaining -= given
            del remainders[e.name]
    return remaining


def _buckets(entries: Iterable[_Entry]) -> list[list[_Entry]]:
    by_priority: dict[int, list[_Entry]] = {}
    for e in sorted(entries, key=lambda e: (e.creation, e.name)):
        by_priority.setdefault(e.priority, []).append(e)
    return [by_priority[p] for p in sorted(by_priority, reverse=True)]


def divide(
    total: float, entries: Sequence[_Entry], *, priority_based: bool = False, k_value: float = 1.0
) -> dict[str, float]:
    """Divide ``total`` of one resource among sibling queues; returns fair share by name."""
    k = max(0.0, k_value)
    buckets = _buckets(entries)
    if priority_based:
        remaining = total
        for bucket in buckets:
            if remaining <= 0:
                break
            for e in bucket:  # phase 1, capped by capacity, in creation-then-name order
                grant = max(0.0, min(e.deserved, e.requestable, remaining))
                e.share += grant
                remaining -= grant
            remainders: dict[str, float] = {}
            remaining = _over_quota(bucket, remaining, k, remainders)  # phase 2
            remaining = _leftover_units([bucket], remaining, remainders)
            saved = [e.weight for e in bucket]
            for e in bucket:  # phase 3: unmet demand shares the rest as weight 1
                e.weight = 1.0
            remainders = {}
            remaining = _over_quota(bucket, remaining, k, remainders)
            remaining = _leftover_units([bucket], remaining, remainders)
            for e, w in zip(bucket, saved, strict=True):
                e.weight = w
    else:
        for e in entries:
            e.share = max(0.0, min(e.deserved, e.requestable))
        remaining = max(0.0, total - sum(e.share for e in entries))
        remainders = {}
        for bucket in buckets:
            if remaining <= 0:
                break
            remaining = _over_quota(bucket, remaining, k, remainders)
        _leftover_units(buckets, remaining, remainders)
    return {e.name: e.share for e in entries}


def _entry(q: KaiQueue, resource: str, total: float, request: float) -> _Entry:
    spec = q.resources.get(resource, QueueResource())
    deserved = total if spec.deserved == UNLIMITED else spec.deserved
    requestable = request if spec.limit == UNLIMITED else min(spec.limit, request)
    return _Entry(q.name, q.priority, q.creation, deserved, spec.limit, spec.over_quota_weight, requestable, spec.usage)


def fair_shares(
    queues: Sequence[KaiQueue],
    totals: Mapping[str, float],
    *,
    priority_based: bool = False,
    k_value: float = 1.0,
) -> dict[str, dict[str, float]]:
    """Fair share per queue (every level) and resource; a parent's request sums its descendants'."""
    children: dict[str | None, list[KaiQueue]] = {}
    for q in queues:
        children.setdefault(q.parent, []).append(q)
    requests: dict[str, dict[str, float]] = {}

    def request_of(q: KaiQueue) -> dict[str, float]:
        if q.name not in requests:
            kids = children.get(q.name, [])
            if kids:
                out: dict[str, float] = {}
                for kid in kids:
                    for r, v in request_of(kid).items():
                        out[r] = out.get(r, 0.0) + v
                requests[q.name] = out
            else:
                requests[q.name] = {r: spec.request for r, spec in q.resources.items()}
        return requests[q.name]

    result: dict[str, dict[str, float]] = {q.name: {} for q in queues}

    def split(parent: str | None, available: Mapping[str, float]) -> None:
        kids = children.get(parent, [])
        if not kids:
            return
        for resource, total in available.items():
            entries = [_entry(q, resource, total, request_of(q).get(resource, 0.0)) for q in kids]
            for name, share in divide(total, entries, priority_based=priority_based, k_value=k_value).items():
                result[name][resource] = share
        for q in kids:
            split(q.name, result[q.name])

    split(None, totals)
    return result


def parse_kai_queue(raw: object, path: str, *, creation: float = 0.0) -> KaiQueue:
    """A KAI Queue (``scheduling.run.ai/v2`` shape). Unlike the CRD, omitted fields take the
    quickstart's values (limit -1, overQuotaWeight 1, priority 100), which the docs state."""
    name, spec, spath = crd_object(raw, path)
    priority = spec.get("priority", DEFAULT_PRIORITY)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise QueueConfigError(f"{spath}.priority: must be an integer")
    parent = spec.get("parentQueue")
    if parent is not None and not isinstance(parent, str):
        raise QueueConfigError(f"{spath}.parentQueue: must be a string")
    resources_raw = spec.get("resources") or {}
    if not isinstance(resources_raw, Mapping):
        raise QueueConfigError(f"{spath}.resources: must be a map of resource name to quota")
    resources: dict[str, QueueResource] = {}
    for rname, r in resources_raw.items():
        rpath = f"{spath}.resources.{rname}"
        if not isinstance(r, Mapping):
            raise QueueConfigError(f"{rpath}: must be an object")
        values: dict[str, float] = {}
        for key, default, minimum in (("quota", 0.0, -1.0), ("limit", UNLIMITED, -1.0), ("overQuotaWeight", 1.0, 0.0)):
            v = r.get(key, default)
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise QueueConfigError(f"{rpath}.{key}: must be a number")
            if v < minimum:
                raise QueueConfigError(f"{rpath}.{key}: must be >= {minimum:g}")
            values[key] = float(v)
        resources[str(rname)] = QueueResource(values["quota"], values["limit"], values["overQuotaWeight"])
    return KaiQueue(name, priority, parent or None, creation, resources)
