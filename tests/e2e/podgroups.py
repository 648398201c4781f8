"""PodGroups for the end-to-end suite: the scheduler-plugins coscheduling CRD (a schemaless stand-in,
as tests/e2e/kueue.py does for Kueue) and manifests of both PodGroup APIs and their members."""

from __future__ import annotations

from typing import Any

from tests.e2e.api import ApiStatus, pod_manifest
from tests.e2e.process import wait_for

COSCHEDULING = "/apis/scheduling.x-k8s.io/v1alpha1"
PODGROUPS = "/apis/scheduling.k8s.io/v1alpha2"
COSCHEDULING_LABEL = "scheduling.x-k8s.io/pod-group"

COSCHEDULING_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "podgroups.scheduling.x-k8s.io"},
    "spec": {
        "group": "scheduling.x-k8s.io",
        "names": {"kind": "PodGroup", "plural": "podgroups", "singular": "podgroup", "listKind": "PodGroupList"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1alpha1",
                "served": True,
                "storage": True,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                "subresources": {"status": {}},
            }
        ],
    },
}


def install_coscheduling_crd(api: Any) -> None:
    """The coscheduling PodGroup CRD, served before the extender starts (its watch lists it at once)."""
    try:
        api.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", COSCHEDULING_CRD)
    except ApiStatus as exc:
        if exc.status != 409:
            raise
    wait_for("coscheduling podgroups served", lambda: api.find(f"{COSCHEDULING}/podgroups") is not None)


def coscheduling_group(name: str, min_member: int, timeout: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"minMember": min_member}
    if timeout is not None:
        spec["scheduleTimeoutSeconds"] = timeout
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "metadata": {"name": name}, "spec": spec}


def podgroup(name: str, min_count: int, topology: str = "") -> dict[str, Any]:
    """A Kubernetes 1.36 PodGroup with the gang policy (and a required topology key)."""
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    if topology:
        spec["schedulingConstraints"] = {"topology": [{"key": topology}]}
    return {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup", "metadata": {"name": name}, "spec": spec}


def coscheduling_member(name: str, group: str, **kwargs: Any) -> dict[str, Any]:
    pod = pod_manifest(name, **kwargs)
    pod["metadata"]["labels"][COSCHEDULING_LABEL] = group
    return pod


def podgroup_member(name: str, group: str, **kwargs: Any) -> dict[str, Any]:
    pod = pod_manifest(name, **kwargs)
    pod["spec"]["schedulingGroup"] = {"podGroupName": group}
    return pod
