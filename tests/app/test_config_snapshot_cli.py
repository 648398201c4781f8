"""Config loading and validation, snapshot formats, and the CLI."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from allocator import DeviceID
from app.cli import main
from app.cluster.cache import ClusterCache
from app.cluster.snapshot import SnapshotError, load_snapshot
from app.config import ConfigError, load_config, parse_config
from tests.conftest import node_obj, pod_obj

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_are_the_seed_example() -> None:
    assert load_config(None) == load_config(ROOT / "examples" / "config.yaml")
    config = load_config(None)
    assert config.managed_resource_names == ["nvidia.com/gpu"]
    assert [(p.name, p.weight) for p in config.plugins] == [("NodeResourcesFitPlus", 1), ("ScarceResourceAvoidance", 1)]
    assert config.plugins[0].args["resources"]["nvidia.com/gpu"] == {"type": "MostAllocated", "weight": 2}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"kind": "Other"}, "kind: Input should be 'ExtenderConfiguration'"),
        ({"plugins": [{"name": "Nope"}]}, "plugins[0].name: unknown plugin 'Nope'"),
        (
            {"plugins": [{"name": "ScarceResourceAvoidance", "weight": 0, "args": {"resources": ["a"]}}]},
            "plugins[0].weight",
        ),
        (
            {"plugins": [{"name": "NodeResourcesFitPlus", "args": {"resources": {"cpu": {"type": "mostallocated"}}}}]},
            "plugins[0].args.resources[cpu].type: 'mostallocated' is not one of MostAllocated, LeastAllocated",
        ),
        (
            {"plugins": [{"name": "NodeResourcesFitPlus", "args": {"resources": {}}}]},
            "plugins[0].args.resources: must be a non-empty map",
        ),
        (
            {
                "plugins": [
                    {
                        "name": "NodeResourcesFitPlus",
                        "args": {"resources": {"cpu": {"type": "LeastAllocated", "weight": -1}}},
                    }
                ]
            },
            "plugins[0].args.resources[cpu].weight: must be an integer > 0",
        ),
        (
            {"plugins": [{"name": "ScarceResourceAvoidance", "args": {"resources": ["a", "a"]}}] * 1},
            "plugins[0].args.resources[1]: duplicate resource name 'a'",
        ),
        (
            {"plugins": [{"name": "ScarceResourceAvoidance", "args": {"resources": ["a"]}}] * 2},
            "plugins[1].name: duplicate plugin",
        ),
        ({"managedResources": ["nvidia.com/gpu", "nvidia.com/gpu"]}, "managedResources[1]: duplicate resource name"),
        ({"cache": {"notReadyPolicy": "Maybe"}}, "cache.notReadyPolicy"),
        ({"server": {"pathPrefix": "api"}}, "server.pathPrefix: must start with '/'"),
        ({"typo": 1}, "typo: Extra inputs are not permitted"),
        ([1, 2], "configuration must be a YAML mapping"),
    ],
)
def test_invalid_configs_name_the_field(data: object, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(data)
    assert message in str(caught.value)


def test_config_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("plugins: [\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config(bad)
    for empty in ("", "# only a comment\n", "---\n"):
        bad.write_text(empty)
        with pytest.raises(ConfigError, match="the file is empty"):
            load_config(bad)


def test_snapshot_formats(tmp_path: Path) -> None:
    objects = [node_obj("g1", gpus=4), pod_obj("a", gpus=1, node="g1", phase="Running")]
    kubectl_list = tmp_path / "list.yaml"
    kubectl_list.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objects}))
    multi = tmp_path / "multi.yaml"
    multi.write_text(yaml.safe_dump_all(objects))
    as_json = tmp_path / "list.json"
    as_json.write_text(json.dumps({"kind": "PodList", "items": [{k: v for k, v in objects[1].items() if k != "kind"}]}))
    for path, nodes in ((kubectl_list, 1), (multi, 1), (as_json, 0)):
        cache = ClusterCache()
        counts = load_snapshot(path, cache)
        dra = {"deviceClasses": 0, "resourceClaims": 0, "resourceSlices": 0}
        assert counts == {"nodes": nodes, "pods": 1, "podGroups": 0, "skipped": 0, **dra}
        assert cache.usage("g1").requested["nvidia.com/gpu"] == 1


def test_bad_snapshots(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: Node\nmetadata: {}\n")
    with pytest.raises(SnapshotError, match=r"Node.metadata.name is missing"):
        load_snapshot(bad, ClusterCache())
    quantity = tmp_path / "quantity.yaml"
    quantity.write_text(yaml.safe_dump(node_obj("g1", cpu="lots")))
    with pytest.raises(SnapshotError, match=r"Node g1: status.allocatable\[cpu\]: invalid quantity 'lots'"):
        load_snapshot(quantity, ClusterCache())
    with pytest.raises(SnapshotError, match="cannot read snapshot"):
        load_snapshot(tmp_path / "none.yaml", ClusterCache())


def test_example_cluster_loads() -> None:
    cache = ClusterCache()
    counts = load_snapshot(ROOT / "examples" / "cluster.yaml", cache)
    assert counts["nodes"] == 10  # 8 device-plugin nodes and 2 with DRA GPUs
    assert counts["deviceClasses"] == 1 and counts["resourceSlices"] == 5 and counts["resourceClaims"] == 3
    assert cache.usage("dgx-a100-1").requested["nvidia.com/gpu"] == 6
    assert "nvidia.com/gpu" not in cache.usage("l4-3").requested
    # notebook-0's claim is allocated in the snapshot: its GPU is held.
    assert cache.dra.holder(DeviceID("gpu.example.com", "dra-1", "gpu-0")) == "claim ml-train/notebook-0-gpu"
    cache.check_invariants()


def test_check_config_command(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["check-config", "--config", str(ROOT / "examples" / "config.yaml")]) == 0
    assert "NodeResourcesFitPlus" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text("plugins: [{name: NodeResourcesFitPlus, args: {resources: {cpu: {type: X}}}}]\n")
    assert main(["check-config", "--config", str(bad)]) == 2
    assert "plugins[0].args.resources[cpu].type" in capsys.readouterr().err
    assert main(["check-config", "--config", os.devnull]) == 2
    assert "the file is empty" in capsys.readouterr().err


def test_the_cli_reference_shows_the_messages_check_config_prints(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """docs/reference/cli.md quotes check-config's errors for an unknown plugin and an empty file."""
    documented = (ROOT / "docs" / "reference" / "cli.md").read_text()
    bad, empty = tmp_path / "bad.yaml", tmp_path / "empty.yaml"
    bad.write_text("plugins: [{name: Foo}]\n")
    empty.write_text("")
    for path in (bad, empty):
        assert main(["check-config", "--config", str(path)]) == 2
        printed = capsys.readouterr().err.strip().replace(str(tmp_path) + "/", "")
        assert printed in documented.splitlines()


