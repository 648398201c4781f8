"""Every file under examples/ is loaded by a test, and what the documentation says of it holds."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.config import load_config
from app.runtime import build_snapshot_runtime
from app.service import ExtenderService
from simulator.schedconfig import load_scheduler_config
from tests.app.pki import make_pki

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def _service(config: str | None, snapshot: str) -> ExtenderService:
    loaded = load_config(EXAMPLES / config if config else None)
    return build_snapshot_runtime(loaded, str(EXAMPLES / snapshot)).service


def _request(name: str) -> bytes:
    return (EXAMPLES / "requests" / name).read_bytes()


@pytest.mark.parametrize(
    "name",
    sorted(
        p.name
        for p in EXAMPLES.glob("*.yaml")
        if "ExtenderConfiguration" in p.read_text(encoding="utf-8")
        and "tls/" not in p.read_text(encoding="utf-8")
        and "debugTokenFile: token" not in p.read_text(encoding="utf-8")
    ),
)
def test_every_example_configuration_passes_check_config(name: str) -> None:
    load_config(EXAMPLES / name)


def test_the_tls_examples_load_with_the_files_they_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Their paths are relative, as the Security page's openssl commands write them."""
    monkeypatch.chdir(tmp_path)
    in_tmp = tmp_path
    pki = make_pki(in_tmp / "tls")
    pki.server()
    (in_tmp / "tls" / "client-ca.crt").write_bytes(pki.ca.read_bytes())
    mtls = load_config(EXAMPLES / "config-mtls.yaml")
    assert mtls.server.tls is not None and mtls.server.tls.clientCAFile == "tls/client-ca.crt"
    (in_tmp / "tls" / "debug-token").write_text("s3cret\n")
    token = load_config(EXAMPLES / "config-debug-token.yaml")
    assert token.server.debugTokenFile is not None


def test_the_https_kube_scheduler_example_is_deploys_profile_over_tls() -> None:
    https = load_scheduler_config(str(EXAMPLES / "kube-scheduler-https.yaml"))
    shipped = load_scheduler_config(str(ROOT / "deploy" / "kube-scheduler-config.yaml"))
    assert https == dataclasses.replace(shipped, source=https.source)
    raw = yaml.safe_load((EXAMPLES / "kube-scheduler-https.yaml").read_text(encoding="utf-8"))
    (extender,) = raw["extenders"]
    assert extender["enableHTTPS"] is True and extender["urlPrefix"].startswith("https://")


def test_the_shared_gpu_example_shares_gpu_0_with_the_notebook() -> None:
    service = _service(None, "dra-shared-gpus.yaml")
    (node,) = service.explain(_request("shared-gpu-pod.json"))["nodes"]
    assert node["filter"]["passed"], node
    (device,) = next(iter(node["dra"]["devices"].values()))
    assert device["device"] == "gpu-0" and device["consumedCapacity"] == {"memory": "15Gi"}
    assert device["sharedWith"]


def test_the_extended_resource_example_gets_a_whole_gpu_through_a_special_claim() -> None:
    service = _service(None, "dra-shared-gpus.yaml")
    (node,) = service.explain(_request("extended-gpu-pod.json"))["nodes"]
    assert node["filter"]["passed"], node
    (device,) = next(iter(node["dra"]["devices"].values()))
    assert (device["request"], device["device"]) == ("container-0-request-2", "gpu-1")


def test_the_kai_example_admits_its_pod() -> None:
    service = _service("config-kai.yaml", "cluster.yaml")
    answer = service.filter(_request("kai-pod.json"))
    assert answer["Error"] == "" and answer["NodeNames"], answer
    assert service.fairness is not None and "kai" in service.fairness.view()


def test_the_preempt_example_keeps_one_node_and_drops_the_other() -> None:
    service = _service(None, "cluster.yaml")
    answer = service.preempt(_request("preempt-gpu-pod.json"))
    assert set(answer["NodeNameToMetaVictims"]) == {"dgx-a100-2"}
    dropped = service.decisions[-1]["dropped"]
    assert dropped == {"l4-1": "Insufficient nvidia.com/gpu"}


def test_the_gang_example_plans_the_podgroup_into_one_rack_and_packs_the_sweep() -> None:
    service = _service("config-gangs.yaml", "gangs.yaml")
    assert service.config.gangs.topologyLevels == ["example.com/block", "example.com/rack", "kubernetes.io/hostname"]
    answer = service.filter(_request("gang-member.json"))
    assert answer["NodeNames"] == ["rack-b-1"]
    groups = {g["group"]: g for g in service.gangs_view()["groups"]}
    train = groups["podgroup:ml-train/llm-train"]
    assert train["plan"]["domain"] == "example.com/rack=rack-b"
    assert {(m["node"], m["state"]) for m in train["members"]} == {(f"rack-b-{i}", "held") for i in (1, 2, 3)}
    sweep = next(p for p in service.cache.pods.values() if p.name == "sweep-0")
    body = json.dumps({"Pod": {"metadata": {"name": "sweep-0", "namespace": "ml-train", "uid": sweep.uid,
                                            "labels": {"scheduling.x-k8s.io/pod-group": "sweep"}},
                               "spec": {"containers": [{"name": "trial", "resources": {"requests": {
                                   "cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "4"}}}]}},
                       "NodeNames": ["rack-a-1", "rack-a-2"]}).encode()  # fmt: skip
    assert service.filter(body)["NodeNames"] == ["rack-a-1"]
    groups = {g["group"]: g for g in service.gangs_view()["groups"]}
    assert {m["node"] for m in groups["coscheduling:ml-train/sweep"]["members"]} == {"rack-a-1"}  # packed


def test_the_alerting_rules_name_only_metrics_the_extender_exports() -> None:
    rules = yaml.safe_load((EXAMPLES / "prometheus-rules.yaml").read_text(encoding="utf-8"))
    expressions = [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
    assert expressions
    service = _service("config-reclaim.yaml", "cluster.yaml")
    exported = set()
    for family in service.metrics.registry.collect():
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}.get(family.type, ("",))
        exported.update(family.name + suffix for suffix in suffixes)
    named = {name for expr in expressions for name in re.findall(r"kube_gpu_extender_\w+", expr)}
    assert named - exported == set()


def _documents(path: Path) -> list[Any]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]


def test_every_example_file_is_loaded_by_some_test() -> None:
    here = Path(__file__).read_text(encoding="utf-8")
    # The tests' own sources, and the README, whose "Try it" commands tests/test_docs.py runs.
    others = "".join(p.read_text(encoding="utf-8") for p in (ROOT / "tests").rglob("*.py") if p != Path(__file__))
    others += (ROOT / "README.md").read_text(encoding="utf-8")
    for path in sorted(EXAMPLES.rglob("*")):
        if path.is_dir():
            continue
        name = path.name
        assert name in here or name in others, f"examples/{path.relative_to(EXAMPLES)} is loaded by no test"
        if path.suffix == ".json":
            json.loads(path.read_text(encoding="utf-8"))
        elif path.suffix in (".yaml", ".yml"):
            assert _documents(path)
