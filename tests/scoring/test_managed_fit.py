"""ManagedResourcesFit: the Filter check for extender-managed resources (in-tree Fit semantics).

want > allocatable              -> UnschedulableAndUnresolvable (no preemption can help)
requested + want > allocatable  -> Unschedulable               (preemption may help)
reason: "Insufficient <resource>"
"""

from __future__ import annotations

from dataclasses import replace

from scoring.framework import SUCCESS, Code, PodInfo, PodResources, Status
from scoring.managed_fit import NAME, ManagedResourcesFit, insufficient_reason
from tests.scoring.builders import cpu_node, node, table_of
from tests.scoring.builders import pod_requesting as pod

GPU = "nvidia.com/gpu"
FPGA = "example.com/fpga"


FIT = ManagedResourcesFit([GPU])


def test_name_and_reason() -> None:
    assert NAME == "ManagedResourcesFit"
    assert FIT.name == "ManagedResourcesFit"
    assert insufficient_reason(GPU) == "Insufficient nvidia.com/gpu"


def test_fits_exactly() -> None:
    # 6 used + 2 wanted = 8 <= 8
    status = FIT.filter(pod({GPU: "2"}), node({GPU: 8}, {GPU: 6}))
    assert status == SUCCESS
    assert status.passed
    assert status.code is Code.SUCCESS


def test_insufficient_is_unschedulable() -> None:
    # 7 used + 2 wanted = 9 > 8, but 2 <= 8 on an empty node -> preemption may help
    status = FIT.filter(pod({GPU: "2"}), node({GPU: 8}, {GPU: 7}))
    assert status == Status(Code.UNSCHEDULABLE, "Insufficient nvidia.com/gpu")
    assert not status.passed


def test_want_more_than_allocatable_is_unresolvable() -> None:
    # 9 > 8 even on an empty node
    status = FIT.filter(pod({GPU: "9"}), node({GPU: 8}))
    assert status == Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, "Insufficient nvidia.com/gpu")


def test_pod_not_requesting_passes_full_node() -> None:
    assert FIT.filter(pod({"cpu": "1"}), node({GPU: 8, "cpu": 1000}, {GPU: 8, "cpu": 1000})).passed
    assert FIT.filter(pod(), node({GPU: 8}, {GPU: 9})).passed


def test_explicit_zero_request_passes() -> None:
    assert FIT.filter(pod({GPU: "0"}), node({}, {})).passed


def test_node_without_resource_is_unresolvable() -> None:
    status = FIT.filter(pod({GPU: "1"}), node({"cpu": 32000}))
    assert status == Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, "Insufficient nvidia.com/gpu")
    status = FIT.filter(pod({GPU: "1"}), node({"cpu": 32000, GPU: 0}))
    assert status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE


def test_unmanaged_resources_are_not_checked() -> None:
    # cpu is not managed: 999 cores on a 1-core node still passes this check
    assert FIT.filter(pod({"cpu": "999"}), node({"cpu": 1000})).passed


def test_init_container_request_is_counted() -> None:
    # init container gpu 3 vs container gpu 1 -> want max(1, 3) = 3; 6 + 3 = 9 > 8
    p = pod({GPU: "1"}, initContainers=[{"name": "i", "resources": {"requests": {GPU: "3"}}}])
    assert FIT.filter(p, node({GPU: 8}, {GPU: 6})).code is Code.UNSCHEDULABLE
    assert FIT.filter(p, node({GPU: 8}, {GPU: 5})).passed


def test_any_unresolvable_resource_makes_status_unresolvable() -> None:
    fit = ManagedResourcesFit([GPU, FPGA])
    # gpu: 7 + 2 > 8 (Unschedulable); fpga: 3 > 2 (Unresolvable) -> Unresolvable
    status = fit.filter(pod({GPU: "2", FPGA: "3"}), node({GPU: 8, FPGA: 2}, {GPU: 7}))
    assert status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert FPGA in status.reason


def test_second_resource_insufficient() -> None:
    fit = ManagedResourcesFit([GPU, FPGA])
    status = fit.filter(pod({GPU: "1", FPGA: "1"}), node({GPU: 8, FPGA: 2}, {FPGA: 2}))
    assert status == Status(Code.UNSCHEDULABLE, "Insufficient example.com/fpga")


def test_duplicate_managed_names_are_deduplicated() -> None:
    fit = ManagedResourcesFit([GPU, FPGA, GPU])
    assert fit.resources == (GPU, FPGA)


def test_fits_with_explicit_totals() -> None:
    # preemption: usage minus victims
    p = pod({GPU: "4"})
    assert FIT.fits(p, {GPU: 8}, {GPU: 4}).passed
    assert FIT.fits(p, {GPU: 8}, {GPU: 5}).code is Code.UNSCHEDULABLE
    assert FIT.fits(p, {GPU: 3}, {}).code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE


def test_batch_verdicts_follow_the_node() -> None:
    fit = ManagedResourcesFit(["cpu"])
    wants_3 = PodInfo("u", "ns", "p", PodResources({"cpu": 3000}, 3000, 0))
    table = table_of(cpu_node("a", 4000), cpu_node("b", 2000))
    batch = table.batch(["a", "b"])
    assert batch is not None
    assert fit.filter_batch(wants_3, batch).codes.tolist() == [0, 2]
    table.upsert(cpu_node("a", 4000, used=2000))  # the same request now: "a" is full
    batch = table.batch(["a", "b"])
    assert batch is not None
    verdicts = fit.filter_batch(wants_3, batch)
    assert verdicts.codes.tolist() == [1, 2]
    assert [verdicts.status(i).reason for i in range(2)] == ["Insufficient cpu"] * 2


def test_batch_pod_asking_for_none_passes_every_node() -> None:
    """A pod that asks for no managed resource (CPU only, or GPUs through claims) passes where the
    resource is used up, over-committed or absent, as the scalar check says node by node."""
    nodes = [node({GPU: 8}, {GPU: 8}), node({GPU: 2}, {GPU: 3}), node({"cpu": 4000})]
    nodes = [replace(info, name=f"n{index}") for index, info in enumerate(nodes)]
    table = table_of(*nodes)
    batch = table.batch([info.name for info in nodes])
    assert batch is not None
    for asking in (pod({"cpu": "1"}), pod({GPU: "0"}), pod()):
        verdicts = FIT.filter_batch(asking, batch)
        assert verdicts.codes.tolist() == [0, 0, 0]
        assert [verdicts.status(i) for i in range(3)] == [FIT.filter(asking, info) for info in nodes]
    full = FIT.filter_batch(pod({GPU: "1"}), batch)  # the same nodes for a pod that asks: two fail
    assert full.codes.tolist() == [1, 1, 2]
