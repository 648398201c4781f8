"""The test driver's side of the API server: a small synchronous client, kubeconfigs, pod manifests."""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import yaml

__all__ = ["SCHEDULER_NAME", "Api", "ApiStatus", "kubeconfig", "pod_manifest", "resource_path"]

SCHEDULER_NAME = "gpu-scheduler"  # the shipped profile's schedulerName


class Api:
    """A small synchronous API client for the test driver (JSON in, JSON out)."""

    def __init__(self, url: str, token: str, ca: Path | None) -> None:
        self.url = url
        self.http = httpx.Client(
            base_url=url,
            headers={"Authorization": f"Bearer {token}"},
            verify=ssl.create_default_context(cafile=str(ca)) if ca else False,
            timeout=30.0,
        )

    def close(self) -> None:
        self.http.close()

    def _check(self, response: httpx.Response, ok: tuple[int, ...] = (200, 201)) -> dict[str, Any]:
        if response.status_code not in ok:
            raise ApiStatus(
                response.status_code,
                f"{response.request.method} {response.request.url.path}: {response.status_code} {response.text[:500]}",
            )
        body: dict[str, Any] = response.json() if response.content else {}
        return body

    def get(self, path: str) -> dict[str, Any]:
        return self._check(self.http.get(path))

    def find(self, path: str) -> dict[str, Any] | None:
        response = self.http.get(path)
        return None if response.status_code == 404 else self._check(response)

    def items(self, path: str, **params: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.get_params(path, params).get("items") or []
        return items

    def get_params(self, path: str, params: Mapping[str, str]) -> dict[str, Any]:
        return self._check(self.http.get(path, params=dict(params)))

    def create(self, path: str, obj: Mapping[str, Any]) -> dict[str, Any]:
        return self._check(self.http.post(path, json=obj))

    def put(self, path: str, obj: Mapping[str, Any]) -> dict[str, Any]:
        return self._check(self.http.put(path, json=obj))

    def patch(self, path: str, patch: Any, kind: str = "merge") -> dict[str, Any]:
        headers = {"Content-Type": f"application/{kind}-patch+json"}
        return self._check(self.http.patch(path, json=patch, headers=headers))

    def delete(self, path: str, *, grace: int | None = 0) -> None:
        params = {} if grace is None else {"gracePeriodSeconds": str(grace)}
        self._check(self.http.delete(path, params=params), ok=(200, 202, 404))

    def apply_manifests(self, path: Path, namespace: str = "kube-system") -> None:
        """Create every object of a multi-document YAML file (RBAC and namespaced core objects)."""
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                self.create(resource_path(doc, doc["metadata"].get("namespace", namespace)), doc)


class ApiStatus(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


_PLURALS = {
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
}


def resource_path(obj: Mapping[str, Any], namespace: str) -> str:
    prefix, plural, namespaced = _PLURALS[obj["kind"]]
    return f"{prefix}/namespaces/{namespace}/{plural}" if namespaced else f"{prefix}/{plural}"


def kubeconfig(
    server: str, user: Mapping[str, Any], *, ca: Path | None = None, insecure: bool = False
) -> dict[str, Any]:
    cluster: dict[str, Any] = {"server": server}
    if insecure:
        cluster["insecure-skip-tls-verify"] = True
    elif ca is not None:
        cluster["certificate-authority"] = str(ca)
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": cluster}],
        "users": [{"name": "e2e", "user": dict(user)}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "e2e"}}],
        "current-context": "e2e",
    }


def pod_manifest(
    name: str,
    *,
    gpus: int = 0,
    cpu: str = "1",
    memory: str = "1Gi",
    priority_class: str | None = None,
    node_selector: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    scheduler: str = SCHEDULER_NAME,
    claims: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A pod for the gpu-scheduler profile: one container with requests (= limits for GPUs)."""
    requests: dict[str, str] = {"cpu": cpu, "memory": memory}
    limits: dict[str, str] = {}
    if gpus:
        requests["nvidia.com/gpu"] = limits["nvidia.com/gpu"] = str(gpus)
    container: dict[str, Any] = {
        "name": "main",
        "image": "registry.k8s.io/pause:3.10",
        "resources": {"requests": requests, **({"limits": limits} if limits else {})},
    }
    spec: dict[str, Any] = {"schedulerName": scheduler, "containers": [container], "terminationGracePeriodSeconds": 0}
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
    if claims:
        spec["resourceClaims"] = claims
        container["resources"]["claims"] = [{"name": c["name"]} for c in claims]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": dict(labels or {})}, "spec": spec}
