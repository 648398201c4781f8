"""Trace parsing: openb CSV nodes and pods, snapshots and YAML pod lists, and errors that name the file,
line and column."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from app.config import load_config
from simulator.simulate import simulate
from simulator.trace import (
    GPU,
    KIND_CPU,
    KIND_MULTI_GPU,
    KIND_ONE_GPU,
    TraceError,
    load_nodes_csv,
    load_pods,
    load_pods_csv,
    load_snapshot_nodes,
)
from tests.conftest import node_obj, pod_obj
from tests.simulator.test_simulate import NODE_HEADER, POD_HEADER, ROOT, trace, write


def test_csv_rows_become_nodes_and_pods(tmp_path: Path) -> None:
    nodes, pods = trace(
        tmp_path,
        "n-gpu,64000,262144,2,T4\nn-cpu,32000,131072,0,\n",
        "p0,12000,16384,1,460,,LS,Running,5,100,5\np1,8000,1024,4,1000,V100M16|V100M32,LS,Running,7,,7\n",
    )
    assert [(n.name, dict(n.allocatable), n.model) for n in nodes] == [
        ("n-gpu", {"cpu": 64000, "memory": 262144 * 2**20, GPU: 2}, "T4"),
        ("n-cpu", {"cpu": 32000, "memory": 131072 * 2**20}, ""),
    ]
    p0, p1 = pods
    assert (p0.gpus, p0.gpu_milli, p0.shares_gpu, p0.kind, p0.created, p0.deleted) == (
        1,
        460,
        True,
        KIND_ONE_GPU,
        5,
        100,
    )
    assert (p1.gpus, p1.shares_gpu, p1.kind, p1.gpu_spec, p1.deleted) == (
        4,
        False,
        KIND_MULTI_GPU,
        frozenset({"V100M16", "V100M32"}),
        None,
    )
    body = json.loads(p0.body)
    assert body["spec"]["containers"][0]["resources"]["requests"] == {
        "cpu": "12000m",
        "memory": str(16384 * 2**20),
        GPU: "1",
    }


def test_the_short_openb_pod_list_without_times_is_accepted(tmp_path: Path) -> None:
    # openb_pod_list_multigpu20.csv has only the resource columns: creation order = file order.
    pods = load_pods_csv(
        write(tmp_path, "p.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1,1,0,0\nb,1,1,2,1000\n")
    )
    assert [(p.name, p.created, p.deleted, p.kind) for p in pods] == [
        ("a", 0, None, KIND_CPU),
        ("b", 1, None, "multi-gpu"),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("p0,12x,16,1,1000,,LS,Running,0,,0\n", "pods.csv:2: column cpu_milli: '12x' is not an integer"),
        (
            "p0,1,16,1,1000,,LS,Running,0,,0\np1,1,-5,0,0,,LS,Running,0,,0\n",
            "pods.csv:3: column memory_mib: must be >= 0",
        ),
        (
            "p0,1,16,1,1000,,LS,Running,0,,0\np0,1,16,1,1000,,LS,Running,0,,0\n",
            "pods.csv:3: column name: duplicate pod",
        ),
        ("p0,1,16,1,0,,LS,Running,0,,0\n", "pods.csv:2: column gpu_milli: 0 with num_gpu 1"),
        ("p0,1,16,1,1000,,LS,Running,50,10,0\n", "pods.csv:2: column deletion_time: 10 is before creation_time 50"),
    ],
)
def test_bad_pod_rows_name_file_line_and_column(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(TraceError, match=message.replace("|", r"\|")):
        load_pods_csv(write(tmp_path, "pods.csv", POD_HEADER + text))


def test_bad_node_files_name_file_line_and_column(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"nodes.csv:3: column gpu: 'two' is not an integer"):
        load_nodes_csv(write(tmp_path, "nodes.csv", NODE_HEADER + "a,1,1,0,\nb,1,1,two,T4\n"))
    with pytest.raises(TraceError, match=r"nodes.csv:1: missing column\(s\) gpu"):
        load_nodes_csv(write(tmp_path, "nodes.csv", "sn,cpu_milli,memory_mib,model\na,1,1,\n"))
    with pytest.raises(TraceError, match=r"cannot read .*missing.csv"):
        load_nodes_csv(tmp_path / "missing.csv")


def test_snapshot_nodes_and_yaml_pod_list(tmp_path: Path) -> None:
    nodes = load_snapshot_nodes(ROOT / "examples" / "cluster.yaml")
    assert len(nodes) == 10  # 2 DGX A100 + 3 L4 + 3 CPU-only + 2 DRA nodes (no nvidia.com/gpu)
    assert sum(n.gpus for n in nodes) == 2 * 8 + 3 * 4
    pod = pod_obj("train", gpus=2, node="somewhere", phase="Running")
    pod["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    path = write(tmp_path, "pods.yaml", yaml.safe_dump({"kind": "List", "items": [pod, pod_obj("web")]}))
    train, web = load_pods(path)
    assert (train.gpus, train.gpu_spec, web.kind) == (2, frozenset({"NVIDIA-A100-SXM4-80GB"}), KIND_CPU)
    assert "nodeName" not in json.loads(train.body)["spec"]  # the simulator decides the node
    result = simulate("fitplus-sra", load_config(None), nodes, [train, web], sharing="none")
    assert result.placements["train"].startswith("dgx-a100-")
    # Hand-check: SRA scores nvidia.com/gpu nodes low for a CPU pod; the DRA nodes advertise no
    # nvidia.com/gpu, so to the simulator (and to SRA, see README "Known gap") they are CPU nodes.
    assert result.placements["web"].startswith(("cpu-", "dra-"))


def test_bad_yaml_pods_and_node_less_snapshots_are_errors(tmp_path: Path) -> None:
    path = write(tmp_path, "pods.yaml", yaml.safe_dump(pod_obj("x", cpu="lots")))
    with pytest.raises(TraceError, match=r"pods\.yaml: pod 0: Pod default/x"):
        load_pods(path)
    with pytest.raises(TraceError, match="no schedulable Node objects"):
        load_snapshot_nodes(write(tmp_path, "empty.yaml", yaml.safe_dump(node_obj("n") | {"kind": "Pod"})))
