"""``make cluster-up`` / ``make cluster-down``: the documented try-it-yourself commands, as a user runs
them (a separate control plane from the session's, driven through the kubeconfig ``up`` writes)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from tests.e2e.binaries import REPO
from tests.e2e.localcluster import EXAMPLE, _pid, down, main, up
from tests.e2e.process import free_port, wait_for


@pytest.fixture
def local(binaries: dict[str, Path], tmp_path: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    directory = tmp_path / "cluster"
    state = up(directory, extender_port=free_port())
    try:
        yield directory, state
    finally:
        down(directory)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A child of this process that exited stays a zombie until reaped: not running.
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"


def test_up_serves_the_example_cluster_and_down_stops_everything(
    local: tuple[Path, dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    directory, state = local
    api = config.new_client_from_config(state["kubeconfig"])
    core = client.CoreV1Api(api)
    example = yaml.safe_load(EXAMPLE.read_text())["items"]
    assert sorted(n.metadata.name for n in core.list_node().items) == sorted(
        o["metadata"]["name"] for o in example if o["kind"] == "Node"
    )

    # examples/pods.yaml as `kubectl apply` would create it.
    resource = client.ResourceV1Api(api)
    for obj in yaml.safe_load((REPO / "examples" / "pods.yaml").read_text())["items"]:
        if obj["kind"] == "ResourceClaim":
            resource.create_namespaced_resource_claim("default", obj)
        else:
            core.create_namespaced_pod("default", obj)

    def placed() -> dict[str, str] | None:
        pods = {p.metadata.name: p.spec.node_name for p in core.list_namespaced_pod("default").items}
        return pods if all(pods.values()) and len(pods) == 4 else None

    nodes = wait_for("the example pods bound", placed, 60)
    gpus = {
        o["metadata"]["name"]: int(o["status"]["allocatable"].get("nvidia.com/gpu", 0))
        for o in example
        if o["kind"] == "Node"
    }
    assert gpus[nodes["train-8gpu"]] == 8
    assert gpus[nodes["train-1gpu"]] > 0
    assert gpus[nodes["web"]] == 0  # CPU-only pods stay off GPU nodes
    claim = resource.read_namespaced_resource_claim("finetune-gpu", "default")
    assert claim.status.allocation.devices.results[0].driver == "gpu.example.com"
    assert nodes["finetune"].startswith("dra-")

    assert main(["status", "--dir", str(directory)]) == 0
    assert f"export KUBECONFIG={state['kubeconfig']}" in capsys.readouterr().out
    assert up(directory) == state  # a second `up` finds it running

    pids = [state["pid"], *state["pids"].values()]
    assert all(_alive(pid) for pid in pids)
    assert down(directory)
    assert not any(_alive(pid) for pid in pids)
    assert _pid(directory) is None
    assert main(["status", "--dir", str(directory)]) == 3
    assert not down(directory)

    # `up` after `down` starts a new, empty cluster: the example's nodes, none of the pods from before.
    again = up(directory, extender_port=free_port())
    try:
        fresh = client.CoreV1Api(config.new_client_from_config(again["kubeconfig"]))
        assert sorted(n.metadata.name for n in fresh.list_node().items) == sorted(gpus)
        assert fresh.list_namespaced_pod("default").items == []
    finally:
        assert down(directory)
