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

import asyncio
from typing import Any

from allocator import EXTENDED_RESOURCE_CLAIM_ANNOTATION, RequestMapping
from app.cluster.objects import pod_from_obj
from app.cluster.writes import BindError, ClaimWriteError
from tests.conftest import (
    bind_body,
    device_class_obj,
    filter_body,
    gpu_device,
    make_service,
    node_obj,
    pod_obj,
    slice_obj,
)
from tests.conftest import (
    bind_pod as bind,
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


def test_without_a_device_class_naming_the_resource_the_dra_participant_sits_out() -> None:
    """A device-plugin cluster (no class, or classes that name no extended resource): a GPU pod's
    filter and bind never reach the allocator; a class naming the resource brings it back."""
    from app.pipeline.claims import DraClaims

    nodes = [node_obj("plugin", gpus=8), node_obj("cpu", gpus=None)]
    for dra in ([], [device_class_obj("gpu")]):  # the second class has no extendedResourceName
        service = make_service(nodes, dra=dra)
        participant = service.pipeline.get(DraClaims)
        assert participant is not None
        pod = pod_obj("p", gpus=1)
        assert not participant.applies(pod_from_obj(pod))
        calls: list[str] = []
        for name in ("prefilter", "reserve", "prebind"):
            original = getattr(participant.dra, name)

            def spy(*args: Any, _name: str = name, _original: Any = original, _calls: list[str] = calls) -> Any:
                _calls.append(_name)
                return _original(*args)

            setattr(participant.dra, name, spy)
        assert wire_answer(service, filter_body(pod, ["plugin", "cpu"]))["NodeNames"] == ["plugin"]
        assert bind(service, pod, "plugin")["Error"] == ""
        assert calls == [] and service.claim_writer.writes == []
    assert service_with().pipeline.get(DraClaims).applies(pod_from_obj(pod_obj("q", gpus=1)))  # type: ignore[union-attr]


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


def _unbound_again(service: Any, pod: dict[str, Any]) -> None:
    """The pod pending again with its special claim left in the cluster (a bind that was never applied)."""
    service.cache.upsert_pod(pod_from_obj(pod))
    service.cache.forget(pod["metadata"]["uid"])


def test_a_leftover_special_claim_does_not_block_its_own_pod() -> None:
    service = service_with(dra_gpus=2)
    pod = pod_obj("p", gpus=2)
    filter_answer(service, pod)
    assert bind(service, pod, "dra")["Error"] == ""
    [left] = special_claims(service)
    _unbound_again(service, pod)
    # Its two GPUs are held by the leftover: still free for this pod, taken for any other.
    assert filter_answer(service, pod)["NodeNames"] == ["dra", "plugin"]
    assert filter_answer(service, pod_obj("other", gpus=1))["NodeNames"] == ["plugin"]
    assert bind(service, pod, "dra")["Error"] == ""
    [claim] = special_claims(service)
    assert claim.key != left.key and (left.key, "delete") in service.claim_writer.writes


def test_a_leftover_special_claim_is_deleted_when_the_pod_binds_to_a_device_plugin_node() -> None:
    service = service_with(dra_gpus=2)
    pod = pod_obj("p", gpus=2)
    filter_answer(service, pod)
    assert bind(service, pod, "dra")["Error"] == ""
    _unbound_again(service, pod)
    assert bind(service, pod, "plugin")["Error"] == ""
    assert special_claims(service) == []
    assert service.cache.dra.allocated_view().claimed == {}


def test_each_failing_write_of_the_special_claim_deletes_it_and_frees_the_devices() -> None:
    for failing in ("create", "allocate", "record_extended_claim"):
        service = service_with(dra_gpus=2)
        writer = service.claim_writer
        real = getattr(writer, failing)

        async def refuse(*args: Any, _real: Any = real, _what: str = failing) -> Any:
            if _what != "create":
                await _real(*args)
            raise ClaimWriteError(f"{_what}: 422 Invalid")

        setattr(writer, failing, refuse)
        pod = pod_obj("p", gpus=1)
        filter_answer(service, pod)
        answer = bind(service, pod, "dra")
        assert "422" in answer["Error"], failing
        assert special_claims(service) == [], failing
        assert service.cache.dra.allocated_view().claimed == {} and not service.cache.dra.inflight, failing
        assert not service.cache.pods[pod["metadata"]["uid"]].node_name, failing
        service.cache.check_invariants()


def test_binding_conditions_of_the_special_claims_devices_are_waited_for() -> None:
    attached = {**gpu_device("gpu-0"), "bindingConditions": ["attached"], "bindingFailureConditions": ["failed"]}
    nodes = [node_obj("dra", gpus=None)]
    config = {"dra": {"bindingTimeoutSeconds": 0.05}}
    service = make_service(nodes, config=config, dra=[gpu_class(), slice_obj("dra-gpus", [attached], node="dra")])
    pod = pod_obj("p", gpus=1)
    filter_answer(service, pod)
    answer = bind(service, pod, "dra")
    assert "attached" in answer["Error"] or "timed out" in answer["Error"]
    assert special_claims(service) == []
    assert not service.cache.pods[pod["metadata"]["uid"]].node_name


def test_a_second_bind_of_the_same_pod_while_the_first_runs_is_refused() -> None:
    service = service_with()
    pod = pod_obj("p", gpus=1)
    filter_answer(service, pod)
    service.cache.upsert_pod(pod_from_obj(pod))
    started, release = asyncio.Event(), asyncio.Event()

    class Slow:
        async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
            started.set()
            await release.wait()

    service.binder = Slow()

    async def both() -> tuple[dict[str, Any], dict[str, Any]]:
        first = asyncio.create_task(service.bind(bind_body(pod, "dra")))
        await started.wait()
        second = await service.bind(bind_body(pod, "dra"))
        release.set()
        return await first, second

    first, second = asyncio.run(both())
    assert first["Error"] == "" and "still in progress" in second["Error"]
    assert len(special_claims(service)) == 1
