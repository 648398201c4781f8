"""The DRA participant's fast path: a pod with one simple claim decided on every candidate node at
once from the per-node free capacity (``app.cluster.dra_fast``), instead of one allocator search per
node. The nodes it passes get no proposal: /bind allocates on the chosen one (one search)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from allocator import AllocationError, ResourceClaim
from allocator.requests import claim_requests
from app.cluster.dra import DraState
from app.cluster.dra_fast import DeviceTable, Selection, decide, select, select_at, simple_request
from scoring.framework import Code, PodInfo, Status
from scoring.table import Batch

__all__ = ["FastPath", "FastVerdicts"]


@dataclass(frozen=True, slots=True)
class FastVerdicts:
    """The fast path's answer for a list of node names (``FastPath.verdicts``)."""

    decided: npt.NDArray[np.bool_]  # per name: decided without the search (else: the full allocator)
    passes: npt.NDArray[np.bool_]
    reason: npt.NDArray[np.intp]  # per name: index into ``reasons`` (read where decided and failing)
    reasons: tuple[Status, ...]


class FastPath:
    def __init__(self, state: DraState) -> None:
        self.state = state
        # the last candidate list (by identity: kube-scheduler sends the same one again) as table nodes
        self._selection: tuple[Sequence[str], DeviceTable, Selection] | None = None
        self._statuses: tuple[DeviceTable, tuple[Status, ...]] | None = None

    def verdicts(
        self, pod: PodInfo, claim: ResourceClaim, names: Sequence[str], batch: Batch | None = None
    ) -> FastVerdicts | None:
        """``claim`` (the pod's only claim to allocate) on every node of ``names``; None when it is not
        simple (``app.cluster.dra_fast.simple_request``) or the state needs the full search.
        ``batch``: the candidates' node-table rows, read instead of the names when all are known."""
        state = self.state
        own = state.inflight.get(pod.uid)
        # A bind under way: only the search leaves its own devices out. A gang member's hold is left
        # in: its planned node, where the hold is, is passed by the gang participant all the same.
        if state.taint_rules or (own is not None and not own.held):
            return None
        if claim.constraints or len(claim.requests) != 1:
            return None
        try:
            (alternatives,) = claim_requests(claim, state.classes, state.selectors)
        except AllocationError:
            return None  # the full path raises it for the pod (or answers per node)
        if len(alternatives) != 1 or not simple_request(alternatives[0]):
            return None
        alt = alternatives[0]
        table = state.fast.table(alt.device_class, state.node_refs, state.slices, state.selectors, state.holders)
        cached = self._selection
        if cached is not None and cached[0] is names and cached[1] is table:
            selection = cached[2]
        elif batch is not None and len(batch) == len(names) and batch.all_known:  # known nodes: one gather
            selection = select_at(table, table.by_row.by_row(batch.table, table.nodes)[batch.rows])
            self._selection = (names, table, selection)
        else:
            selection = select(table, names)
            self._selection = (names, table, selection)
        decision = decide(table, alt, selection, state.selectors)
        if decision is None:
            return None
        if self._statuses is None or self._statuses[0] is not table:
            self._statuses = (
                table,
                tuple(Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, reason) for reason in table.reasons),
            )
        return FastVerdicts(*decision, self._statuses[1])
