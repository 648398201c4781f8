"""DRA claims allocated by the extender in ResourceSlice priority order (KEP-5773), reserved for the
pod before the Binding, and freed when the pod goes, against the real API server and claim controller."""

from __future__ import annotations

from typing import Any

from tests.e2e.conftest import Group
from tests.e2e.process import wait_for

RESOURCE = "/apis/resource.k8s.io/v1"
PRIORITY = "dra.kube-gpu-extender.io/priority"


def _devices(names: list[str]) -> list[dict[str, Any]]:
    return [{"name": n, "attributes": {"index": {"int": i}}} for i, n in enumerate(names)]


def _dra_node(group: Group) -> tuple[str, str]:
    """A node whose GPUs are published through DRA: a preferred slice (gpu-0) and a fallback (gpu-9)."""
    driver = f"{group.name}.gpu.example.com"
    node = group.node("dra", gpus=None)
    group.api.create(
        f"{RESOURCE}/deviceclasses",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": driver},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
        },
    )
    for slice_name, devices, priority in (("fallback", ["gpu-9"], "0"), ("preferred", ["gpu-0"], "1")):
        group.api.create(
            f"{RESOURCE}/resourceslices",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{node}-{slice_name}", "annotations": {PRIORITY: priority}},
                "spec": {
                    "driver": driver,
                    "nodeName": node,
                    "pool": {"name": node, "generation": 1, "resourceSliceCount": 2},
                    "devices": _devices(devices),
                },
            },
        )
    return node, driver


def _claim_spec(device_class: str) -> dict[str, Any]:
    return {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": device_class, "count": 1}}]}}


def _claim(group: Group, name: str) -> dict[str, Any]:
    claim: dict[str, Any] = group.api.get(f"{RESOURCE}/namespaces/{group.name}/resourceclaims/{name}")
    return claim


def _allocated_devices(claim: dict[str, Any]) -> list[str]:
    results = ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or []
    return [r["device"] for r in results]


def _cleanup(group: Group, driver: str) -> None:
    for pod in group.pods():
        group.delete_pod(pod["metadata"]["name"])
    for s in group.api.items(f"{RESOURCE}/resourceslices"):
        if s["spec"]["driver"] == driver:
            group.api.delete(f"{RESOURCE}/resourceslices/{s['metadata']['name']}", grace=None)
    group.api.delete(f"{RESOURCE}/deviceclasses/{driver}", grace=None)


def test_direct_claim_is_allocated_by_priority_reserved_and_freed(group: Group) -> None:
    node, driver = _dra_node(group)
    try:
        for name in ("c1", "c2"):
            group.api.create(
                f"{RESOURCE}/namespaces/{group.name}/resourceclaims",
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaim",
                    "metadata": {"name": name},
                    "spec": _claim_spec(driver),
                },
            )
        pod = group.pod("p1", claims=[{"name": "gpu", "resourceClaimName": "c1"}])
        assert group.wait_bound("p1") == {"p1": node}
        claim = _claim(group, "c1")
        assert _allocated_devices(claim) == ["gpu-0"]  # the preferred slice first
        assert [r["uid"] for r in claim["status"]["reservedFor"]] == [pod["metadata"]["uid"]]
        # The node's last device goes to the next claim; a third pod has nothing left.
        group.pod("p2", claims=[{"name": "gpu", "resourceClaimName": "c2"}])
        group.wait_bound("p2")
        assert _allocated_devices(_claim(group, "c2")) == ["gpu-9"]
        group.api.create(
            f"{RESOURCE}/namespaces/{group.name}/resourceclaims",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": "c3"},
                "spec": _claim_spec(driver),
            },
        )
        group.pod("p3", claims=[{"name": "gpu", "resourceClaimName": "c3"}])
        assert "cannot allocate all claims" in group.wait_unschedulable("p3")
        # Freed: the claim controller drops the deleted pod's reservation and deallocates c1.
        group.delete_pod("p1")
        wait_for("c1 deallocated", lambda: not (_claim(group, "c1").get("status") or {}).get("allocation"))
        assert group.wait_bound("p3") == {"p3": node}
        assert _allocated_devices(_claim(group, "c3")) == ["gpu-0"]
    finally:
        _cleanup(group, driver)


