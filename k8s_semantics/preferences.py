"""Whether a pod has soft scheduling preferences that kube-scheduler's score plugins act on.

Among nodes the extender scores equally, kube-scheduler's own score plugins still rank by a pod's
preferences: NodeAffinity by ``preferredDuringSchedulingIgnoredDuringExecution`` node terms,
InterPodAffinity by preferred pod (anti-)affinity terms, PodTopologySpread by constraints with
``whenUnsatisfiable: ScheduleAnyway`` and, for a pod without constraints of its own, by the
cluster's default constraints (``defaultingType: System``: ScheduleAnyway spreading over hostnames
and zones), which apply to pods a Service, ReplicaSet, StatefulSet or ReplicationController
selects. This module sees the pod alone: it recognises the pod's own terms and the controllers of
its ``ownerReferences``, not a Service that selects it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["DEFAULT_SPREAD_OWNERS", "soft_preferences"]

# Controllers whose pods kube-scheduler's system default topology spreading applies to.
DEFAULT_SPREAD_OWNERS = frozenset({"ReplicaSet", "StatefulSet", "ReplicationController"})

_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def soft_preferences(spec: Mapping[str, Any], owner_kind: str = "") -> bool:
    """Whether kube-scheduler's score plugins could rank equally scored nodes for this pod
    (``spec``: the Pod's spec; ``owner_kind``: its controller's kind, "" for none)."""
    affinity = spec.get("affinity")
    if affinity is not None and isinstance(affinity, Mapping):
        for kind in ("nodeAffinity", "podAffinity", "podAntiAffinity"):
            terms = affinity.get(kind)
            if isinstance(terms, Mapping) and terms.get(_PREFERRED):
                return True
    constraints = spec.get("topologySpreadConstraints")
    if isinstance(constraints, list) and constraints:
        return any(
            isinstance(constraint, Mapping) and constraint.get("whenUnsatisfiable") == "ScheduleAnyway"
            for constraint in constraints
        )
    return owner_kind in DEFAULT_SPREAD_OWNERS
