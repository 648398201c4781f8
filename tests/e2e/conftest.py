"""The end-to-end suite: one real control plane per session (etcd, kube-apiserver, the claim
controller, kube-scheduler with deploy/kube-scheduler-config.yaml, the extender as a process under
deploy/rbac.yaml's ServiceAccount). Each test works in its own namespace on its own nodes (a label
its pods select), so tests do not see each other's capacity.

Without the binaries the tests are skipped with a message saying how to get them; with
``KUBE_E2E_REQUIRED=1`` (set by .ci/run) they fail instead.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.api import pod_manifest
from tests.e2e.binaries import Missing, locate_binaries
from tests.e2e.controlplane import ControlPlane, Extender, extender_config
from tests.e2e.kueue import install_crds
from tests.e2e.podgroups import install_coscheduling_crd
from tests.e2e.process import stop_children_on_sigterm, wait_for

GPU = "nvidia.com/gpu"
GROUP_LABEL = "e2e.kube-gpu-extender.io/group"
PRIORITY_CLASSES = {"e2e-low": 100, "e2e-high": 10_000}
_groups = itertools.count(1)


@dataclass
class Cluster:
    plane: ControlPlane
    extender: Extender

    def restart_extender(self, config: dict[str, Any] | None = None) -> Extender:
        """The extender stopped and started again on the same port (kube-scheduler's config points there)."""
        self.extender = self.plane.start_extender(config or extender_config(), port=self.extender.port)
        return self.extender


@pytest.fixture(scope="session")
def binaries() -> dict[str, Path]:
    try:
        return locate_binaries()
    except Missing as exc:
        if os.environ.get("KUBE_E2E_REQUIRED"):
            pytest.fail(f"KUBE_E2E_REQUIRED is set and {exc}", pytrace=False)
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def cluster(binaries: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    stop_children_on_sigterm()  # pytest stopped by its PID tears this fixture down, control plane included
    plane = ControlPlane(tmp_path_factory.mktemp("controlplane"), binaries)
    try:
        plane.start()
        for name, value in PRIORITY_CLASSES.items():
            plane.admin.create(
                "/apis/scheduling.k8s.io/v1/priorityclasses",
                {
                    "apiVersion": "scheduling.k8s.io/v1",
                    "kind": "PriorityClass",
                    "metadata": {"name": name},
                    "value": value,
                },
            )
        plane.start_controller_manager()
        install_coscheduling_crd(plane.admin)  # scheduler-plugins' PodGroup, for the gang tests
        extender = plane.start_extender(extender_config())
        plane.start_scheduler(extender.port)
        yield Cluster(plane, extender)
    finally:
        plane.stop()


@dataclass
class Group:
    """One test's namespace and nodes; its pods select its nodes."""

    cluster: Cluster
    name: str
    nodes: list[str] = field(default_factory=list)

    @property
    def api(self) -> Any:
        return self.cluster.plane.admin

    @property
    def selector(self) -> dict[str, str]:
        return {GROUP_LABEL: self.name}

    def node(
        self,
        suffix: str,
        *,
        gpus: int | None = 8,
        cpu: str = "64",
        memory: str = "512Gi",
        labels: dict[str, str] | None = None,
    ) -> str:
        name = f"{self.name}-{suffix}"
        allocatable = {"cpu": cpu, "memory": memory, "pods": "110"}
        if gpus is not None:
            allocatable[GPU] = str(gpus)
        self.cluster.plane.add_node(name, allocatable, {**self.selector, **(labels or {})})
        self.nodes.append(name)
        # kube-scheduler may see the node before the extender's watch delivers it (after an API-server
        # restart the watches reconnect with backoff): start a test once both know its capacity.
        wait_for(f"node {name} in the extender's cache", lambda: self._extender_knows(name, gpus or 0))
        return name

    def _extender_knows(self, name: str, gpus: int) -> bool:
        answer = self.cluster.extender.get(f"/debug?node={name}")  # 404 until the watch delivers it
        allocatable = (answer.json().get("allocatable") or {}) if answer.status_code == 200 else {}
        return bool(allocatable.get("cpu")) and allocatable.get(GPU, 0) == gpus

    def pod(self, name: str, **kwargs: Any) -> dict[str, Any]:
        kwargs.setdefault("node_selector", self.selector)
        created: dict[str, Any] = self.api.create(f"/api/v1/namespaces/{self.name}/pods", pod_manifest(name, **kwargs))
        return created

    def get_pod(self, name: str) -> dict[str, Any] | None:
        pod: dict[str, Any] | None = self.api.find(f"/api/v1/namespaces/{self.name}/pods/{name}")
        return pod

    def delete_pod(self, name: str) -> None:
        self.api.delete(f"/api/v1/namespaces/{self.name}/pods/{name}")

    def pods(self) -> list[dict[str, Any]]:
        pods: list[dict[str, Any]] = self.api.items(f"/api/v1/namespaces/{self.name}/pods")
        return pods

    def wait_bound(self, *names: str, timeout: float = 30.0) -> dict[str, str]:
        """Wait until every named pod is bound; their nodes."""

        def bound() -> dict[str, str] | None:
            nodes = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in self.pods()}
            return {n: nodes[n] for n in names} if all(nodes.get(n) for n in names) else None

        return wait_for(f"pods {', '.join(names)} bound", bound, timeout)

    def wait_some_bound(self, names: Sequence[str], count: int, timeout: float = 30.0) -> list[str]:
        """Wait until ``count`` of ``names`` are bound (which ones depends on the order binds arrive in)."""

        def bound() -> list[str] | None:
            nodes = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in self.pods()}
            done = [n for n in names if nodes.get(n)]
            return done if len(done) >= count else None

        done = wait_for(f"{count} of {', '.join(names)} bound", bound, timeout)
        assert len(done) == count, f"more than {count} bound: {done}"
        return done

    def wait_unschedulable(self, name: str, timeout: float = 30.0) -> str:
        """Wait until kube-scheduler marks the pod unschedulable; the condition's message."""

        def condition() -> str | None:
            pod = self.get_pod(name) or {}
            for c in (pod.get("status") or {}).get("conditions") or []:
                if c["type"] == "PodScheduled" and c["status"] == "False" and c.get("reason") == "Unschedulable":
                    return str(c.get("message", ""))
            return None

        return wait_for(f"pod {name} unschedulable", condition, timeout)

    def placement(self) -> dict[str, list[str]]:
        """Bound pods of this group per node."""
        by_node: dict[str, list[str]] = {n: [] for n in self.nodes}
        for pod in self.pods():
            node = pod["spec"].get("nodeName")
            if node:
                by_node.setdefault(node, []).append(pod["metadata"]["name"])
        return by_node

    def gpus_per_node(self) -> dict[str, int]:
        used = dict.fromkeys(self.nodes, 0)
        for pod in self.pods():
            node = pod["spec"].get("nodeName")
            if node:
                for c in pod["spec"]["containers"]:
                    used[node] = used.get(node, 0) + int((c["resources"].get("requests") or {}).get(GPU, 0))
        return used

    def cleanup(self) -> None:
        for pod in self.pods():
            self.delete_pod(pod["metadata"]["name"])
        self.api.delete(f"/api/v1/namespaces/{self.name}", grace=None)
        for node in self.nodes:
            self.api.delete(f"/api/v1/nodes/{node}", grace=None)