def test_claim_from_a_template_is_created_allocated_and_reserved(group: Group) -> None:
    node, driver = _dra_node(group)
    try:
        group.api.create(
            f"{RESOURCE}/namespaces/{group.name}/resourceclaimtemplates",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": "one-gpu"},
                "spec": {"spec": _claim_spec(driver)},
            },
        )
        pod = group.pod("p1", claims=[{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}])
        assert group.wait_bound("p1") == {"p1": node}
        statuses = group.get_pod("p1")["status"]["resourceClaimStatuses"]  # type: ignore[index]
        claim = _claim(group, statuses[0]["resourceClaimName"])
        assert _allocated_devices(claim) == ["gpu-0"]
        assert [r["uid"] for r in claim["status"]["reservedFor"]] == [pod["metadata"]["uid"]]
    finally:
        _cleanup(group, driver)


def _slice(name: str, driver: str, node: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {"driver": driver, "nodeName": node, **spec},
    }


def _device_class(group: Group, extended_resource_name: str = "") -> str:
    driver = f"{group.name}.gpu.example.com"
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]}
    if extended_resource_name:
        spec["extendedResourceName"] = extended_resource_name
    group.api.create(
        f"{RESOURCE}/deviceclasses",
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": driver}, "spec": spec},
    )
    return driver


def _claim_with(group: Group, name: str, exactly: dict[str, Any]) -> None:
    group.api.create(
        f"{RESOURCE}/namespaces/{group.name}/resourceclaims",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
        },
    )


def _results(claim: dict[str, Any]) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = claim["status"]["allocation"]["devices"]["results"]
    return results


def test_two_pods_share_one_gpu_by_capacity(group: Group) -> None:
    """Consumable capacity: one device with allowMultipleAllocations split between two pods; the
    API server accepts both shares (shareID, consumedCapacity rounded by the requestPolicy) and a
    third request that does not fit the rest is left unschedulable."""
    driver = _device_class(group)
    node = group.node("shared", gpus=None)
    try:
        memory = {
            "value": "40Gi",
            "requestPolicy": {"default": "1Gi", "validRange": {"min": "1Gi", "max": "40Gi", "step": "1Gi"}},
        }
        device = {"name": "gpu-0", "allowMultipleAllocations": True, "capacity": {"memory": memory}}
        pool = {"name": node, "generation": 1, "resourceSliceCount": 1}
        group.api.create(
            f"{RESOURCE}/resourceslices", _slice(f"{node}-gpus", driver, node, {"pool": pool, "devices": [device]})
        )
        for name, amount in (("small", "9728Mi"), ("large", "30Gi"), ("more", "1Gi")):
            _claim_with(group, name, {"deviceClassName": driver, "capacity": {"requests": {"memory": amount}}})
        group.pod("p1", claims=[{"name": "gpu", "resourceClaimName": "small"}])
        group.pod("p2", claims=[{"name": "gpu", "resourceClaimName": "large"}])
        assert group.wait_bound("p1", "p2") == {"p1": node, "p2": node}
        (small,) = _results(_claim(group, "small"))
        (large,) = _results(_claim(group, "large"))
        assert (small["device"], large["device"]) == ("gpu-0", "gpu-0")
        assert small["consumedCapacity"] == {"memory": "10Gi"}  # 9.5Gi rounded up to the 1Gi step
        assert large["consumedCapacity"] == {"memory": "30Gi"}
        assert small["shareID"] and large["shareID"] and small["shareID"] != large["shareID"]
        # 10Gi + 30Gi used: a third share of even 1Gi does not fit.
        group.pod("p3", claims=[{"name": "gpu", "resourceClaimName": "more"}])
        assert "cannot allocate all claims" in group.wait_unschedulable("p3")
        group.delete_pod("p1")
        wait_for("small deallocated", lambda: not (_claim(group, "small").get("status") or {}).get("allocation"))
        assert group.wait_bound("p3") == {"p3": node}
        (more,) = _results(_claim(group, "more"))
        assert (more["device"], more["consumedCapacity"]) == ("gpu-0", {"memory": "1Gi"})
    finally:
        _cleanup(group, driver)


