"""The shipped extender with a null /filter, for ``bench.throughput``'s ``extender-null-filter`` phase
(run by the bench).

The same process as ``kube-gpu-extender serve``: its HTTP server, watches, /bind (the pipeline's
admit and reserve, the Binding POST, the bookkeeping), metrics and logs; only /filter skips the
scoring and answers the first candidate, as the null extenders do. Beside ``extender-null-raw`` in
one run it measures what the extender's machinery costs kube-scheduler; beside ``extender``, what
its /filter (and the /prioritize calls that follow) cost.

    python -m bench.extender_null_filter serve --config extender.yaml --kubeconfig extender.kubeconfig
"""

from __future__ import annotations

import sys
from typing import Any

from app.cli import main
from app.http import wire
from app.service import ExtenderService


def first_candidate(service: ExtenderService, body: bytes, *, reasons: bool = True) -> tuple[dict[str, Any], bool]:
    """``ExtenderService._filter`` without scoring: the pod is parsed and remembered for /bind as the
    real filter does, and the answer passes the first candidate."""
    try:
        args = wire.decode_extender_args(body)
        pod = service.pod_info(args.pod_raw)
    except wire.WireError as exc:
        return wire.filter_result(error=f"invalid filter request: {exc}"), False
    service.bindless.filtered(pod)
    candidates = wire.Candidates.of(args)
    return candidates.result(candidates.names[:1]), False


if __name__ == "__main__":
    ExtenderService._filter = first_candidate  # type: ignore[method-assign,assignment]
    sys.exit(main())
