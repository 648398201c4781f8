"""``kube-gpu-extender workload`` (simulator/cluster_workload.py, simulator/workload_cli.py): which pods
count, GPUs from container requests and ResourceClaims, the YAML fragment, errors, and a cluster
read through the fake API server (tests/fakeapi) with a kubeconfig pointing at it."""

from __future__ import annotations

import datetime
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.cli import main
from app.config import ExtenderConfiguration
from simulator.cluster_workload import Collector, Selection, Tally, claim_gpus, render
from simulator.policies import cpu_per_gpu, workload
from simulator.trace import load_pods_csv
from simulator.workload_cli import default_kubeconfig
from tests.fakeapi import FakeAPIServer

ROOT = Path(__file__).resolve().parents[2]
GPU_CLASS = "gpu.nvidia.com"


def pod(
    name: str,
    cpu: str = "4",
    gpus: int = 0,
    *,
    node: str = "",
    phase: str = "",
    scheduler: str = "",
    claims: list[dict[str, Any]] | None = None,
    claim_statuses: list[dict[str, Any]] | None = None,
    owner: str = "",
    annotations: dict[str, str] | None = None,
    namespace: str = "ml",
) -> dict[str, Any]:
    requests: dict[str, str] = {"cpu": cpu, "memory": "8Gi"}
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
    spec: dict[str, Any] = {"containers": [{"name": "main", "resources": {"requests": requests}}]}
    if node:
        spec["nodeName"] = node
    if scheduler:
        spec["schedulerName"] = scheduler
    if claims:
        spec["resourceClaims"] = claims
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if owner:
        metadata["ownerReferences"] = [{"kind": owner, "name": "x", "uid": "u", "controller": True}]
    if annotations:
        metadata["annotations"] = annotations
    status: dict[str, Any] = {"phase": phase} if phase else {}
    if claim_statuses:
        status["resourceClaimStatuses"] = claim_statuses
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


def request(name: str = "gpu", device_class: str = GPU_CLASS, count: int | None = None, **extra: Any) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class, **extra}
    if count is not None:
        exactly["count"] = count
    return {"name": name, "exactly": exactly}


def claim_obj(
    name: str, *requests: dict[str, Any], results: list[dict[str, Any]] | None = None, namespace: str = "ml"
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": list(requests)}},
    }
    if results is not None:
        obj["status"] = {"allocation": {"devices": {"results": results}}}
    return obj


def result(req: str, device: str, **extra: Any) -> dict[str, Any]:
    return {"request": req, "driver": GPU_CLASS, "pool": "node-1", "device": device, **extra}


# ---------------------------------------------------------------------------------------- claims


def test_an_unallocated_claim_counts_its_exact_count_requests_of_gpu_classes() -> None:
    spec = {
        "devices": {
            "requests": [
                request("a", count=2),
                request("b"),  # count defaults to 1
                request("nic", "nic.example.com", count=4),
                request("all", allocationMode="All"),  # unknown until allocated
                request("admin", count=3, adminAccess=True),  # takes nothing
                {"name": "alt", "firstAvailable": [{"name": "big", "deviceClassName": GPU_CLASS, "count": 2}, {}]},
            ]
        }
    }
    assert claim_gpus(spec, None, {GPU_CLASS}) == 2 + 1 + 2
    assert claim_gpus(spec, None, {"nic.example.com"}) == 4
    assert claim_gpus(spec, None, set()) == 0


def test_an_allocated_claim_counts_its_results_of_gpu_class_requests() -> None:
    spec = {
        "devices": {
            "requests": [
                request("all", allocationMode="All"),
                request("nic", "nic.example.com"),
                {
                    "name": "alt",
                    "firstAvailable": [
                        {"name": "big", "deviceClassName": "big.example.com"},
                        {"name": "small", "deviceClassName": GPU_CLASS, "count": 2},
                    ],
                },
            ]
        }
    }
    results = [
        result("all", "gpu-0"),
        result("all", "gpu-1"),
        result("all", "gpu-2", adminAccess=True),
        result("nic", "nic-0"),
        result("alt/small", "gpu-3"),
        result("alt/small", "gpu-4"),
    ]
    status = {"allocation": {"devices": {"results": results}}}
    assert claim_gpus(spec, status, {GPU_CLASS}) == 4


