"""Hypothesis strategies shared by the scalar == batch tests: random node snapshots and pods over a
given set of resource names, with amounts up to a given size."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import strategies as st

from scoring.framework import MILLI_DEVICES, NodeInfo, PodInfo
from scoring.resources import PodResources


def amounts(largest: int) -> st.SearchStrategy[int]:
    """0, a small count, or anything up to ``largest`` (bytes of memory, millicores)."""
    return st.one_of(st.just(0), st.integers(1, 16), st.integers(1, largest))


def resource_maps(names: Sequence[str], largest: int) -> st.SearchStrategy[dict[str, int]]:
    return st.dictionaries(st.sampled_from(names), amounts(largest), max_size=len(names))


@st.composite
def nodes(draw: st.DrawFn, names: Sequence[str], largest: int, dra: Sequence[str] = ()) -> NodeInfo:
    """An unnamed node: random allocatable, requests and NonZeroRequested cpu and memory; with ``dra``,
    some of those extended resources served by DRA devices (milli-devices, shares included) where the
    node advertises none of them, as the cluster cache builds them."""
    allocatable = draw(resource_maps(names, largest))
    dra_allocatable: dict[str, int] = {}
    dra_requested: dict[str, int] = {}
    for name in dra:
        if allocatable.get(name, 0) <= 0 and draw(st.booleans()):
            devices = draw(st.integers(1, 64))
            dra_allocatable[name] = devices * MILLI_DEVICES
            dra_requested[name] = draw(st.integers(0, devices * MILLI_DEVICES))
    return NodeInfo(
        name="",
        allocatable=allocatable,
        requested=draw(resource_maps(names, largest)),
        non_zero_cpu=draw(amounts(largest)),
        non_zero_memory=draw(amounts(largest)),
        allocatable_types=NodeInfo.types_of(allocatable, dra_allocatable),
        dra_allocatable=dra_allocatable,
        dra_requested=dra_requested,
    )


@st.composite
def pods(draw: st.DrawFn, names: Sequence[str], largest: int) -> PodInfo:
    """A pod with random requests and NonZeroRequested cpu and memory."""
    resources = PodResources(draw(resource_maps(names, largest)), draw(amounts(largest)), draw(amounts(largest)))
    return PodInfo(uid="u", namespace="ns", name="p", resources=resources)
