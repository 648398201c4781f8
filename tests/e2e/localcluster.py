"""Try it yourself: the end-to-end suite's control plane, kept running for kubectl.

    python -m tests.e2e.localcluster up      # make cluster-up
    python -m tests.e2e.localcluster status
    python -m tests.e2e.localcluster down    # make cluster-down

``up`` starts one background process (its PID in ``<dir>/localcluster.pid``) that runs etcd,
kube-apiserver, the claim controller, the extender (deploy/extender-config.yaml, under deploy/rbac.yaml's
ServiceAccount) and kube-scheduler (deploy/kube-scheduler-config.yaml), adds the nodes, DeviceClass
and ResourceSlices of examples/cluster.yaml (no kubelet runs: pods are scheduled and bound, never
started), writes an admin kubeconfig, and waits. ``down`` stops that process, which stops the
components it started, each by its own PID. Everything listens on 127.0.0.1. Each ``up`` starts a
new, empty cluster: what a stopped one stored (its etcd data, its logs) is removed first.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.binaries import REPO, Missing, locate_binaries
from tests.e2e.controlplane import ADMIN_TOKEN, ControlPlane, extender_config
from tests.e2e.process import wait_for

__all__ = ["DEFAULT_DIR", "EXAMPLE", "down", "main", "up"]

DEFAULT_DIR = REPO / ".cluster"
EXAMPLE = REPO / "examples" / "cluster.yaml"
_RESOURCE = "/apis/resource.k8s.io/v1"
_PLANE = "plane"  # the control plane's files under the directory (ControlPlane's workdir)


def _state(directory: Path) -> dict[str, Any] | None:
    """What ``up`` wrote once everything was running; None while starting or when down."""
    with contextlib.suppress(OSError, ValueError):
        state: dict[str, Any] = json.loads((directory / "state.json").read_text())
        return state
    return None


def _pid(directory: Path) -> int | None:
    """The background process's PID, if it is still running (and is still ours, not a reused PID)."""
    with contextlib.suppress(OSError, ValueError):
        pid = int((directory / "localcluster.pid").read_text())
        if b"tests.e2e.localcluster" in Path(f"/proc/{pid}/cmdline").read_bytes():
            return pid
    return None


def _exited(pid: int) -> bool:
    """Whether ``pid`` has exited (reaped here when this process started it; a zombie counts)."""
    with contextlib.suppress(ChildProcessError):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


def add_example_objects(plane: ControlPlane, path: Path = EXAMPLE) -> list[str]:
    """Nodes (as a kubelet would leave them), DeviceClasses and ResourceSlices of a snapshot file; the
    node names. Its pods and claims are left out: the cluster starts empty."""
    items = [o for o in (yaml.safe_load(path.read_text()) or {}).get("items", []) if o]
    nodes = []
    for obj in items:
        if obj["kind"] == "Node":
            status = obj.get("status") or {}
            plane.add_node(obj["metadata"]["name"], status.get("allocatable") or {}, obj["metadata"].get("labels"))
            nodes.append(obj["metadata"]["name"])
    plurals = {"DeviceClass": "deviceclasses", "ResourceSlice": "resourceslices"}
    for obj in items:
        if obj["kind"] in plurals:
            metadata = {k: v for k, v in obj["metadata"].items() if k in ("name", "labels", "annotations")}
            plane.admin.create(f"{_RESOURCE}/{plurals[obj['kind']]}", {**obj, "metadata": metadata})
    return nodes


