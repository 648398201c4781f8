"""Properties of consumable capacity and shared counters under any sequence of claims.

Pods come and go one after the other (each allocation fed back as existing shares or allocated
devices, like the cache does, and any of them released again); whatever happens:

* the shares of a device never consume more than its capacity, and every share consumes at least
  what it asked for and something the device's request policy allows;
* no counter of a pool is ever overdrawn by the devices allocated from it;
* a request for partitions is allocated exactly when some set of free devices fits the counters
  (brute force).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from allocator import Allocated, DeviceID, ResourceClaim, Unschedulable
from k8s_semantics.quantity import parse_quantity
from tests.allocator.builders import DRIVER, NODE, allocate, claim, exactly, slice_obj

GI = 2**30


class Ledger:
    """Shares held by allocated claims (a ``SharedDevices``), and the devices held whole."""

    def __init__(self) -> None:
        self.claims: dict[str, list[tuple[DeviceID, dict[str, Fraction] | None, bool]]] = {}

    def add(self, name: str, outcome: Allocated) -> None:
        entries = []
        for result in outcome.results[0].devices:
            consumed = None
            if result.consumed_capacity is not None:
                consumed = {k: parse_quantity(v) for k, v in result.consumed_capacity.items()}
            entries.append((result.id, consumed, result.shared))
        self.claims[name] = entries

    def __contains__(self, device: object) -> bool:
        return any(d == device and shared for entries in self.claims.values() for d, _, shared in entries)

    def __bool__(self) -> bool:
        return any(shared for entries in self.claims.values() for _, _, shared in entries)

    def consumed(self, device: DeviceID) -> Mapping[str, Fraction] | None:
        total: dict[str, Fraction] | None = None
        for entries in self.claims.values():
            for d, consumed, _ in entries:
                if d == device and consumed is not None:
                    total = total or {}
                    for k, v in consumed.items():
                        total[k] = total.get(k, Fraction(0)) + v
        return total

    def whole(self) -> frozenset[DeviceID]:
        return frozenset(d for entries in self.claims.values() for d, _, shared in entries if not shared)

    def held(self) -> set[DeviceID]:
        return {d for entries in self.claims.values() for d, _, _ in entries}


# ---------------------------------------------------------------------------------------- capacity


@dataclass(frozen=True)
class SharedDevice:
    capacity_gi: int
    policy: dict[str, Any] | None


policies = st.one_of(
    st.none(),
    st.builds(
        lambda lo, step, hi: {
            "default": f"{lo}Gi",
            "validRange": {"min": f"{lo}Gi", "step": f"{step}Gi", **({"max": f"{hi}Gi"} if hi else {})},
        },
        st.integers(1, 2),
        st.integers(1, 3),
        st.sampled_from([0, 8, 12]),
    ),
    st.just({"default": "2Gi", "validValues": ["2Gi", "4Gi", "8Gi"]}),
)
shared_devices = st.lists(st.builds(SharedDevice, st.integers(1, 16), policies), min_size=1, max_size=3)
# A step: ("alloc", [requests per claim of one pod]) where a request is MiB or None (no capacity request),
# or ("free", k): release the k-th claim still held.
steps = st.lists(
    st.one_of(
        st.tuples(st.just("alloc"), st.lists(st.one_of(st.none(), st.integers(1, 12 * 1024)), min_size=1, max_size=2)),
        st.tuples(st.just("free"), st.integers(0, 5)),
    ),
    min_size=1,
    max_size=8,
)


def policy_allows(consumed: Fraction, requested: Fraction | None, policy: dict[str, Any] | None) -> bool:
    if policy is None:
        return requested is None or consumed == requested
    if consumed == parse_quantity(policy["default"]):
        return True
    if requested is not None and consumed < requested:
        return False
    if "validValues" in policy:
        return consumed in {parse_quantity(v) for v in policy["validValues"]}
    rng = policy["validRange"]
    lo, step = parse_quantity(rng["min"]), parse_quantity(rng["step"])
    return (
        consumed >= lo and (consumed - lo) % step == 0 and ("max" not in rng or consumed <= parse_quantity(rng["max"]))
    )


@settings(max_examples=150, deadline=None)
@given(shared_devices, steps)
def test_shares_never_exceed_capacity_and_follow_the_policy(devices: list[SharedDevice], plan: list[Any]) -> None:
    objs = []
    for i, d in enumerate(devices):
        memory: dict[str, Any] = {"value": f"{d.capacity_gi}Gi"}
        if d.policy is not None:
            memory["requestPolicy"] = d.policy
        objs.append({"name": f"g{i}", "allowMultipleAllocations": True, "capacity": {"memory": memory}})
    slices = [slice_obj("s", objs)]
    ledger = Ledger()
    serial = 0
    for kind, arg in plan:
        if kind == "free":
            if ledger.claims:
                del ledger.claims[sorted(ledger.claims)[arg % len(ledger.claims)]]
            continue
        claims: list[ResourceClaim] = []
        asked: list[Fraction | None] = []
        for mib in arg:
            serial += 1
            capacity = None if mib is None else {"memory": f"{mib}Mi"}
            claims.append(claim(f"c{serial}", exactly("gpu", capacity=capacity)))
            asked.append(None if mib is None else Fraction(mib * 2**20))
        outcome = allocate(slices, *claims, allocated=ledger.whole(), shared=ledger)
        if isinstance(outcome, Unschedulable):
            continue
        for c, result, requested in zip(claims, outcome.results, asked, strict=True):
            (share,) = result.devices
            device = devices[int(share.device[1:])]
            consumed = parse_quantity((share.consumed_capacity or {})["memory"])
            assert policy_allows(consumed, requested, device.policy), (consumed, requested, device.policy)
            ledger.add(c.name, Allocated((result,)))
        for i, d in enumerate(devices):
            used = (ledger.consumed(DeviceID(DRIVER, NODE, f"g{i}")) or {}).get("memory", Fraction(0))
            assert used <= d.capacity_gi * GI, (i, used, ledger.claims)


# ---------------------------------------------------------------------------------------- counters


@dataclass(frozen=True)
class CounterDevice:
    memory: int  # counter "memory" it consumes
    links: int  # counter "links" it consumes
    shared: bool  # allows multiple allocations


counter_devices = st.lists(
    st.builds(CounterDevice, st.integers(0, 6), st.integers(0, 2), st.booleans()), min_size=1, max_size=5
)


def counter_slices(devices: list[CounterDevice], memory: int, links: int) -> list[dict[str, Any]]:
    counters = slice_obj("counters", [], pool=NODE, count=2)
    del counters["spec"]["devices"]
    counters["spec"]["sharedCounters"] = [
        {"name": "gpu", "counters": {"memory": {"value": str(memory)}, "links": {"value": str(links)}}}
    ]
    objs = []
    for i, d in enumerate(devices):
        obj: dict[str, Any] = {
            "name": f"d{i}",
            "consumesCounters": [
                {
                    "counterSet": "gpu",
                    "counters": {"memory": {"value": str(d.memory)}, "links": {"value": str(d.links)}},
                }
            ],
        }
        if d.shared:
            obj["allowMultipleAllocations"] = True
        objs.append(obj)
    return [counters, slice_obj("devices", objs, pool=NODE, count=2)]


@settings(max_examples=150, deadline=None)
@given(
    counter_devices,
    st.integers(0, 10),
    st.integers(0, 3),
    st.lists(st.one_of(st.integers(1, 2), st.integers(-5, -1)), min_size=1, max_size=8),
)
def test_counters_are_never_overdrawn(devices: list[CounterDevice], memory: int, links: int, plan: list[int]) -> None:
    """``plan``: a positive n allocates a claim for n devices, a negative one releases a held claim."""
    slices = counter_slices(devices, memory, links)
    ledger = Ledger()
    for serial, step in enumerate(plan):
        if step < 0:
            if ledger.claims:
                del ledger.claims[sorted(ledger.claims)[-step % len(ledger.claims)]]
            continue
        c = claim(f"c{serial}", exactly("gpu", count=step))
        outcome = allocate(slices, c, allocated=ledger.whole(), shared=ledger)
        if isinstance(outcome, Allocated):
            ledger.add(c.name, outcome)
        held = ledger.held()  # a device with several shares consumes its counters once
        used_memory = sum(devices[int(d.device[1:])].memory for d in held)
        used_links = sum(devices[int(d.device[1:])].links for d in held)
        assert used_memory <= memory and used_links <= links, (held, memory, links)


@settings(max_examples=200, deadline=None)
@given(counter_devices, st.integers(0, 10), st.integers(0, 3), st.integers(1, 3), st.sets(st.integers(0, 4)))
def test_partitions_are_found_exactly_when_some_set_fits(
    devices: list[CounterDevice], memory: int, links: int, count: int, taken_raw: set[int]
) -> None:
    exclusive = [dataclass_replace(d) for d in devices]  # brute force below is for whole devices
    taken = {i for i in taken_raw if i < len(exclusive)}
    used_memory = sum(exclusive[i].memory for i in taken)
    used_links = sum(exclusive[i].links for i in taken)
    free = [i for i in range(len(exclusive)) if i not in taken]
    feasible = any(
        used_memory + sum(exclusive[i].memory for i in combo) <= memory
        and used_links + sum(exclusive[i].links for i in combo) <= links
        for combo in itertools.combinations(free, count)
    )
    if used_memory > memory or used_links > links:
        feasible = False  # an over-committed pool takes no counter-consuming device
    allocated = frozenset(DeviceID(DRIVER, NODE, f"d{i}") for i in taken)
    outcome = allocate(
        counter_slices(exclusive, memory, links), claim("c", exactly("gpu", count=count)), allocated=allocated
    )
    assert isinstance(outcome, Allocated) == feasible, (exclusive, memory, links, count, taken, outcome)


def dataclass_replace(d: CounterDevice) -> CounterDevice:
    return CounterDevice(d.memory, d.links, False)
