"""DRA devices against queues: the devices of a mapped DeviceClass count against the pod's queue (an
All-mode claim cannot be counted before allocation), and the mappings are validated."""

from __future__ import annotations

from typing import Any

import pytest

from app.config import ConfigError, parse_config
from tests.app.test_fairness import GPU
from tests.conftest import (
    DRIVER,
    bind_body,
    claim_obj,
    cluster_queue,
    device_class_obj,
    filter_body,
    gpu_device,
    in_queue,
    make_service,
    node_obj,
    pod_obj,
    slice_obj,
    with_claims,
)

DRA_QUEUES = {
    "resourceFlavors": [{"metadata": {"name": "any"}}],
    "clusterQueues": [cluster_queue("cq", "any", 3)],
    "localQueues": [{"metadata": {"name": "lq", "namespace": "default"}, "spec": {"clusterQueue": "cq"}}],
    "deviceClassMappings": [{"name": GPU, "deviceClassNames": [DRIVER]}],
}


def dra_service(*claims: dict[str, Any]) -> Any:
    dra = [device_class_obj(), slice_obj("d1-gpus", [gpu_device(f"gpu-{i}") for i in range(4)], node="d1"), *claims]
    return make_service(
        [node_obj("d1", gpus=None)], [], config={"dra": {"enabled": True}, "queues": DRA_QUEUES}, dra=dra
    )


def test_dra_devices_of_a_mapped_class_count_against_the_queue(client_for: Any) -> None:
    """deviceClassMappings (Kueue's shape) counts each device a claim of gpu.example.com asks for as one
    nvidia.com/gpu. cq may use 3: a 2-device claim binds (usage 2, counted from the claim); a second
    2-device claim then exceeds the quota (2 + 2 > 3) although the node still has 2 free devices."""
    service = dra_service(claim_obj("two", count=2), claim_obj("more", count=2))
    client = client_for(service)
    first = in_queue(with_claims(pod_obj("p1", cpu=None, memory=None, uid="p1"), "two"), "lq")
    assert client.post("/filter", content=filter_body(first, ["d1"])).json()["NodeNames"] == ["d1"]
    assert client.post("/bind", content=bind_body(first, "d1")).json()["Error"] == ""
    assert service.queue_usage.usage["cq"] == {("any", GPU): 2.0}
    second = in_queue(with_claims(pod_obj("p2", cpu=None, memory=None, uid="p2"), "more"), "lq")
    result = client.post("/filter", content=filter_body(second, ["d1"])).json()
    assert result["NodeNames"] == []
    assert (
        "insufficient quota for nvidia.com/gpu in flavor any: 2 requested, 1 available" in result["FailedNodes"]["d1"]
    )


def test_dra_all_mode_of_a_mapped_class_cannot_be_counted_before_allocation(client_for: Any) -> None:
    claim = claim_obj("all")
    claim["spec"]["devices"]["requests"][0]["exactly"] = {"deviceClassName": DRIVER, "allocationMode": "All"}
    service = dra_service(claim)
    pod = in_queue(with_claims(pod_obj("p", cpu=None, memory=None, uid="p"), "all"), "lq")
    result = client_for(service).post("/filter", content=filter_body(pod, ["d1"])).json()
    assert (
        "allocationMode All of mapped DeviceClass gpu.example.com cannot be counted"
        in (result["FailedAndUnresolvableNodes"]["d1"])
    )


def test_device_class_mappings_are_validated() -> None:
    mappings = [{"name": GPU, "deviceClassNames": [DRIVER]}, {"name": "x", "deviceClassNames": [DRIVER]}]
    with pytest.raises(ConfigError, match=r"deviceClassMappings\[1\].deviceClassNames\[0\]: DeviceClass .* twice"):
        parse_config({"queues": {**DRA_QUEUES, "deviceClassMappings": mappings}})
    with pytest.raises(ConfigError, match=r"deviceClassMappings\[0\].deviceClassNames: must be a non-empty list"):
        parse_config({"queues": {**DRA_QUEUES, "deviceClassMappings": [{"name": GPU, "deviceClassNames": []}]}})