def test_serve_refuses_unusable_credentials_with_a_message(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    broken = tmp_path / "kubeconfig"
    broken.write_text("clusters: [\n")
    assert main(["serve", "--kubeconfig", str(broken), "--port", "0"]) == 2
    assert f"cannot load credentials from kubeconfig {broken}" in capsys.readouterr().err
    assert main(["serve", "--kubeconfig", str(tmp_path / "missing"), "--port", "0"]) == 2
    assert "cannot load credentials" in capsys.readouterr().err


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_serve_on_the_bundled_example() -> None:
    """The README's first command, end to end: a real process answering on loopback."""
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--snapshot", "examples/cluster.yaml", "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        deadline = time.monotonic() + 30
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
            while True:
                try:
                    if client.get("/readyz").status_code == 200:
                        break
                except httpx.TransportError:
                    if process.poll() is not None or time.monotonic() > deadline:
                        raise
                time.sleep(0.05)
            body = (ROOT / "examples" / "requests" / "gpu-pod.json").read_bytes()
            answer = client.post("/filter", content=body).json()
            assert answer["Error"] == ""
            assert answer["NodeNames"] == ["dgx-a100-1", "dgx-a100-2", "l4-1", "l4-2", "l4-3"]
            assert set(answer["FailedAndUnresolvableNodes"]) == {"cpu-1", "cpu-2", "cpu-3", "dra-1", "dra-2"}
            scores = client.post("/prioritize", content=body).json()
            # the five passed nodes and the failed ones scored above 0 (a node scored 0 is left out)
            assert {"dgx-a100-1", "dgx-a100-2", "l4-1", "l4-2", "l4-3"} <= {s["Host"] for s in scores}
            assert all(type(s["Score"]) is int and 1 <= s["Score"] <= 10 for s in scores)
            bind = (ROOT / "examples" / "requests" / "bind-gpu-pod.json").read_bytes()
            assert client.post("/bind", content=bind).json() == {"Error": ""}
            # The DRA pod: only the two nodes publishing GPUs can allocate its claim.
            dra = (ROOT / "examples" / "requests" / "dra-pod.json").read_bytes()
            answer = client.post("/filter", content=dra).json()
            assert answer["Error"] == "" and answer["NodeNames"] == ["dra-1", "dra-2"]
            bind = (ROOT / "examples" / "requests" / "bind-dra-pod.json").read_bytes()
            assert client.post("/bind", content=bind).json() == {"Error": ""}
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
    # At the default level (info): the configuration, the two binds and uvicorn's start and stop; not
    # one line per request (dozens of /readyz polls, filters, prioritizes).
    assert process.stdout is not None
    logged = [json.loads(line) for line in process.stdout.read().splitlines()]
    ours = [(line["level"], line["msg"]) for line in logged if line["logger"].startswith("kube_gpu_extender")]
    assert ours[0][1].startswith(
        f"serving snapshot examples/cluster.yaml on 127.0.0.1:{port}; configuration from built-in defaults: {{"
    )
    assert ours[1:] == [
        ("info", "bound ml-train/resnet-train-0 to node l4-3"),
        ("info", "bound ml-train/finetune-0 to node dra-1"),
    ]
    assert {line["logger"] for line in logged} == {"kube_gpu_extender", "kube_gpu_extender.decisions", "uvicorn.error"}
    assert not [line for line in logged if "/readyz" in line["msg"] or "/filter" in line["msg"]]


@pytest.mark.parametrize(
    "doc",
    [
        {"kind": "List", "items": [{"kind": "Node", "metadata": {"name": "a"}}, {"kind": "Pod", "spec": {}}]},
        {"kind": "PodList", "items": [{"metadata": {"name": "p"}}, {"kind": "Pod", "metadata": {"name": "q"}}]},
        [{"kind": "NodeList", "items": [{"metadata": {"name": "n"}}]}, {"kind": "Node"}, None, []],
        {"items": [{"kind": "Node", "metadata": {"name": "untyped list"}}], "metadata": {}},
        {"kind": "Node", "metadata": {"name": "one", "labels": {"items": "x"}}, "items": None},
        {"kind": "List", "items": None},
    ],
)
def test_json_snapshots_split_object_by_object_as_yaml_ones_are(tmp_path: Path, doc: Any) -> None:
    """The streaming JSON reader finds exactly the objects the whole-document reader finds."""
    from app.cluster.snapshot import iter_objects

    as_json, as_yaml = tmp_path / "s.json", tmp_path / "s.yaml"
    as_json.write_text(json.dumps(doc))
    as_yaml.write_text(yaml.safe_dump(doc))
    assert list(iter_objects(as_json)) == list(iter_objects(as_yaml))


def test_json_snapshot_errors_name_the_place(tmp_path: Path) -> None:
    from app.cluster.snapshot import iter_objects

    scalar = tmp_path / "scalar.json"
    scalar.write_text(json.dumps({"kind": "List", "items": [{"kind": "Node"}, 3]}))
    with pytest.raises(SnapshotError, match=r"^document 0.items\[1\]: expected a Kubernetes object or List, got int"):
        list(iter_objects(scalar))
    broken = tmp_path / "broken.json"
    broken.write_text('{"kind": "List", "items": [{"kind": "Node"},]}')
    with pytest.raises(SnapshotError, match="not valid JSON or YAML"):
        list(iter_objects(broken))
