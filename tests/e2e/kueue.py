"""Minimal stand-ins for Kueue's CRDs (schemaless, status subresource) so that the extender's
``queues.watchKueue`` reads real API objects; no Kueue controller runs."""

from __future__ import annotations

from typing import Any

from tests.e2e.api import ApiStatus
from tests.e2e.process import wait_for

KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
KINDS = (
    ("ResourceFlavor", "resourceflavors", "Cluster"),
    ("Cohort", "cohorts", "Cluster"),
    ("ClusterQueue", "clusterqueues", "Cluster"),
    ("LocalQueue", "localqueues", "Namespaced"),
    ("Workload", "workloads", "Namespaced"),
)


def crd(kind: str, plural: str, scope: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.kueue.x-k8s.io"},
        "spec": {
            "group": "kueue.x-k8s.io",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
            "scope": scope,
            "versions": [
                {
                    "name": "v1beta2",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                    "subresources": {"status": {}},
                }
            ],
        },
    }


def install_crds(api: Any) -> None:
    """Create the CRDs (once per control plane; existing ones are kept) and wait until they are served."""
    for kind, plural, scope in KINDS:
        try:
            api.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd(kind, plural, scope))
        except ApiStatus as exc:
            if exc.status != 409:
                raise
    for _kind, plural, _scope in KINDS:
        wait_for(f"{plural} served", lambda plural=plural: api.find(f"{KUEUE}/{plural}") is not None)
