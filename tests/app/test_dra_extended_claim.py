"""A pod asking ``nvidia.com/gpu`` gets DRA devices through the special claim (issue 16 part 4),
through the service verbs in snapshot mode.

Upstream rules asserted (kube-scheduler 1.36, DRAExtendedResource): NodeResourcesFit leaves a
resource the node does not advertise to DynamicResources when a DeviceClass serves it
(``fitsRequest``); DynamicResources allocates one claim per pod for such resources on nodes whose
allocatable has none of them (``filterExtendedResources``); PreBind creates it with generateName
``<pod>-extended-resources-``, the pod as controlling owner and the annotation, writes its allocation
and reservation, then ``status.extendedResourceClaimStatus``; Unreserve deletes it.
"""

from __future__ import annotations

from typing import Any

from allocator import EXTENDED_RESOURCE_CLAIM_ANNOTATION, RequestMapping
from app.cluster.objects import pod_from_obj
from app.cluster.writes import BindError
from tests.conftest import (
    bind_pod as bind,
)
from tests.conftest import (
    device_class_obj,
    filter_body,
    gpu_device,
    make_service,
    node_obj,
    pod_obj,
    slice_obj,
)
from tests.conftest import filter_answer as wire_answer

GPU = "nvidia.com/gpu"


def gpu_class() -> dict[str, Any]:
    obj = device_class_obj("gpu")
    obj["spec"]["extendedResourceName"] = GPU
    return obj


def service_with(dra_gpus: int = 2) -> Any:
    nodes = [node_obj("dra", gpus=None), node_obj("plugin", gpus=8), node_obj("cpu", gpus=None)]
    devices = [gpu_device(f"gpu-{i}") for i in range(dra_gpus)]
    return make_service(nodes, dra=[gpu_class(), slice_obj("dra-gpus", devices, node="dra")])


def filter_answer(service: Any, pod: dict[str, Any]) -> dict[str, Any]:
    return wire_answer(service, filter_body(pod, ["dra", "plugin", "cpu"]))


def special_claims(service: Any) -> list[Any]:
    return [c for c in service.cache.dra.claims.values() if c.annotations.get(EXTENDED_RESOURCE_CLAIM_ANNOTATION)]


def test_dra_only_and_device_plugin_nodes_both_pass_a_node_without_either_does_not() -> None:
    service = service_with()
    answer = filter_answer(service, pod_obj("p", gpus=1))
    assert answer["NodeNames"] == ["dra", "plugin"]
    assert answer["FailedAndUnresolvableNodes"] == {"cpu": f"Insufficient {GPU}"}


def test_bind_on_a_dra_node_creates_allocates_and_records_the_special_claim() -> None:
    service = service_with()
    pod = pod_obj("train", gpus=1)
    filter_answer(service, pod)
    assert bind(service, pod, "dra")["Error"] == ""
    [claim] = special_claims(service)
    assert claim.name.startswith("train-extended-resources-")
    assert claim.owner_pod_uid == pod["metadata"]["uid"]
    assert [r.uid for r in claim.reserved_for] == [pod["metadata"]["uid"]]
    assert claim.allocation is not None
    assert [(r.request, r.pool, r.device) for r in claim.allocation.devices] == [
        ("container-0-request-2", "dra", "gpu-0")
    ]
    recorded = service.claim_writer.extended_claims["default/train"]
    assert recorded == (claim.name, (RequestMapping("main", GPU, "container-0-request-2"),))
    assert not service.cache.dra.inflight
    service.cache.check_invariants()


def test_the_devices_of_a_special_claim_are_taken_for_the_next_pod() -> None:
    service = service_with(dra_gpus=2)
    first = pod_obj("first", gpus=1)
    filter_answer(service, first)
    assert bind(service, first, "dra")["Error"] == ""
    answer = filter_answer(service, pod_obj("second", gpus=2))
    assert answer["NodeNames"] == ["plugin"]
    assert "dra" in answer["FailedAndUnresolvableNodes"]  # one GPU left there
    third = pod_obj("third", gpus=1)
    assert filter_answer(service, third)["NodeNames"] == ["dra", "plugin"]
    assert bind(service, third, "dra")["Error"] == ""
    devices = sorted(r.device for c in special_claims(service) for r in c.allocation.devices)  # type: ignore[union-attr]
    assert devices == ["gpu-0", "gpu-1"]


def test_a_device_plugin_node_gets_no_claim() -> None:
    service = service_with()
    pod = pod_obj("p", gpus=2)
    filter_answer(service, pod)
    assert bind(service, pod, "plugin")["Error"] == ""
    assert special_claims(service) == [] and service.claim_writer.writes == []


def test_a_failed_binding_deletes_the_special_claim_and_frees_its_devices() -> None:
    service = service_with()
    pod = pod_obj("p", gpus=2)
    filter_answer(service, pod)

    class Refusing:
        async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
            raise BindError("the API server refused", kind="refused")

    service.binder = Refusing()
    assert "refused" in bind(service, pod, "dra")["Error"]
    assert special_claims(service) == []
    assert "delete" in [what for _, what in service.claim_writer.writes]
    assert service.cache.dra.allocated_view().claimed == {}
    assert not service.cache.dra.inflight
    service.cache.check_invariants()


def test_a_claim_left_by_an_earlier_failed_bind_is_deleted_before_the_new_one_is_created() -> None:
    service = service_with()
    pod = pod_obj("p", gpus=1)
    filter_answer(service, pod)
    assert bind(service, pod, "dra")["Error"] == ""
    [left] = special_claims(service)
    # The same pod, unbound again (as if the Binding had never happened): the old claim is stale.
    service.cache.upsert_pod(pod_from_obj(pod))
    service.cache.forget(pod["metadata"]["uid"])
    assert bind(service, pod, "dra")["Error"] == ""
    [claim] = special_claims(service)
    assert claim.key != left.key
    assert (left.key, "delete") in service.claim_writer.writes
