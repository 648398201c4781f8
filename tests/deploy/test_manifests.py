"""The deploy/ manifests stay consistent with each other and with what the extender needs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from app.cluster.kueue_watch import KUEUE_KINDS
from app.cluster.reflector import GANG_RESOURCES
from app.config import parse_config
from k8s_semantics.quantity import parse_quantity
from tests.e2e.controlplane import scheduler_container

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def _configmap() -> dict[str, Any]:
    for doc in yaml.safe_load_all((DEPLOY / "extender-config.yaml").read_text()):
        if doc and doc.get("kind") == "ConfigMap":
            return doc
    raise AssertionError("no ConfigMap in deploy/extender-config.yaml")


def test_embedded_scheduler_config_is_the_source_of_truth_verbatim() -> None:
    embedded = _configmap()["data"]["kube-scheduler-config.yaml"]
    assert embedded == (DEPLOY / "kube-scheduler-config.yaml").read_text()


def test_scheduler_profile_leaves_claims_to_the_extender() -> None:
    config = yaml.safe_load((DEPLOY / "kube-scheduler-config.yaml").read_text())
    profile = config["profiles"][0]
    disabled = [p["name"] for p in profile["plugins"]["multiPoint"]["disabled"]]
    assert "DynamicResources" in disabled  # otherwise both would allocate the claims
    extender = config["extenders"][0]
    # Pods whose GPUs come from claims request no extended resource: a managedResources filter
    # would keep them from the extender.
    assert "managedResources" not in extender
    assert extender["bindVerb"] == "bind" and extender["ignorable"] is False
    # NodeResourcesFit must count nvidia.com/gpu: preemption's dry run finds victims only for resources
    # its own filter sees (issue 13: with ignoredResources a GPU pod never reached /preempt).
    for entry in profile.get("pluginConfig", []):
        if entry["name"] == "NodeResourcesFit":
            assert not entry["args"].get("ignoredResources") and not entry["args"].get("ignoredResourceGroups")


def test_scheduler_profile_leaves_resource_scoring_to_the_extender() -> None:
    """The in-tree resource scores would spread GPU pods: BalancedAllocation is off and NodeResourcesFit
    scores MostAllocated on GPUs alone, only breaking the extender's ties (packing cpu and memory there
    cost GPUs on the openb trace); the extender's weight outranks what is left
    (tests/e2e checks the same against the effective configuration kube-scheduler writes)."""
    config = yaml.safe_load((DEPLOY / "kube-scheduler-config.yaml").read_text())
    profile = config["profiles"][0]
    disabled = {p["name"] for p in profile["plugins"]["score"]["disabled"]}
    assert disabled == {"NodeResourcesBalancedAllocation"}
    (fit,) = [c["args"] for c in profile["pluginConfig"] if c["name"] == "NodeResourcesFit"]
    assert fit["scoringStrategy"]["type"] == "MostAllocated"
    assert [r["name"] for r in fit["scoringStrategy"]["resources"]] == ["nvidia.com/gpu"]
    left = {
        "TaintToleration": 3,
        "NodeAffinity": 2,
        "PodTopologySpread": 2,
        "InterPodAffinity": 2,
        "ImageLocality": 1,
        "NodeResourcesFit": 1,
    }
    assert config["extenders"][0]["weight"] * 10 > sum(left.values()) * 100
    extender = parse_config(yaml.safe_load(_configmap()["data"]["config.yaml"]))
    assert extender.priorityScale == "Candidates"  # the best node 10, every other at most 9


def test_extender_config_parses_and_has_dra_on() -> None:
    config = parse_config(yaml.safe_load(_configmap()["data"]["config.yaml"]))
    assert config.dra.enabled


def _granted() -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) triples of the extender's ClusterRole(s)."""
    rules = []
    for doc in yaml.safe_load_all((DEPLOY / "rbac.yaml").read_text()):
        if doc and doc.get("kind") == "ClusterRole" and "extender" in doc["metadata"]["name"]:
            rules += doc["rules"]
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule.get("apiGroups", [])
        for resource in rule.get("resources", [])
        for verb in rule.get("verbs", [])
    }


def test_rbac_lets_the_extender_read_dra_objects_and_write_claims() -> None:
    granted = _granted()
    for resource in ("deviceclasses", "resourceslices", "resourceclaims", "devicetaintrules"):
        assert {("resource.k8s.io", resource, v) for v in ("list", "watch")} <= granted
    assert ("resource.k8s.io", "resourceclaims", "update") in granted
    assert ("resource.k8s.io", "resourceclaims/status", "update") in granted


def test_rbac_lets_the_extender_read_but_never_write_kueue_objects() -> None:
    granted = _granted()
    for kind in KUEUE_KINDS:  # every kind queues.watchKueue lists and watches
        assert {("kueue.x-k8s.io", kind.resource, v) for v in ("get", "list", "watch")} <= granted
    kueue_verbs = {verb for group, _, verb in granted if group == "kueue.x-k8s.io"}
    assert kueue_verbs == {"get", "list", "watch"}  # read-only: Kueue's controller owns these objects


def test_rbac_lets_the_reclaimer_evict_write_events_and_read_workloads() -> None:
    granted = _granted()
    assert ("", "pods/eviction", "create") in granted  # through the Eviction API, so budgets hold
    assert ("", "pods", "delete") not in granted  # never a direct delete
    assert ("", "events", "create") in granted
    assert {("kueue.x-k8s.io", "workloads", v) for v in ("get", "list", "watch")} <= granted


def test_rbac_lets_the_extender_read_every_podgroup_api_it_watches() -> None:
    granted = _granted()
    for resource in GANG_RESOURCES:  # both PodGroup APIs: read-only
        group = resource.path.split("/")[2]
        assert {(group, "podgroups", v) for v in ("list", "watch")} <= granted
        assert {verb for g, r, verb in granted if (g, r) == (group, "podgroups")} == {"get", "list", "watch"}


def test_the_image_builds_its_wheel_from_every_package() -> None:
    """The Dockerfile's builder stage copies every package pyproject.toml packs (it once copied only
    app/ and scoring/, and the image could not import allocator/)."""
    import re
    import tomllib

    root = Path(__file__).resolve().parents[2]
    include = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {pattern.rstrip("*") for pattern in include}
    builder = (root / "Dockerfile").read_text().split("FROM ")[1]
    copied = set(re.findall(r"^COPY (\w+)/ \1/$", builder, flags=re.MULTILINE))
    assert copied == packages
    assert all((root / p / "__init__.py").is_file() for p in packages)


_GO_BYTES = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def test_kube_scheduler_go_memory_limit_sits_below_its_container_limit() -> None:
    """GOGC makes GC cycles rare; GOMEMLIMIT (Go's syntax: bytes with an optional B/KiB/MiB/GiB/TiB)
    must then trigger the GC before the container's memory limit is reached."""
    scheduler = scheduler_container()
    env = {item["name"]: item["value"] for item in scheduler["env"]}
    assert isinstance(env["GOGC"], str) and int(env["GOGC"]) > 100
    number, unit = re.fullmatch(r"([0-9]+)([KMGT]iB|B)?", env["GOMEMLIMIT"]).groups()  # type: ignore[union-attr]
    go_limit = int(number) * _GO_BYTES[unit or "B"]
    container_limit = parse_quantity(scheduler["resources"]["limits"]["memory"])
    assert 0.8 * container_limit <= go_limit <= 0.95 * container_limit
