"""Every credential the ``kubernetes`` client's loaders support reaches the real API server as the
extender's ServiceAccount (issue 13 (1) and (2): with kubernetes >= 36.0.3 the token was never sent,
and a client certificate was dropped with insecure-skip-tls-verify)."""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import sys
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.config import incluster_config

from app.cluster.kube import ApiError, KubeClient
from tests.e2e.conftest import Cluster
from tests.e2e.controlplane import EXTENDER_SA, ControlPlane
from tests.e2e.process import wait_for

OK = (200, 404)  # nodes listed; the Binding of a pod that does not exist refused as NotFound, not 401 or 403
SA_USER = f"system:serviceaccount:{EXTENDER_SA[0]}:{EXTENDER_SA[1]}"


def _statuses(kube: KubeClient) -> tuple[int, int]:
    """Lists nodes and POSTs the Binding of a pod that does not exist (the extender's ClusterRole allows
    both, anonymous neither): the statuses, 200 and 404 when the credential went with both requests
    (the Binding goes on connections of its own, app/cluster/api_connections.py)."""

    async def status(request: Awaitable[Any]) -> int:
        try:
            await request
            return 200
        except ApiError as exc:
            return exc.status

    async def run() -> tuple[int, int]:
        try:
            listed = await status(kube.list("/api/v1/nodes", limit=1))
            bound = await status(kube.bind("default", "no-such-pod", "0000", "no-such-node"))
            return listed, bound
        finally:
            await kube.close()

    return asyncio.run(run())


def _from_kubeconfig(
    plane: ControlPlane, tmp_path: Path, user: dict[str, Any], *, insecure: bool = False
) -> KubeClient:
    return KubeClient.from_kubeconfig(str(plane.write_kubeconfig(tmp_path / "kubeconfig", user, insecure=insecure)))


@pytest.fixture
def plane(cluster: Cluster) -> ControlPlane:
    return cluster.plane


@pytest.fixture
def token(plane: ControlPlane) -> str:
    return plane.service_account_token(*EXTENDER_SA)


def test_anonymous_is_refused(plane: ControlPlane, tmp_path: Path) -> None:
    """The control: without a credential both requests are refused (so 200 and 404 below mean the
    credential was sent)."""
    assert _statuses(_from_kubeconfig(plane, tmp_path, {})) == (403, 403)


def test_static_token(plane: ControlPlane, token: str, tmp_path: Path) -> None:
    assert _statuses(_from_kubeconfig(plane, tmp_path, {"token": token})) == OK


def test_token_file(plane: ControlPlane, token: str, tmp_path: Path) -> None:
    (tmp_path / "token").write_text(token)
    assert _statuses(_from_kubeconfig(plane, tmp_path, {"tokenFile": str(tmp_path / "token")})) == OK


def _exec_plugin(tmp_path: Path, output: dict[str, Any]) -> dict[str, Any]:
    """A kubeconfig ``exec`` user whose plugin prints ``output`` as its ExecCredential status, and counts runs."""
    script = tmp_path / "plugin.py"
    script.write_text(
        "import json, pathlib, sys\n"
        f"runs = pathlib.Path({str(tmp_path / 'runs')!r})\n"
        "runs.write_text(str(int(runs.read_text() or 0) + 1) if runs.exists() else '1')\n"
        f"status = json.loads(pathlib.Path({str(tmp_path / 'status.json')!r}).read_text())\n"
        "credential = {'apiVersion': 'client.authentication.k8s.io/v1', 'kind': 'ExecCredential'}\n"
        "print(json.dumps({**credential, 'status': status}))\n"
    )
    (tmp_path / "status.json").write_text(json.dumps(output))
    return {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": [str(script)],
            "interactiveMode": "Never",
        }
    }