def test_a_partition_blocks_the_whole_gpu(group: Group) -> None:
    """Partitionable devices: counters in their own slice of the pool (1.36 shape), a whole GPU and
    two halves consuming them; a bound half keeps the whole GPU from the next pod until it is freed."""
    driver = _device_class(group)
    node = group.node("mig", gpus=None)
    try:
        pool = {"name": node, "generation": 1, "resourceSliceCount": 2}
        counters = [{"name": "gpu-0", "counters": {"memory": {"value": "40Gi"}}}]
        group.api.create(
            f"{RESOURCE}/resourceslices",
            _slice(f"{node}-counters", driver, node, {"pool": pool, "sharedCounters": counters}),
        )

        def device(name: str, kind: str, memory: str) -> dict[str, Any]:
            return {
                "name": name,
                "attributes": {"kind": {"string": kind}},
                "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory": {"value": memory}}}],
            }

        devices = [
            device("gpu-0", "whole", "40Gi"),
            device("gpu-0-a", "half", "20Gi"),
            device("gpu-0-b", "half", "20Gi"),
        ]
        group.api.create(
            f"{RESOURCE}/resourceslices", _slice(f"{node}-devices", driver, node, {"pool": pool, "devices": devices})
        )
        for name, kind in (("half", "half"), ("whole", "whole")):
            selector = f'device.attributes["{driver}"].kind == "{kind}"'
            _claim_with(group, name, {"deviceClassName": driver, "selectors": [{"cel": {"expression": selector}}]})
        group.pod("p1", claims=[{"name": "gpu", "resourceClaimName": "half"}])
        assert group.wait_bound("p1") == {"p1": node}
        assert [r["device"] for r in _results(_claim(group, "half"))] == ["gpu-0-a"]
        group.pod("p2", claims=[{"name": "gpu", "resourceClaimName": "whole"}])
        assert "cannot allocate all claims" in group.wait_unschedulable("p2")
        group.delete_pod("p1")
        wait_for("half deallocated", lambda: not (_claim(group, "half").get("status") or {}).get("allocation"))
        assert group.wait_bound("p2") == {"p2": node}
        assert [r["device"] for r in _results(_claim(group, "whole"))] == ["gpu-0"]
    finally:
        _cleanup(group, driver)


def _scheduling_error(group: Group, name: str) -> str | None:
    """The PodScheduled=False message of a failed scheduling attempt (a /bind Error), if any."""
    pod = group.get_pod(name) or {}
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c["type"] == "PodScheduled" and c["status"] == "False" and "binding conditions" in c.get("message", ""):
            return str(c["message"])
    return None


def _attachable_node(group: Group, driver: str, kind: str) -> str:
    """A node with one GPU whose binding needs the condition "attached" (failing on "failed")."""
    node = group.node(kind, gpus=None)
    device = {"name": "gpu-0", "bindingConditions": ["attached"], "bindingFailureConditions": ["failed"]}
    pool = {"name": node, "generation": 1, "resourceSliceCount": 1}
    group.api.create(
        f"{RESOURCE}/resourceslices", _slice(f"{node}-gpus", driver, node, {"pool": pool, "devices": [device]})
    )
    return node


