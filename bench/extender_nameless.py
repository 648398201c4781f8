"""The shipped extender whose /filter never reads the candidates' names, for ``bench.throughput``'s
``extender-nameless`` phase (run by the bench).

The same process and the same /filter as ``kube-gpu-extender serve``, except that the names
kube-scheduler sends are neither decoded nor looked up in the node table: /filter judges and scores
every node the cache holds, listed once per node-table version (so its rows are recalled, not looked
up). Beside ``extender`` in one run it shows the extender's CPU without the names but with every
node of the cache judged, those kube-scheduler left out too. It is no bound on pods/s: kube-scheduler
counts a pod on its node before it calls /bind, the extender's cache once /bind runs, so in between
an answer from the cache alone can name a node kube-scheduler no longer lists. kube-scheduler then
fails the cycle ("claims a filtered node ... which is not found in the input node list") and retries
the pod (45 of 2,000 pods in one bench.throughput run, 2026-11-30). The shipped /filter answers among
the names it is sent, so it never does.

    python -m bench.extender_nameless serve --config extender.yaml --kubeconfig extender.kubeconfig
"""

from __future__ import annotations

import sys

from app.cli import main
from app.http import go_layout, wire
from app.pipeline.nodes import CandidateNodes
from scoring.framework import PodInfo
from scoring.table import Batch, NodeTable

_NO_NAMES: list[str] = []
_every: list[tuple[int, list[str]]] = []  # (node-table version, every node's name)


def no_names(raw: object) -> list[str]:
    """``go_layout.node_names`` without decoding: the request's names are not read."""
    return _NO_NAMES


def every_node(table: NodeTable) -> list[str]:
    """Every node the table holds, the same list object while its names are unchanged."""
    if not _every or _every[0][0] != table.version:
        _every[:] = [(table.version, list(table.index))]
    return _every[0][1]


def gather_every_node(
    self: CandidateNodes, pod: PodInfo, args: wire.ExtenderArgs
) -> tuple[wire.Candidates, Batch | None]:
    """``CandidateNodes.gather`` over every node of the cache instead of the request's names."""
    names = every_node(self.cache.table)
    if not self._exact(pod):
        return wire.Candidates(names), None
    return wire.Candidates(names), self._batch(pod, names)


if __name__ == "__main__":
    go_layout.node_names = no_names
    CandidateNodes.gather = gather_every_node  # type: ignore[method-assign]
    sys.exit(main())