def test_exec_plugin_token_refreshed_when_it_expires(plane: ControlPlane, token: str, tmp_path: Path) -> None:
    past = (datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    user = _exec_plugin(tmp_path, {"token": token, "expirationTimestamp": past})
    assert _statuses(_from_kubeconfig(plane, tmp_path, user)) == OK
    assert int((tmp_path / "runs").read_text()) >= 2  # loaded, then run again because it had expired


def test_exec_plugin_client_certificate(plane: ControlPlane, tmp_path: Path) -> None:
    assert plane.pki is not None
    cert, key = plane.pki.issue("exec-client", extensions="extendedKeyUsage=clientAuth", subject=f"/CN={SA_USER}")
    user = _exec_plugin(tmp_path, {"clientCertificateData": cert.read_text(), "clientKeyData": key.read_text()})
    assert _statuses(_from_kubeconfig(plane, tmp_path, user)) == OK


@pytest.mark.parametrize("insecure", [False, True], ids=["verified", "insecure-skip-tls-verify"])
def test_client_certificate(plane: ControlPlane, tmp_path: Path, insecure: bool) -> None:
    """A certificate for the ServiceAccount's user name (RBAC matches the name, whatever authenticated it)."""
    assert plane.pki is not None
    cert, key = plane.pki.issue(
        f"client-{insecure}", extensions="extendedKeyUsage=clientAuth", subject=f"/CN={SA_USER}"
    )
    user = {"client-certificate": str(cert), "client-key": str(key)}
    assert _statuses(_from_kubeconfig(plane, tmp_path, user, insecure=insecure)) == OK


def test_client_certificate_data_inline(plane: ControlPlane, tmp_path: Path) -> None:
    assert plane.pki is not None
    cert, key = plane.pki.issue("inline", extensions="extendedKeyUsage=clientAuth", subject=f"/CN={SA_USER}")
    user = {
        "client-certificate-data": base64.b64encode(cert.read_bytes()).decode(),
        "client-key-data": base64.b64encode(key.read_bytes()).decode(),
    }
    assert _statuses(_from_kubeconfig(plane, tmp_path, user)) == OK


@pytest.fixture
def two_service_accounts(plane: ControlPlane) -> Iterator[tuple[str, str]]:
    """ServiceAccounts rot-a and rot-b in kube-system, both with the extender's ClusterRole."""
    names = ("e2e-rot-a", "e2e-rot-b")
    for name in names:
        plane.admin.create(
            "/api/v1/namespaces/kube-system/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
        )
    plane.admin.create(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "e2e-rot"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kube-gpu-extender"},
            "subjects": [{"kind": "ServiceAccount", "name": n, "namespace": "kube-system"} for n in names],
        },
    )
    try:
        yield names
    finally:
        plane.admin.delete("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/e2e-rot", grace=None)
        for name in names:
            plane.admin.delete(f"/api/v1/namespaces/kube-system/serviceaccounts/{name}", grace=None)


class _Clock:
    """Stands in for the ``datetime`` module inside the in-cluster loader, so its token refresh period
    (one minute) can pass without waiting."""

    timedelta = datetime.timedelta

    def __init__(self) -> None:
        self.offset = datetime.timedelta()
        outer = self

        class _DateTime:
            @staticmethod
            def now() -> datetime.datetime:
                return datetime.datetime.now() + outer.offset

        self.datetime = _DateTime


def test_in_cluster_with_token_rotation(
    plane: ControlPlane, two_service_accounts: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the deploy/ sidecar uses: the projected token file, re-read as the kubelet rotates it."""
    clock = _Clock()
    monkeypatch.setattr(incluster_config, "datetime", clock)
    first, second = two_service_accounts
    token_file = tmp_path / "token"
    token_file.write_text(plane.service_account_token("kube-system", first))
    environ = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(plane.api_port)}
    cfg = client.Configuration()
    incluster_config.InClusterConfigLoader(str(token_file), str(plane.serving_ca), environ=environ).load_and_set(cfg)

    def status() -> tuple[int, int]:
        return _statuses(KubeClient.from_configuration(cfg))

    assert status() == OK
    # The kubelet rotates the token; the old one stops working (its ServiceAccount is gone).
    token_file.write_text(plane.service_account_token("kube-system", second))
    plane.admin.delete(f"/api/v1/namespaces/kube-system/serviceaccounts/{first}", grace=None)
    # Within the loader's refresh period the old token is still sent, and refused once the API server
    # has seen the deletion.
    wait_for("the old token refused", lambda: status() == (401, 401))
    clock.offset = datetime.timedelta(minutes=2)
    assert status() == OK
