"""The shipped extender with all of /filter but its choice among the nodes that pass, for
``bench.throughput``'s ``extender-unscored`` phase (run by the bench).

The same process and the same /filter as ``kube-gpu-extender serve``: the body decoded, the
candidates' rows gathered, every participant's verdicts, the failure reasons counted, the decision
recorded. Only where ``filterReturns: BestScored`` scores the nodes that pass and keeps the best, it
keeps the first that passes: one node, so kube-scheduler neither scores nor calls /prioritize, as
behind the null extenders. Beside ``extender`` in one run it bounds what making the scoring cheaper
can reach: the shipped extender cannot be faster than this phase.

    python -m bench.extender_unscored serve --config extender.yaml --kubeconfig extender.kubeconfig
"""

from __future__ import annotations

import sys

from app.cli import main
from app.http import wire
from app.pipeline.fit import ResourceFit
from scoring.framework import PodInfo
from scoring.table import Batch, BoolArray


def first_passing(
    fit: ResourceFit, pod: PodInfo, candidates: wire.Candidates, batch: Batch | None, passing: BoolArray | None = None
) -> list[str]:
    """``ResourceFit.best_scored`` without scoring: the first candidate that passed (all did when
    ``passing`` is None)."""
    if passing is None:
        return list(candidates.names[:1])
    if not passing.any():
        return []
    return [candidates.names[int(passing.argmax())]]


if __name__ == "__main__":
    ResourceFit.best_scored = first_passing  # type: ignore[method-assign,assignment]
    sys.exit(main())