# ---------------------------------------------------------------------------------------- which pods


def _collect(objects: list[dict[str, Any]], selection: Selection | None = None) -> tuple[list[Any], Tally]:
    collector = Collector(selection or Selection())
    for obj in objects:
        collector.add(obj)
    return collector.pods(), collector.tally


def test_bound_and_pending_pods_count_finished_node_bound_and_other_schedulers_do_not() -> None:
    objects = [
        pod("bound", gpus=1, node="node-1", phase="Running", scheduler="gpu-scheduler"),
        pod("pending", "8", gpus=2, scheduler="gpu-scheduler"),
        pod("done", gpus=1, node="node-1", phase="Succeeded", scheduler="gpu-scheduler"),
        pod("failed", gpus=1, node="node-1", phase="Failed", scheduler="gpu-scheduler"),
        pod("agent", "100m", node="node-1", phase="Running", owner="DaemonSet"),
        pod("static", "100m", node="node-1", annotations={"kubernetes.io/config.mirror": "x"}),
        pod("web", "2", node="node-2", phase="Running"),  # default-scheduler
        pod("job", gpus=1, owner="Job", scheduler="gpu-scheduler"),
    ]
    pods, tally = _collect(objects, Selection(frozenset({"gpu-scheduler"})))
    assert [p.name for p in pods] == ["ml/bound", "ml/pending", "ml/job"]
    assert (tally.bound, tally.pending, tally.finished, tally.node_bound, tally.other_scheduler) == (1, 2, 2, 2, 1)
    assert [(p.cpu_milli, p.gpus, p.gpu_milli) for p in pods] == [(4000, 1, 1000), (8000, 2, 1000), (4000, 1, 1000)]
    everything, tally = _collect(objects, Selection(include_finished=True))
    assert len(everything) == 6 and tally.other_scheduler == tally.finished == 0
    default_only, _ = _collect(objects, Selection(frozenset({"default-scheduler"})))
    assert [p.name for p in default_only] == ["ml/web"]


def test_requests_are_the_pods_effective_requests() -> None:
    obj = pod("init", "2", gpus=1)
    obj["spec"]["initContainers"] = [{"name": "setup", "resources": {"requests": {"cpu": "6"}}}]
    obj["spec"]["overhead"] = {"cpu": "250m"}
    (counted,), _ = _collect([obj])
    assert counted.cpu_milli == 6250 and counted.gpus == 1 and counted.memory == 8 * 1024**3


def test_claims_add_gpus_named_generated_or_from_a_template() -> None:
    template = {
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "two-gpus", "namespace": "ml"},
        "spec": {"spec": {"devices": {"requests": [request(count=2)]}}},
    }
    objects = [
        pod("direct", claims=[{"name": "gpu", "resourceClaimName": "shared"}]),
        pod("also-direct", claims=[{"name": "gpu", "resourceClaimName": "shared"}], node="node-1"),
        pod(
            "generated",
            gpus=1,
            claims=[{"name": "gpu", "resourceClaimTemplateName": "two-gpus"}],
            claim_statuses=[{"name": "gpu", "resourceClaimName": "generated-gpu-x1"}],
        ),
        pod("to-be-made", claims=[{"name": "gpu", "resourceClaimTemplateName": "two-gpus"}]),
        pod(
            "nothing-needed",
            claims=[{"name": "gpu", "resourceClaimTemplateName": "two-gpus"}],
            claim_statuses=[{"name": "gpu", "resourceClaimName": None}],
        ),
        pod("lost", claims=[{"name": "gpu", "resourceClaimName": "gone"}]),
        claim_obj("shared", request(), results=[result("gpu", "gpu-0")]),
        claim_obj("generated-gpu-x1", request(count=4)),
        template,
    ]
    pods, tally = _collect(objects)
    assert {p.name: p.gpus for p in pods} == {
        "ml/direct": 1,  # a shared claim counts for each of its pods
        "ml/also-direct": 1,
        "ml/generated": 1 + 4,
        "ml/to-be-made": 2,
        "ml/nothing-needed": 0,
        "ml/lost": 0,
    }
    assert (tally.container_gpu_pods, tally.claim_gpu_pods, tally.missing_claims) == (1, 4, 1)