def _serve(directory: Path, extender_port: int) -> int:
    """The background process: start everything, write the state, wait for SIGTERM, stop everything."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    plane = ControlPlane(directory / _PLANE, locate_binaries())
    try:
        plane.start()
        plane.start_controller_manager()
        extender = plane.start_extender(extender_config(), port=extender_port)
        plane.start_scheduler(extender.port)
        nodes = add_example_objects(plane)
        # No serviceaccount controller runs: give "default" the ServiceAccount pods are admitted with.
        plane.admin.create(
            "/api/v1/namespaces/default/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}},
        )
        kubeconfig = plane.write_kubeconfig(directory / "kubeconfig", {"token": ADMIN_TOKEN})
        state = {
            "pid": os.getpid(),
            "apiServer": plane.url,
            "kubeconfig": str(kubeconfig),
            "extender": extender.url,
            "nodes": nodes,
            "logs": str(plane.workdir / "logs"),
            "pids": {name: proc.pid for name, proc in plane.procs.items()},
        }
        (directory / "state.json").write_text(json.dumps(state, indent=2))
        stop.wait()
    finally:
        (directory / "state.json").unlink(missing_ok=True)
        plane.stop()
    return 0


def up(directory: Path, extender_port: int = 8888, timeout: float = 120.0) -> dict[str, Any]:
    """Start the background process (unless it runs already); what it wrote once everything runs."""
    directory.mkdir(parents=True, exist_ok=True)
    if _pid(directory) is not None:
        state = wait_for("the running local cluster", lambda: _state(directory), timeout)
        return state
    locate_binaries()  # fail here, with the message saying how to get them
    # A new cluster: the etcd data of a stopped one would hold the objects start-up creates.
    shutil.rmtree(directory / _PLANE, ignore_errors=True)
    log = (directory / "localcluster.log").open("ab")
    command = ["-m", "tests.e2e.localcluster", "_serve", "--dir", str(directory), "--port", str(extender_port)]
    proc = subprocess.Popen(
        [sys.executable, *command],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        start_new_session=True,  # outlives this command
    )
    log.close()
    (directory / "localcluster.pid").write_text(str(proc.pid))

    def started() -> dict[str, Any] | None:
        if proc.poll() is not None:
            tail = (directory / "localcluster.log").read_text(errors="replace").splitlines()[-20:]
            raise RuntimeError("the local cluster exited while starting:\n" + "\n".join(tail))
        return _state(directory)

    try:
        return wait_for("the local cluster to start", started, timeout, interval=0.2)
    except BaseException:
        down(directory)
        raise


def down(directory: Path, timeout: float = 60.0) -> bool:
    """Stop the background process (it stops what it started); whether one was running."""
    pid = _pid(directory)
    if pid is None:
        (directory / "localcluster.pid").unlink(missing_ok=True)
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    # Until the process has exited, not only until it looks gone: a process releasing its memory has
    # an empty cmdline (so _pid no longer sees it) while it is still running.
    while not _exited(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if not _exited(pid):
        raise TimeoutError(f"the local cluster (PID {pid}) did not stop within {timeout:.0f}s")
    (directory / "localcluster.pid").unlink(missing_ok=True)
    return True


def _describe(state: dict[str, Any]) -> str:
    return (
        f"local cluster up: API server {state['apiServer']}, extender {state['extender']} "
        f"({len(state['nodes'])} nodes from examples/cluster.yaml)\n"
        f"  export KUBECONFIG={state['kubeconfig']}\n"
        "  kubectl get nodes\n"
        "  kubectl apply -f examples/pods.yaml   # or any pod with schedulerName: gpu-scheduler\n"
        "  kubectl get pods -o wide\n"
        f"  curl -s {state['extender']}/debug | python -m json.tool\n"
        f"logs: {state['logs']}; stop it with: make cluster-down"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.e2e.localcluster", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("up", "down", "status", "_serve"))
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="state, kubeconfig and logs (default .cluster/)")
    parser.add_argument("--port", type=int, default=8888, help="the extender's port on 127.0.0.1 (default 8888)")
    args = parser.parse_args(argv)
    directory = args.dir.resolve()
    if args.command == "_serve":
        return _serve(directory, args.port)
    if args.command == "up":
        try:
            print(_describe(up(directory, args.port)))
        except Missing as exc:
            print(f"cannot start the local cluster: {exc}", file=sys.stderr)
            return 1
        except (RuntimeError, TimeoutError) as exc:
            print(str(exc), file=sys.stderr)
            return 1
        return 0
    if args.command == "down":
        print("local cluster stopped" if down(directory) else "no local cluster running")
        return 0
    state = _state(directory) if _pid(directory) is not None else None
    print(_describe(state) if state else "no local cluster running")
    return 0 if state else 3


if __name__ == "__main__":
    sys.exit(main())
