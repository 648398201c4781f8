"""Soft preferences: the pod's own preferred terms and ScheduleAnyway spreading, or a controller whose
pods kube-scheduler's default spreading covers; required terms and DoNotSchedule constraints are
filters, not preferences."""

from __future__ import annotations

from typing import Any

import pytest

from app.cluster.objects import pod_from_obj
from k8s_semantics.preferences import soft_preferences
from tests.conftest import pod_obj

_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


@pytest.mark.parametrize(
    ("spec", "owner", "expected"),
    [
        ({}, "", False),
        ({}, "Job", False),
        ({}, "ReplicaSet", True),
        ({}, "StatefulSet", True),
        ({}, "ReplicationController", True),
        ({"affinity": {"nodeAffinity": {_PREFERRED: [{"weight": 1, "preference": {}}]}}}, "", True),
        ({"affinity": {"podAffinity": {_PREFERRED: [{"weight": 1, "podAffinityTerm": {}}]}}}, "", True),
        ({"affinity": {"podAntiAffinity": {_PREFERRED: [{"weight": 1, "podAffinityTerm": {}}]}}}, "", True),
        ({"affinity": {"nodeAffinity": {_REQUIRED: {"nodeSelectorTerms": []}}}}, "", False),
        ({"affinity": {"podAntiAffinity": {_REQUIRED: [{}], _PREFERRED: []}}}, "", False),
        ({"topologySpreadConstraints": [{"whenUnsatisfiable": "ScheduleAnyway"}]}, "", True),
        ({"topologySpreadConstraints": [{"whenUnsatisfiable": "DoNotSchedule"}]}, "", False),
        # constraints of its own replace the cluster's defaults, which a ReplicaSet's pod would get
        ({"topologySpreadConstraints": [{"whenUnsatisfiable": "DoNotSchedule"}]}, "ReplicaSet", False),
        ({"affinity": "malformed", "topologySpreadConstraints": ["malformed"]}, "", False),
    ],
)
def test_soft_preferences(spec: dict[str, Any], owner: str, expected: bool) -> None:
    assert soft_preferences(spec, owner) is expected


def test_pods_carry_their_soft_preferences_and_controller_kind() -> None:
    plain = pod_obj("p")
    assert not pod_from_obj(plain).soft_preferences
    owned = pod_obj("q")
    owned["metadata"]["ownerReferences"] = [
        {"kind": "Node", "name": "n", "uid": "1"},  # not the controller
        {"kind": "ReplicaSet", "name": "rs", "uid": "2", "controller": True},
    ]
    assert pod_from_obj(owned).soft_preferences