def test_a_pod_with_a_bad_quantity_is_left_out_and_named() -> None:
    bad = pod("bad")
    bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    pods, tally = _collect([bad, pod("good", gpus=1)])
    assert [p.name for p in pods] == ["ml/good"]
    assert len(tally.unreadable) == 1 and tally.unreadable[0].startswith("ml/bad: ")


# ---------------------------------------------------------------------------------------- output


def test_the_fragment_is_yaml_that_fits_the_plugins_args() -> None:
    objects = [pod(f"p{i}", "12", gpus=1, node="n") for i in range(5)] + [pod("multi", "40", gpus=4), pod("cpu", "2")]
    pods, tally = _collect(objects)
    text = render(pods, tally, "file pods.yaml", {GPU_CLASS}, datetime.date(2025, 1, 2))
    assert text.startswith("# kube-gpu-extender workload, 2025-01-02, file pods.yaml:\n")
    assert "# 7 pods (5 bound, 2 pending), 6 asking for GPUs (6 in containers, 0 through ResourceClaims" in text
    fragment, balance = yaml.safe_load(text)
    assert fragment == {"name": "GpuFragmentation", "args": {"workload": workload(pods)}}
    assert balance == {"name": "GpuCpuBalance", "args": {"cpuPerGpu": cpu_per_gpu(pods)}}
    assert balance["args"]["cpuPerGpu"] == (5 * 12000 + 40000) * 1000 // (9 * 1000)
    # Pasted into the shipped entries (weights and other args kept), the configuration validates.
    config = {
        "plugins": [
            {"name": "GpuFragmentation", "weight": 19, "args": {"mapping": "Linear", **fragment["args"]}},
            {"name": "GpuCpuBalance", "weight": 10, "args": {"milliPerPoint": 10, **balance["args"]}},
        ]
    }
    ExtenderConfiguration.model_validate(config)