def test_a_binding_condition_set_true_lets_the_pod_bind(group: Group) -> None:
    """DRADeviceBindingConditions: /bind writes the allocation (the API server accepts the copied
    conditions and allocationTimestamp), waits, and binds once the test, acting as the driver, sets
    the device's condition True in status.devices."""
    driver = _device_class(group)
    node = _attachable_node(group, driver, "attach")
    try:
        _claim_with(group, "c", {"deviceClassName": driver})
        group.pod("p1", claims=[{"name": "gpu", "resourceClaimName": "c"}])
        claim = wait_for("c allocated", lambda: _claim(group, "c") if _allocated_devices(_claim(group, "c")) else None)
        (result,) = _results(claim)
        assert result["bindingConditions"] == ["attached"] and result["bindingFailureConditions"] == ["failed"]
        assert claim["status"]["allocation"]["allocationTimestamp"]
        assert not (group.get_pod("p1") or {}).get("spec", {}).get("nodeName")  # waiting, not bound yet
        condition = {
            "type": "attached",
            "status": "True",
            "reason": "Attached",
            "message": "",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
        status = {"driver": driver, "pool": result["pool"], "device": "gpu-0", "conditions": [condition]}
        claim["status"]["devices"] = [status]
        group.api.put(f"{RESOURCE}/namespaces/{group.name}/resourceclaims/c/status", claim)
        assert group.wait_bound("p1") == {"p1": node}
    finally:
        _cleanup(group, driver)


def test_a_binding_condition_that_never_becomes_true_fails_the_bind_and_frees_the_device(group: Group) -> None:
    """After dra.bindingTimeoutSeconds /bind answers an Error (kube-scheduler records it and retries)
    and the allocation is undone between attempts."""
    driver = _device_class(group)
    _attachable_node(group, driver, "never")
    try:
        _claim_with(group, "c", {"deviceClassName": driver})
        group.pod("p1", claims=[{"name": "gpu", "resourceClaimName": "c"}])
        wait_for("c allocated", lambda: _allocated_devices(_claim(group, "c")))
        message = wait_for("the bind error", lambda: _scheduling_error(group, "p1"))
        assert "not met within" in message and "attached" in message
        wait_for("c deallocated", lambda: not (_claim(group, "c").get("status") or {}).get("allocation"))
        assert not (group.get_pod("p1") or {}).get("spec", {}).get("nodeName")
    finally:
        _cleanup(group, driver)


def test_a_no_schedule_tainted_device_is_skipped_unless_tolerated(group: Group) -> None:
    driver = _device_class(group)
    node = group.node("tainted", gpus=None)
    try:
        device = {"name": "gpu-0", "taints": [{"key": "maintenance", "effect": "NoSchedule"}]}
        pool = {"name": node, "generation": 1, "resourceSliceCount": 1}
        group.api.create(
            f"{RESOURCE}/resourceslices", _slice(f"{node}-gpus", driver, node, {"pool": pool, "devices": [device]})
        )
        _claim_with(group, "plain", {"deviceClassName": driver})
        toleration = {"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"}
        _claim_with(group, "tolerant", {"deviceClassName": driver, "tolerations": [toleration]})
        group.pod("p1", claims=[{"name": "gpu", "resourceClaimName": "plain"}])
        assert "cannot allocate all claims" in group.wait_unschedulable("p1")
        group.pod("p2", claims=[{"name": "gpu", "resourceClaimName": "tolerant"}])
        assert group.wait_bound("p2") == {"p2": node}
        (result,) = _results(_claim(group, "tolerant"))
        assert result["device"] == "gpu-0" and result["tolerations"] == [toleration]
    finally:
        _cleanup(group, driver)


def test_a_device_taint_rule_keeps_new_claims_off_the_device(group: Group) -> None:
    """Issue 16 part 5: a resource.k8s.io/v1beta2 DeviceTaintRule with effect NoSchedule taints gpu-0
    (first in the slice, so first fit would take it): the claim gets gpu-1. Deleting the rule makes
    gpu-0 available again."""
    driver = _device_class(group)
    node = group.node("ruled", gpus=None)
    rule_path = f"/apis/resource.k8s.io/v1beta2/devicetaintrules/{group.name}-maintenance"
    try:
        pool = {"name": node, "generation": 1, "resourceSliceCount": 1}
        devices = [{"name": "gpu-0"}, {"name": "gpu-1"}]
        group.api.create(
            f"{RESOURCE}/resourceslices", _slice(f"{node}-gpus", driver, node, {"pool": pool, "devices": devices})
        )
        group.api.create(
            "/apis/resource.k8s.io/v1beta2/devicetaintrules",
            {
                "apiVersion": "resource.k8s.io/v1beta2",
                "kind": "DeviceTaintRule",
                "metadata": {"name": f"{group.name}-maintenance"},
                "spec": {
                    "deviceSelector": {"driver": driver, "pool": node, "device": "gpu-0"},
                    "taint": {"key": "maintenance", "effect": "NoSchedule"},
                },
            },
        )
        wait_for("the rule in the extender's cache", lambda: _taint_rules(group) == 1)
        _claim_with(group, "first", {"deviceClassName": driver})
        group.pod("p1", claims=[{"name": "gpu", "resourceClaimName": "first"}])
        assert group.wait_bound("p1") == {"p1": node}
        assert _allocated_devices(_claim(group, "first")) == ["gpu-1"]
        group.api.delete(rule_path, grace=None)
        wait_for("the rule gone from the extender's cache", lambda: _taint_rules(group) == 0)
        _claim_with(group, "second", {"deviceClassName": driver})
        group.pod("p2", claims=[{"name": "gpu", "resourceClaimName": "second"}])
        assert group.wait_bound("p2") == {"p2": node}
        assert _allocated_devices(_claim(group, "second")) == ["gpu-0"]
    finally:
        if group.api.find(rule_path) is not None:
            group.api.delete(rule_path, grace=None)
        _cleanup(group, driver)


def _taint_rules(group: Group) -> int:
    counts: dict[str, int] = group.cluster.extender.get("/debug?decisions=0").json()["cache"]["counts"]
    return counts["deviceTaintRules"]


def test_cpu_pods_keep_off_a_dra_only_gpu_node(group: Group) -> None:
    """Issue 16 part 6: a DeviceClass with extendedResourceName nvidia.com/gpu makes the GPUs a DRA
    driver publishes a resource type of their node, so ScarceResourceAvoidance steers CPU-only pods
    to the node without GPUs (without it the two nodes look alike and kube-scheduler spreads them)."""
    driver = _device_class(group, extended_resource_name="nvidia.com/gpu")
    gpu_node = group.node("dra", gpus=None)
    cpu_node = group.node("cpu", gpus=None)
    try:
        pool = {"name": gpu_node, "generation": 1, "resourceSliceCount": 1}
        devices = [{"name": f"gpu-{i}"} for i in range(8)]
        spec = {"pool": pool, "devices": devices}
        group.api.create(f"{RESOURCE}/resourceslices", _slice(f"{gpu_node}-gpus", driver, gpu_node, spec))
        names = ("c1", "c2", "c3", "c4")
        for name in names:
            group.pod(name)
        assert set(group.wait_bound(*names).values()) == {cpu_node}
    finally:
        _cleanup(group, driver)


def test_a_pod_asking_nvidia_gpu_gets_dra_devices_through_the_special_claim(group: Group) -> None:
    """Issue 16 part 4: on a node that advertises no nvidia.com/gpu but publishes GPUs of a DeviceClass
    with extendedResourceName nvidia.com/gpu, a pod asking nvidia.com/gpu: 2 passes kube-scheduler's
    NodeResourcesFit (DRAExtendedResource leaves it to DRA) and the extender creates the special claim
    as kube-scheduler's DynamicResources would: owned by the pod, annotated, allocated and reserved,
    and named in the pod's status.extendedResourceClaimStatus. A third GPU cannot be had there."""
    driver = _device_class(group, extended_resource_name="nvidia.com/gpu")
    gpu_node = group.node("dra", gpus=None)
    try:
        pool = {"name": gpu_node, "generation": 1, "resourceSliceCount": 1}
        spec = {"pool": pool, "devices": [{"name": f"gpu-{i}"} for i in range(3)]}
        group.api.create(f"{RESOURCE}/resourceslices", _slice(f"{gpu_node}-gpus", driver, gpu_node, spec))
        pod = group.pod("train", gpus=2)
        assert group.wait_bound("train") == {"train": gpu_node}
        recorded = (group.get_pod("train") or {})["status"]["extendedResourceClaimStatus"]
        claim = _claim(group, recorded["resourceClaimName"])
        assert claim["metadata"]["name"].startswith("train-extended-resources-")
        assert claim["metadata"]["annotations"]["resource.kubernetes.io/extended-resource-claim"] == "true"
        [owner] = claim["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"], owner["controller"]) == ("Pod", pod["metadata"]["uid"], True)
        [request] = claim["spec"]["devices"]["requests"]
        exactly = request["exactly"]
        assert (exactly["deviceClassName"], exactly["allocationMode"], exactly["count"]) == (driver, "ExactCount", 2)
        assert sorted(_allocated_devices(claim)) == ["gpu-0", "gpu-1"]
        assert [r["uid"] for r in claim["status"]["reservedFor"]] == [pod["metadata"]["uid"]]
        assert recorded["requestMappings"] == [
            {"containerName": "main", "resourceName": "nvidia.com/gpu", "requestName": request["name"]}
        ]
        group.pod("more", gpus=2)
        group.wait_unschedulable("more")  # one GPU left on the only node
        assert (group.get_pod("more") or {})["spec"].get("nodeName") is None
    finally:
        _cleanup(group, driver)


