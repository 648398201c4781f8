"""Gangs with kube-scheduler's own gang cycle on (GenericWorkload + GangScheduling, 1.36 alpha): it
filters every member through the extender before it binds any, then binds them concurrently. The
extender's answers must stay consistent inside that cycle: each member is offered only the node (and
the devices) its group's plan gave it, so no GPU or device is promised twice and every bind succeeds."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import Cluster, Group
from tests.e2e.podgroups import PODGROUPS, podgroup, podgroup_member
from tests.e2e.process import Proc, wait_for

RESOURCE = "/apis/resource.k8s.io/v1"
GANG_SCHEDULER = "gang-scheduler"


@pytest.fixture(scope="module")
def gang_scheduler(cluster: Cluster) -> Iterator[Proc]:
    """A second kube-scheduler: the shipped profile renamed, its own gang cycle switched on."""

    def edit(config: dict[str, Any]) -> None:
        config["profiles"][0]["schedulerName"] = GANG_SCHEDULER
        config["leaderElection"] = {"leaderElect": False}

    proc = cluster.plane.start_scheduler(
        cluster.extender.port,
        name=GANG_SCHEDULER,
        edit=edit,
        flags=["--feature-gates=GenericWorkload=true,GangScheduling=true"],
    )
    try:
        yield proc
    finally:
        cluster.plane.stop_component(GANG_SCHEDULER)


def _member(group: Group, name: str, podgroup_name: str, **kwargs: Any) -> None:
    pod = podgroup_member(name, podgroup_name, scheduler=GANG_SCHEDULER, **kwargs)
    pod["spec"]["nodeSelector"] = group.selector
    group.api.create(f"/api/v1/namespaces/{group.name}/pods", pod)


def _dra_nodes(group: Group, count: int, devices: int) -> str:
    """``count`` nodes, each publishing ``devices`` GPUs through DRA; the DeviceClass's name."""
    driver = f"{group.name}.gpu.example.com"
    group.api.create(
        f"{RESOURCE}/deviceclasses",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": driver},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
        },
    )
    for index in range(count):
        node = group.node(f"d{index}", gpus=None)
        group.api.create(
            f"{RESOURCE}/resourceslices",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{node}-gpus"},
                "spec": {
                    "driver": driver,
                    "nodeName": node,
                    "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                    "devices": [{"name": f"gpu-{i}"} for i in range(devices)],
                },
            },
        )
    return driver


def _cleanup_dra(group: Group, driver: str) -> None:
    for pod in group.pods():
        group.delete_pod(pod["metadata"]["name"])
    for s in group.api.items(f"{RESOURCE}/resourceslices"):
        if s["spec"]["driver"] == driver:
            group.api.delete(f"{RESOURCE}/resourceslices/{s['metadata']['name']}", grace=None)
    group.api.delete(f"{RESOURCE}/deviceclasses/{driver}", grace=None)


def test_a_podgroup_with_claims_binds_whole_and_no_device_is_given_twice(group: Group, gang_scheduler: Proc) -> None:
    driver = _dra_nodes(group, count=2, devices=2)
    try:
        group.api.create(
            f"{RESOURCE}/namespaces/{group.name}/resourceclaimtemplates",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": "one-gpu"},
                "spec": {
                    "spec": {
                        "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": driver, "count": 1}}]}
                    }
                },
            },
        )
        group.api.create(f"{PODGROUPS}/namespaces/{group.name}/podgroups", podgroup("train", 4))
        names = [f"w{i}" for i in range(4)]
        for name in names:
            _member(group, name, "train", claims=[{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}])
        nodes = group.wait_bound(*names, timeout=120)
        claims = group.api.items(f"{RESOURCE}/namespaces/{group.name}/resourceclaims")
        devices = []
        for claim in claims:
            allocation = (claim.get("status") or {}).get("allocation") or {}
            results = allocation.get("devices", {}).get("results") or []
            devices += [(r["pool"], r["device"]) for r in results]
            owner = claim["metadata"]["ownerReferences"][0]["name"]
            assert [r["name"] for r in claim["status"]["reservedFor"]] == [owner]
            assert {r["pool"] for r in results} == {nodes[owner]}  # the device is on the pod's node
        assert len(devices) == 4 and len(set(devices)) == 4  # every device once
    finally:
        _cleanup_dra(group, driver)


def test_a_podgroup_that_cannot_fit_binds_nothing(group: Group, gang_scheduler: Proc) -> None:
    for i in range(2):
        group.node(f"n{i}")
    group.api.create(f"{PODGROUPS}/namespaces/{group.name}/podgroups", podgroup("big", 3))
    names = [f"m{i}" for i in range(3)]
    for name in names:
        _member(group, name, "big", gpus=8)

    def rejected() -> str | None:
        pod = group.get_pod("m0") or {}
        for c in (pod.get("status") or {}).get("conditions") or []:
            if (
                c["type"] == "PodScheduled"
                and c["status"] == "False"
                and "3 x 8 nvidia.com/gpu" in c.get("message", "")
            ):
                return str(c["message"])
        return None

    message = wait_for("the group rejected with the extender's reason", rejected, 90)
    assert "16 nvidia.com/gpu free" in message, message
    assert not any(p["spec"].get("nodeName") for p in group.pods())