def test_the_documented_example_is_the_commands_output(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/concepts/scoring.md shows examples/workload.yaml as the output for examples/pods.yaml."""
    monkeypatch.chdir(ROOT)
    assert main(["workload", "--pods", "examples/pods.yaml", "--gpu-class", "gpu.example.com"]) == 0
    printed = capsys.readouterr().out
    documented = (ROOT / "examples" / "workload.yaml").read_text(encoding="utf-8")
    date = re.compile(r"\d{4}-\d{2}-\d{2}")
    assert date.sub("DATE", printed, count=1) == date.sub("DATE", documented, count=1)
    assert "workload.yaml" in (ROOT / "docs" / "concepts" / "scoring.md").read_text(encoding="utf-8")


def test_an_openb_trace_gives_what_print_workload_gives(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,6000,1024,1,460\np1,12000,1024,1,1000\np2,2000,512,0,0\n"
    )
    assert main(["workload", "--pods", str(trace)]) == 0
    entries = yaml.safe_load(capsys.readouterr().out)
    pods = load_pods_csv(trace)
    assert entries[0]["args"]["workload"] == workload(pods)
    assert entries[1]["args"]["cpuPerGpu"] == cpu_per_gpu(pods)


# ---------------------------------------------------------------------------------------- errors


def test_no_gpu_pod_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "pods.yaml"
    path.write_text(yaml.safe_dump_all([pod("web", node="n"), pod("done", gpus=1, phase="Succeeded")]))
    assert main(["workload", "--pods", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"error: file {path}: none of the 1 pods counted asks for GPUs" in err
    assert "ResourceClaim of class gpu.nvidia.com): nothing to derive" in err
    assert main(["workload", "--pods", str(path), "--scheduler-name", "nobody"]) == 2
    assert "no pod to count" in capsys.readouterr().err


def test_unreadable_inputs_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["workload", "--pods", str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read snapshot" in capsys.readouterr().err
    broken = tmp_path / "kubeconfig"
    broken.write_text("clusters: [\n")
    assert main(["workload", "--from-cluster", "--kubeconfig", str(broken)]) == 2
    assert f"error: cannot load credentials from kubeconfig {broken}" in capsys.readouterr().err
    assert main(["workload", "--pods", "x.yaml", "--kubeconfig", str(broken)]) == 2
    assert "--kubeconfig needs --from-cluster" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["workload"])
    assert exited.value.code == 2
    assert "one of the arguments --from-cluster --pods is required" in capsys.readouterr().err


def test_the_default_kubeconfig_is_kubeconfig_then_home(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    second.write_text("x")
    home = tmp_path / "home"
    assert default_kubeconfig({"KUBECONFIG": f"{first}:{second}"}, home) == str(second)
    assert default_kubeconfig({}, home) is None  # in-cluster
    (home / ".kube").mkdir(parents=True)
    (home / ".kube" / "config").write_text("x")
    assert default_kubeconfig({}, home) == str(home / ".kube" / "config")


# ---------------------------------------------------------------------------------------- a cluster


def _kubeconfig(tmp_path: Path, url: str) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": url}}],
                "users": [{"name": "test", "user": {}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "test"}}],
                "current-context": "fake",
            }
        )
    )
    return str(path)


def test_from_cluster_reads_pods_and_claims_through_the_api(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with FakeAPIServer() as fake:
        for i in range(3):
            fake.add(pod(f"train-{i}", "12", gpus=1, node="node-1", phase="Running", scheduler="gpu-scheduler"))
        fake.add(pod("big", "48", gpus=4, scheduler="gpu-scheduler"))
        fake.add(
            pod(
                "dra",
                "10",
                claims=[{"name": "gpu", "resourceClaimName": "dra-gpu"}],
                node="node-2",
                scheduler="gpu-scheduler",
            )
        )
        fake.add(claim_obj("dra-gpu", request(count=2), results=[result("gpu", "g0"), result("gpu", "g1")]))
        fake.add(pod("old", gpus=1, node="node-1", phase="Succeeded", scheduler="gpu-scheduler"))
        fake.add(pod("web", "2", node="node-3", phase="Running"))
        fake.add(pod("agent", "100m", node="node-1", owner="DaemonSet"))
        kubeconfig = _kubeconfig(tmp_path, fake.url)
        argv = ["workload", "--from-cluster", "--kubeconfig", kubeconfig, "--scheduler-name", "gpu-scheduler"]
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert f"cluster {fake.url}:" in out.splitlines()[0]
        assert "# 5 pods (4 bound, 1 pending), 5 asking for GPUs (4 in containers, 1 through ResourceClaims" in out
        assert "# left out: 1 finished, 1 DaemonSet or static, 1 of other schedulers" in out
        fragment, balance = yaml.safe_load(out)
        assert fragment["args"]["workload"][0] == {"cpu": 12000, "gpuMilli": 1000, "gpus": 1, "popularity": 3}
        assert {"cpu": 10000, "gpuMilli": 1000, "gpus": 2, "popularity": 1} in fragment["args"]["workload"]
        assert balance["args"]["cpuPerGpu"] == round((3 * 12000 + 48000 + 10000) * 1000 / 9000)
        paths = {target.split("?")[0] for _, target in fake.requests}
        assert {"/api/v1/pods", "/apis/resource.k8s.io/v1/resourceclaims"} <= paths

        # Claims the credentials may not list are skipped with a warning.
        fake.fail_next(1, 403, path_contains="resourceclaims")
        assert main(argv) == 0
        captured = capsys.readouterr()
        assert "warning: cannot list resourceclaims: 403" in captured.err
        assert "4 asking for GPUs (4 in containers, 0 through ResourceClaims" in captured.out
        url = fake.url
    # The API server gone: a clear error naming it.
    assert main(argv) == 2
    assert f"error: cannot list the cluster's pods at {url}: list /api/v1/pods: ConnectError" in capsys.readouterr().err
