"""Resource fit: the scheduling profile (FitPlus, ScarceResourceAvoidance, ManagedResourcesFit and
the rest) over the node table, and the assumption that holds a node's resources during a bind.

It is also the pipeline's scorer: /prioritize and ``filterReturns: BestScored`` rank nodes by the
profile's weighted node score. Queues add their FlavorFairness plugin to the profile rather than a
scoring stage of their own, so its weight combines with the others as in kube-scheduler.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from app.cluster.cache import ClusterCache
from app.http.wire import Candidates
from app.pipeline.claim_devices import ClaimDevices
from app.pipeline.framework import BindCycle, FilterCycle, Participant, Refusal
from app.pipeline.nodes import CandidateNodes
from app.pipeline.random_ties import RandomTies
from scoring import priority_scale
from scoring.best_scored import best_scored_batch
from scoring.framework import MAX_EXTENDER_PRIORITY, NodeInfo, PodInfo, Status
from scoring.managed_fit import ManagedResourcesFit
from scoring.priority_scale import PriorityScale
from scoring.profile import Profile
from scoring.table import Batch, BoolArray
from scoring.tie_break import (
    MostAllocatedKeys,
    NameRanks,
    TieBreak,
    TiePick,
    asks_for_any,
    lowest_name_batch,
    most_allocated,
    most_allocated_batch,
)

__all__ = ["ResourceFit"]


class ResourceFit(Participant):
    name = "resources"

    def __init__(
        self,
        cache: ClusterCache,
        profile: Profile,
        fit: ManagedResourcesFit,
        scale: PriorityScale,
        tie_break: TieBreak | None = None,
        tie_pick: TiePick | None = None,
    ) -> None:
        self.cache = cache
        self.nodes = CandidateNodes(cache)
        self.profile = profile
        self.fit = fit
        self.scale = scale  # priorityScale: the profile's 0..100 node scores to /prioritize's 0..10
        self.tie_break = tie_break  # which of the best nodes keep the best priority (None: all)
        self.random_ties = RandomTies(cache, tie_pick)  # tieBreak.random's pick and its picks in flight
        self.name_ranks = NameRanks()  # tieBreak.lowestName over known nodes
        self.most_allocated_keys = MostAllocatedKeys()  # tieBreak.mostAllocated's keys, kept per row
        self.claim_devices = ClaimDevices(cache.dra)  # what a pod's claims ask of extended resources

    # ------------------------------------------------------------------ filter
    def verdict(self, pod: PodInfo, name: str, allocatable: Mapping[str, Any] | None) -> tuple[NodeInfo | None, Status]:
        """One node through the scalar profile (the definition the batch path must match)."""
        node = self.nodes.node(pod, name, allocatable)
        if isinstance(node, Status):
            return None, node
        return node, self.profile.filter(pod, node)

    def filter(self, cycle: FilterCycle) -> None:
        pod, names, batch, candidates = cycle.pod, cycle.names, cycle.batch, cycle.candidates
        if batch is None:
            for position in cycle.passing():
                name = names[position]
                cycle.verdicts.set(position, self.verdict(pod, name, candidates.allocatable(name))[1])
            return
        verdicts = self.profile.filter_batch(pod, batch)
        for position in (~batch.known).nonzero()[0].tolist():
            name = names[position]
            verdicts.set(position, self.verdict(pod, name, candidates.allocatable(name))[1])
        cycle.merge(verdicts)

    # ------------------------------------------------------------------ score
    def node_scores(
        self,
        pod: PodInfo,
        candidates: Candidates,
        batch: Batch | None,
        plugin: str | None,
        only: BoolArray | None = None,
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
        """The profile's 0..100 score per candidate, and whether the node could be scored at all
        (``pod`` with its claims' devices, ``with_claim_devices``); a node outside ``only`` may be
        left unscored where it would be scored one by one."""
        names = candidates.names
        scores = None if batch is None else self.profile.node_scores_batch(pod, batch, plugin)
        if scores is None or batch is None:
            scores = np.zeros(len(names), dtype=np.int64)
            known = np.zeros(len(names), dtype=np.bool_)
        else:
            known = batch.known.copy()
        for position in (~known if only is None else ~known & only).nonzero()[0].tolist():
            name = names[position]
            node = self.nodes.node(pod, name, candidates.allocatable(name))
            if not isinstance(node, Status):
                scores[position], known[position] = self.profile.node_score(pod, node, plugin), True
        return scores, known

    def break_ties(self, pod: PodInfo, candidates: Candidates, batch: Batch | None, best: BoolArray) -> BoolArray:
        """Of the ``best`` candidates, those that keep the best priority after ``tieBreak`` (all of them
        without one, or for a pod that asks for none of its resources; ``pod`` with its claims'
        devices)."""
        if self.tie_break is None or np.count_nonzero(best) < 2:
            return best
        won = self._most_allocated(pod, candidates, batch, best)
        if self.tie_break.lowest_name and np.count_nonzero(won) > 1:
            if batch is not None and batch.all_known:
                won = self.name_ranks.lowest_name_batch(won, batch)
            else:
                won = lowest_name_batch(won, candidates.names)
        elif self.tie_break.random and np.count_nonzero(won) > 1:
            rows = batch.rows if batch is not None and batch.all_known else None
            won = self.random_ties.keep_one(pod, candidates.names, won, rows)
        return won

    def _most_allocated(self, pod: PodInfo, candidates: Candidates, batch: Batch | None, best: BoolArray) -> BoolArray:
        """Of the ``best`` candidates, those ``tieBreak.mostAllocated`` keeps."""
        assert self.tie_break is not None
        resources = self.tie_break.most_allocated
        if not resources or not asks_for_any(pod, resources):
            return best
        positions = best.nonzero()[0]
        keys = None
        if batch is not None and batch.all_known:
            keys = self.most_allocated_keys.at(pod, batch, resources, positions)
        elif batch is not None and batch.known[positions].all():
            keys = most_allocated_batch(pod, batch, resources, at=positions)
        if keys is None:
            scalar = []
            for position in positions.tolist():
                name = candidates.names[position]
                node = self.nodes.node(pod, name, candidates.allocatable(name))
                key = None if isinstance(node, Status) else most_allocated(pod, node, resources)
                scalar.append(-1 if key is None else key)
            keys = np.array(scalar, dtype=np.int64)
        won = np.zeros(len(best), dtype=np.bool_)
        won[positions[keys == keys.max()]] = True
        return won

    def priorities(
        self, pod: PodInfo, candidates: Candidates, batch: Batch | None, plugin: str | None
    ) -> npt.NDArray[np.int64]:
        """0..10 per candidate: the node scores through the configured priority scale; of the best
        nodes, those ``tieBreak`` leaves out get 9 (not for one plugin's scores alone)."""
        pod = self.claim_devices.with_claim_devices(pod)  # once for the scores and the tie-break
        scores, known = self.node_scores(pod, candidates, batch, plugin)
        priorities = priority_scale.scale_batch(self.scale, scores, known)
        if plugin is None and self.tie_break is not None:
            best = priorities == MAX_EXTENDER_PRIORITY
            priorities[best & ~self.break_ties(pod, candidates, batch, best)] = MAX_EXTENDER_PRIORITY - 1
        return priorities

    def best_scored(
        self, pod: PodInfo, candidates: Candidates, batch: Batch | None, passing: BoolArray | None = None
    ) -> list[str]:
        """``filterReturns: BestScored``: the candidates the profile scores highest, after ``tieBreak``
        (prioritize then asks about these, so the table remembers their rows). ``passing``: the
        candidates that passed the filter, the only ones that compete (all when None): scoring the
        whole batch reads the same rows and spares building the list and batch of those that pass."""
        pod = self.claim_devices.with_claim_devices(pod)  # once for the scores and the tie-break
        scores, known = self.node_scores(pod, candidates, batch, None, passing)
        top = best_scored_batch(scores, known if passing is None else known & passing)
        if passing is not None:
            top &= passing  # none of them scored: all that passed, and only those
        keep = self.break_ties(pod, candidates, batch, top)
        best = list(map(candidates.names.__getitem__, keep.nonzero()[0].tolist()))  # few of many
        if batch is not None and batch.all_known:
            self.cache.table.remember(best, batch.rows[keep])
        return best

    # ------------------------------------------------------------------ preempt
    def check_victims(self, pod: PodInfo, node: NodeInfo, victims: Sequence[str]) -> str:
        """Whether, without its victims (and the preemptor's own assumption there), the pod fits the
        managed resources."""
        requested = dict(node.requested)
        for uid in {*victims, pod.uid}:
            counted = self.cache.counted(uid)
            if counted is None or counted[0] != node.name:
                continue  # not counted on this node: nothing to give back
            for resource, amount in counted[1].resources.requests.items():
                requested[resource] = requested.get(resource, 0) - amount
        status = self.fit.fits(pod, node.allocatable, requested, node.dra_allocatable)
        return "" if status.passed else status.reason

    # ------------------------------------------------------------------ bind
    def reserve(self, cycle: BindCycle) -> Refusal | None:
        """Assume the pod on the node, re-checking the fit atomically (no await in between)."""
        pod = cycle.pod
        status = self.cache.assume(pod, cycle.node, check=lambda node: self.fit.filter(pod, node))
        if status is None:
            return None
        return Refusal("no-fit", f"node {cycle.node} no longer fits pod {cycle.key}: {status.reason}")

    async def unreserve(self, cycle: BindCycle) -> None:
        self.cache.forget(cycle.pod.uid)

    # ------------------------------------------------------------------ explain
    def explain_nodes(self, pod: PodInfo, candidates: Candidates) -> list[dict[str, Any]]:
        """Per candidate: the profile's verdict, each plugin's raw 0..100 score, the 0..10 score
        /prioritize would give among the nodes that pass (null for the others), and the managed
        resources' numbers. With ``tieBreak.random`` every node left at 10 is one a request may pick."""
        pod = self.claim_devices.with_claim_devices(pod)
        verdicts = [(name, *self.verdict(pod, name, candidates.allocatable(name))) for name in candidates.names]
        scores = {
            name: self.profile.score(pod, node) for name, node, status in verdicts if node is not None and status.passed
        }
        ranked = list(scores)
        scaled = priority_scale.scale(self.scale, [scores[name].node_score for name in ranked])
        keys = self._explain_keys(pod, verdicts)
        if keys is not None:
            scaled = priority_scale.break_ties(scaled, [keys[name] for name in ranked])
        if self.tie_break is not None and self.tie_break.lowest_name:
            scaled = priority_scale.break_ties_by_name(scaled, ranked)
        priorities = dict(zip(ranked, scaled, strict=True))
        entries = []
        for name, node, status in verdicts:
            entry: dict[str, Any] = {
                "name": name,
                "filter": {"passed": status.passed, "reason": status.reason, "code": status.code.value},
            }
            if node is not None:
                score = scores.get(name) or self.profile.score(pod, node)
                entry.update(
                    scores=dict(score.plugin_scores),
                    satOut=list(score.sat_out),
                    nodeScore=score.node_score,
                    score=priorities.get(name),
                    **({} if keys is None else {"tieKey": keys[name]}),
                    managed={
                        r: {
                            "allocatable": node.allocatable.get(r, 0),
                            "requested": node.requested.get(r, 0),
                            "pod": pod.resources.requests.get(r, 0),
                        }
                        for r in self.fit.resources
                    },
                )
            entries.append(entry)
        return entries

    def _explain_keys(
        self, pod: PodInfo, verdicts: Sequence[tuple[str, NodeInfo | None, Status]]
    ) -> dict[str, int] | None:
        """``tieBreak``'s key per node that could be read; None without a tie-break for this pod."""
        if self.tie_break is None:
            return None
        keys = {}
        for name, node, _ in verdicts:
            if node is not None:
                key = most_allocated(pod, node, self.tie_break.most_allocated)
                if key is None:
                    return None
                keys[name] = key
        return keys