@pytest.fixture
def group(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[Group]:
    name = f"g{next(_groups)}-{request.node.name.lower().replace('_', '-')[:40].strip('-')}"
    name = "".join(ch if ch.isalnum() or ch == "-" else "-" for ch in name).strip("-")
    cluster.plane.add_namespace(name)
    g = Group(cluster, name)
    try:
        yield g
    finally:
        g.cleanup()


@pytest.fixture(scope="session")
def kueue_crds(cluster: Cluster) -> None:
    """Kueue's CRDs as schemaless stand-ins (tests/e2e/kueue.py), for tests that watch Kueue objects."""
    install_crds(cluster.plane.admin)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """On a failure, the tails of the components' logs go into the report."""
    outcome = yield
    report = outcome.get_result()
    cluster = item.funcargs.get("cluster") if hasattr(item, "funcargs") else None
    group = item.funcargs.get("group") if hasattr(item, "funcargs") else None
    plane = cluster.plane if isinstance(cluster, Cluster) else group.cluster.plane if isinstance(group, Group) else None
    if report.failed and plane is not None:
        for name, proc in plane.procs.items():
            report.sections.append((f"{name} log (tail)", proc.tail(40)))
        if isinstance(group, Group):
            pods = {
                p["metadata"]["name"]: (p["spec"].get("nodeName"), (p.get("status") or {}).get("conditions"))
                for p in group.pods()
            }
            report.sections.append(("pods of the group", repr(pods)))
            try:
                decisions = group.cluster.extender.get("/debug").json().get("decisions", [])[-25:]
                report.sections.append(("extender decisions (last 25)", "\n".join(map(repr, decisions))))
            except Exception as exc:  # the extender may be the thing that broke
                report.sections.append(("extender decisions", repr(exc)))
