"""Kueue fair-sharing preemption, evaluated on one node's workloads.

Candidates: the preemptor's own ClusterQueue (``withinClusterQueue``) and other ClusterQueues of the
same root that borrow (``reclaimWithinCohort``), using a contested (flavor, resource). Targets are
chosen by descending from the root to the highest-DRS child; victims are taken by
LessThanOrEqualToFinalShare (preemptor share after admission <= target share after removal), then
LessThanInitialShare (< target share now, once per ClusterQueue). Within-nominal reclamation skips
the share rules. All-or-nothing, then fill-back. Reasons: InClusterQueue, InCohortReclamation,
InCohortFairSharing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from fairshare.drs import DominantResourceShare, ResourceWeights, compare_drs, dominant_resource_share, unweighted
from fairshare.quota import TreeUsage, Usage, cq_key

__all__ = [
    "DEFAULT_STRATEGIES",
    "IN_CLUSTER_QUEUE",
    "IN_COHORT_FAIR_SHARING",
    "IN_COHORT_RECLAMATION",
    "LESS_THAN_INITIAL_SHARE",
    "LESS_THAN_OR_EQUAL_TO_FINAL_SHARE",
    "Candidate",
    "Victim",
    "fair_preemption",
]

LESS_THAN_OR_EQUAL_TO_FINAL_SHARE = "LessThanOrEqualToFinalShare"
LESS_THAN_INITIAL_SHARE = "LessThanInitialShare"
IN_CLUSTER_QUEUE = "InClusterQueue"
IN_COHORT_RECLAMATION = "InCohortReclamation"
IN_COHORT_FAIR_SHARING = "InCohortFairSharing"
DEFAULT_STRATEGIES = (LESS_THAN_OR_EQUAL_TO_FINAL_SHARE, LESS_THAN_INITIAL_SHARE)


@dataclass(frozen=True, slots=True)
class Candidate:
    """An admitted workload with pods on the node."""

    uid: str
    cluster_queue: str
    priority: int
    admitted_at: float
    usage: Usage
    evicted: bool = False


@dataclass(frozen=True, slots=True)
class Victim:
    candidate: Candidate
    reason: str


def _allowed(policy: str, cand: Candidate, priority: int, created: float) -> bool:
    if policy == "Any":
        return True
    if policy == "LowerPriority":
        return cand.priority < priority
    if policy == "LowerOrNewerEqualPriority":
        return cand.priority < priority or (cand.priority == priority and cand.admitted_at > created)
    return False


def fair_preemption(
    snapshot: TreeUsage,
    preemptor_cq: str,
    request: Usage,
    candidates: Sequence[Candidate],
    *,
    priority: int,
    created: float = math.inf,
    weights: ResourceWeights = unweighted,
    strategies: Sequence[str] = DEFAULT_STRATEGIES,
    within_nominal: bool = True,
    also_fits: Callable[[Sequence[Candidate]], bool] | None = None,
) -> list[Victim]:
    """Victims (in the order taken) that let ``request`` fit in ``preemptor_cq``; [] when none do.
    ``also_fits``: a further condition on the victims (reclaim: the pod then fits on a node)."""
    tree = snapshot.tree
    pkey = cq_key(preemptor_cq)
    spec = tree.cluster_queues[preemptor_cq]
    contested = {fr for fr, v in request.items() if v > snapshot.available(pkey, fr)}
    if not contested:
        return []
    root = tree.root_of(pkey)
    pending: dict[str, list[Candidate]] = {}
    for cand in sorted(
        candidates,
        key=lambda c: (not c.evicted, c.cluster_queue == preemptor_cq, c.priority, -c.admitted_at, c.uid),
    ):
        if not any(cand.usage.get(fr, 0) > 0 for fr in contested):
            continue
        if cand.cluster_queue == preemptor_cq:
            ok = _allowed(spec.within_cluster_queue, cand, priority, created)
        else:
            other = tree.cluster_queues.get(cand.cluster_queue)
            ok = (
                other is not None
                and tree.root_of(cq_key(cand.cluster_queue)) == root
                and _allowed(spec.reclaim_within_cohort, cand, priority, created)
                and any(
                    snapshot.usage[cq_key(cand.cluster_queue)].get(fr, 0)
                    > tree.nodes[cq_key(cand.cluster_queue)].subtree_quota.get(fr, 0)
                    for fr in contested
                )
            )
        if ok:
            pending.setdefault(cand.cluster_queue, []).append(cand)

    state = snapshot
    victims: list[Victim] = []
    preemptor_path = set(tree.path(pkey))

    def fits(s: TreeUsage, removed: Sequence[Candidate] | None = None) -> bool:
        if not all(v <= s.available(pkey, fr) for fr, v in request.items()):
            return False
        if also_fits is None:
            return True
        return also_fits([v.candidate for v in victims] if removed is None else removed)

    def drs(s: TreeUsage, key: str) -> DominantResourceShare:
        return dominant_resource_share(s, key, weights)

    def pick(pool: Mapping[str, list[Candidate]], sim: TreeUsage) -> str | None:
        """Descend from the root to the highest-DRS viable child; returns a ClusterQueue name."""

        def best(key: str) -> tuple[str, Candidate] | None:
            if key.startswith("cq/"):
                name = key[3:]
                if not pool.get(name):
                    return None
                if name != preemptor_cq and not sim.borrowing(key):
                    return None
                return name, pool[name][0]
            options: list[tuple[DominantResourceShare, bool, str, Candidate]] = []
            for child in tree.nodes[key].children:
                if child.startswith("cohort/") and child not in preemptor_path and not sim.borrowing(child):
                    continue
                found = best(child)
                if found is not None:
                    options.append((drs(sim, child), child.startswith("cohort/"), found[0], found[1]))
            if not options:
                return None
            winner = options[0]
            for opt in options[1:]:
                c = compare_drs(opt[0], winner[0])
                if c > 0 or (c == 0 and _tie_wins(opt, winner)):
                    winner = opt
            return winner[2], winner[3]

        found = best(root)
        return found[0] if found else None

    def sides(target: str) -> tuple[str, str]:
        ppath, tpath = tree.path(pkey), tree.path(cq_key(target))
        tset = set(tpath)
        lca_index = next(i for i, k in enumerate(ppath) if k in tset)
        lca = ppath[lca_index]
        return ppath[lca_index - 1], tpath[tpath.index(lca) - 1]

    def within_nominal_now(sim: TreeUsage) -> bool:
        quota = tree.nodes[pkey].subtree_quota
        return all(sim.usage[pkey].get(fr, 0) <= quota.get(fr, 0) for fr in contested)

    def take(cand: Candidate, reason: str) -> None:
        nonlocal state
        state = state.with_delta(cand.cluster_queue, cand.usage, -1)
        victims.append(Victim(cand, reason))

    retry: dict[str, list[Candidate]] = {}
    first = strategies[0] if strategies else LESS_THAN_OR_EQUAL_TO_FINAL_SHARE
    done = False
    while not done:
        sim = state.with_delta(preemptor_cq, request)
        target = pick(pending, sim)
        if target is None:
            break
        queue = pending[target]
        if target == preemptor_cq:
            take(queue.pop(0), IN_CLUSTER_QUEUE)
            done = fits(state)
            continue
        if within_nominal and within_nominal_now(sim):
            take(queue.pop(0), IN_COHORT_RECLAMATION)
            done = fits(state)
            continue
        p_side, t_side = sides(target)
        p_new = drs(sim, p_side)
        t_old = drs(sim, t_side)
        took = False
        while queue:
            cand = queue.pop(0)
            if math.isinf(p_new.share) and not math.isinf(t_old.share):
                retry.setdefault(target, []).append(cand)
                continue
            if first == LESS_THAN_INITIAL_SHARE:
                ok = compare_drs(p_new, t_old) < 0
            else:
                ok = compare_drs(p_new, drs(sim.with_delta(cand.cluster_queue, cand.usage, -1), t_side)) <= 0
            if ok:
                take(cand, IN_COHORT_FAIR_SHARING)
                took = True
                break
            retry.setdefault(target, []).append(cand)
        if took:
            done = fits(state)

    if not done and LESS_THAN_INITIAL_SHARE in strategies[1:]:
        while not done:
            sim = state.with_delta(preemptor_cq, request)
            target = pick(retry, sim)
            if target is None:
                break
            p_side, t_side = sides(target)
            if compare_drs(drs(sim, p_side), drs(sim, t_side)) < 0:
                take(retry[target][0], IN_COHORT_FAIR_SHARING)
                done = fits(state)
            retry[target] = []

    if not done:
        return []
    kept = list(victims)
    for victim in reversed(victims[:-1]):  # fill back: skip the last one taken
        restored = state.with_delta(victim.candidate.cluster_queue, victim.candidate.usage)
        if fits(restored, [v.candidate for v in kept if v is not victim]):
            state = restored
            kept.remove(victim)
    return kept


def _tie_wins(
    challenger: tuple[DominantResourceShare, bool, str, Candidate],
    holder: tuple[DominantResourceShare, bool, str, Candidate],
) -> bool:
    """Equal shares: a cohort beats a ClusterQueue; between queues the first candidate that sorts first."""
    if challenger[1] != holder[1]:
        return challenger[1]
    a, b = challenger[3], holder[3]
    return (not a.evicted, a.priority, -a.admitted_at, a.uid) < (not b.evicted, b.priority, -b.admitted_at, b.uid)