def test_claim_pods_pack_onto_one_dra_node(group: Group) -> None:
    """The shipped tieBreak (mostAllocated: nvidia.com/gpu): pods whose GPUs come through ResourceClaims
    pack like device-plugin pods (test_placement). kube-scheduler's NodeResourcesFit sees no GPU request
    in their containers, and on two empty 8-GPU, 64-core nodes the shipped workload's types cannot tell
    an empty node from a used one, so without the extender's tie-break its random pick spreads them."""
    driver = _device_class(group, extended_resource_name="nvidia.com/gpu")
    nodes = [group.node(suffix, gpus=None) for suffix in ("a", "b")]
    try:
        for node in nodes:
            pool = {"name": node, "generation": 1, "resourceSliceCount": 1}
            spec = {"pool": pool, "devices": [{"name": f"gpu-{i}"} for i in range(8)]}
            group.api.create(f"{RESOURCE}/resourceslices", _slice(f"{node}-gpus", driver, node, spec))
        names = [f"p{i}" for i in range(6)]
        for name in names:
            _claim_with(group, name, {"deviceClassName": driver, "count": 1})
            group.pod(name, claims=[{"name": "gpu", "resourceClaimName": name}])
        placed = group.wait_bound(*names)
        assert len(set(placed.values())) == 1, placed
        # The other node is still whole: a claim for all 8 of its GPUs is allocated there.
        _claim_with(group, "whole", {"deviceClassName": driver, "count": 8})
        group.pod("whole", claims=[{"name": "gpu", "resourceClaimName": "whole"}])
        (node,) = group.wait_bound("whole").values()
        assert node != next(iter(placed.values()))
        assert len(_allocated_devices(_claim(group, "whole"))) == 8
    finally:
        _cleanup(group, driver)
