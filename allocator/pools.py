"""Resource pools per node: gathering, validation and KEP-5773 ordering.

Upstream's ``GatherPools`` runs inside every ``Allocate`` call. Here ``gather_pools`` runs when a
node's pools are first asked for, and ``allocator.slice_index.SliceIndex`` keeps the result until a
slice that can matter to that node changes.

Gathering, for one node (upstream semantics):

1. relevant slices: ``nodeName`` is the node, ``allNodes``, a matching ``nodeSelector``, a
   ``perDeviceNodeSelection`` slice with at least one device for the node, and the counter slices
   (``sharedCounters``) of every pool one of those belongs to, whatever node they name; anything
   else is a future extension and skipped. A counter slice offers no devices (in 1.36 a slice has
   devices or counters, never both). Upstream makes *every* counter slice relevant to every node,
   so a pool with nothing for the node still shows up there (empty, but able to fail an ``All``
   request or add "invalid pools" to the reason) and each node gathers every node's MIG pools;
   here a node only sees the pools it has devices from;
2. per (driver, pool) keep the relevant slices of the highest generation seen;
3. complete if their number is the pool's ``resourceSliceCount``; otherwise all slices of the pool
   are scanned: a higher generation elsewhere makes the pool *obsolete* (dropped silently), else it
   is complete if the slices of its generation add up, and *incomplete* if not;
4. invalid: duplicate device names, counter-set problems, and (KEP-5773) slices of one generation,
   including those for other nodes, that disagree on ``pool.priority`` (unset counts as 0).

Order (upstream 1.36 with KEP-5773 priorities on top): first every pool without binding-condition
devices, then every pool with them, across all drivers (1.36's incubating allocator, the one
kube-scheduler runs with its default gates DRADeviceBindingConditions and DRAConsumableCapacity,
sorts the two parts apart and appends the second to the first: ``GatherPools`` in
``pools_incubating.go``); within each part pools by driver,
then pool priority (higher first), then name. An incomplete or invalid pool offers no device and
sorts with the pools without binding conditions, as upstream's (which has no device slices then).
Slices in a pool by slice priority (higher first), then name; devices in published order. Without
priorities this is exactly 1.36's order.

A *preference* (``NodePools.preferred``: devices the caller would rather have, in order) reorders
only devices of equal rank: within each run of consecutive candidates whose pool (binding
conditions or not, driver, pool priority) and slice priority are the same, the preferred devices
come first in the preferred order, the others after them in search order. Pool and slice
priorities are never crossed, and the search still checks every constraint, capacity and counter.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from allocator.counters import PoolCounters
from allocator.nodeselector import node_selector_matches
from allocator.types import (
    Device,
    DeviceID,
    NodeRef,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    ResourceSlice,
)

__all__ = ["Candidate", "NodePools", "Pool", "PoolKey", "gather_pools", "node_matches", "slice_candidates"]

PoolKey = tuple[str, str]  # (driver, pool name)


def node_matches(node: NodeRef, name: str | None, all_nodes: bool, selector: NodeSelector | None) -> bool:
    """upstream NodeMatches: exactly one of name / allNodes / selector decides; none means no."""
    if name is not None:
        return node.name == name
    if all_nodes:
        return True
    if selector is not None:
        return node_selector_matches(selector, node)
    return False


@dataclass(frozen=True, slots=True, eq=False)
class Candidate:
    """One device of one slice as the search sees it, built once per slice and shared by all nodes.

    ``node_local`` and ``selector_term`` are what the device contributes to an allocation's
    ``nodeSelector``: node-local devices pin the claim to the node; otherwise the single term of
    the slice's (or the device's) node selector is merged (``selector_error`` if it has several).
    ``plain``: taken whole, no counters, no request policy - a request without capacity requests
    needs no capacity or counter bookkeeping for it (unless it holds shares from before).
    """

    id: DeviceID
    device: Device
    slice: ResourceSlice
    node_local: bool
    selector_term: NodeSelectorTerm | None
    selector_error: str
    plain: bool = True


def slice_candidates(s: ResourceSlice) -> tuple[Candidate, ...]:
    out = []
    for device in s.devices:
        if s.per_device_node_selection:
            name, selector = device.node_name, device.node_selector
        else:
            name, selector = s.node_name, s.node_selector
        term, error = None, ""
        local = name is not None or device.binds_to_node
        if not local and selector is not None:
            if len(selector.terms) == 1:
                term = selector.terms[0]
            elif len(selector.terms) > 1:
                error = f"unsupported ResourceSlice.NodeSelector with {len(selector.terms)} terms"
        plain = not (
            device.allow_multiple_allocations
            or device.consumes_counters
            or any(c.request_policy is not None for c in device.capacity.values())
        )
        out.append(Candidate(DeviceID(s.driver, s.pool.name, device.name), device, s, local, term, error, plain))
    return tuple(out)


@dataclass(frozen=True, slots=True, eq=False)
class Pool:
    """One resource pool as gathered for a node: only the slices relevant to that node, in order."""

    driver: str
    name: str
    generation: int
    priority: int
    slices: tuple[ResourceSlice, ...]
    has_binding_conditions: bool = False  # a usable pool with a device that has bindingConditions
    incomplete: bool = False
    invalid: str = ""  # why the pool is invalid ("" if it is not)
    counters: PoolCounters | None = None  # its counter sets, when it has any (partitionable devices)

    @property
    def id(self) -> str:
        return f"{self.driver}/{self.name}"

    @property
    def usable(self) -> bool:
        return not self.incomplete and not self.invalid

    @property
    def problem(self) -> str:
        if self.incomplete:
            return "incomplete: not all slices of the current generation are published yet"
        return f"invalid: {self.invalid}" if self.invalid else ""


@dataclass(frozen=True, slots=True, eq=False)
class NodePools:
    """The pools relevant to one node, immutable and in allocation order.

    ``gathered`` has every pool (usable or not) in order; ``pools`` the usable ones; ``candidates``
    their devices flattened in search order; ``off_node`` the positions in ``candidates`` of
    per-device-node-selection devices that are not for this node (skipped after their selectors);
    ``counters`` the usable pools' counter sets by (driver, pool); ``ranks`` per candidate the
    index of its run of equal rank (what a preference may reorder, ``preferred``).
    """

    node: str
    gathered: tuple[Pool, ...]
    pools: tuple[Pool, ...]
    unusable: tuple[Pool, ...]
    candidates: tuple[Candidate, ...]
    off_node: frozenset[int]
    has_invalid: bool
    local_selector: NodeSelector  # matchFields metadata.name In [node], shared by node-local results
    counters: Mapping[PoolKey, PoolCounters] = field(default_factory=dict)
    ranks: tuple[int, ...] = ()

    def __len__(self) -> int:
        return len(self.gathered)

    def preferred(self, prefer: Sequence[DeviceID]) -> tuple[tuple[Candidate, ...], frozenset[int]]:
        """The candidates with ``prefer``'s devices first within their run of equal rank (in
        ``prefer``'s order, the others after them in search order), and ``off_node`` for that order."""
        wanted = {device: position for position, device in enumerate(prefer)}
        ranks = self.ranks or (0,) * len(self.candidates)
        order = sorted(
            range(len(self.candidates)),
            key=lambda i: (ranks[i], wanted.get(self.candidates[i].id, len(wanted)), i),
        )
        candidates = tuple(self.candidates[i] for i in order)
        off_node = frozenset(position for position, i in enumerate(order) if i in self.off_node)
        return candidates, off_node


@dataclass(slots=True)
class _PoolStats:
    """Facts about all slices of one pool, whatever node they are for."""

    max_generation: int
    counts: dict[int, int]
    priorities: dict[int, set[int]]


def _stats(slices: Iterable[ResourceSlice]) -> _PoolStats:
    counts: dict[int, int] = {}
    priorities: dict[int, set[int]] = {}
    top = None
    for s in slices:
        gen = s.pool.generation
        counts[gen] = counts.get(gen, 0) + 1
        priorities.setdefault(gen, set()).add(s.pool.priority)
        top = gen if top is None else max(top, gen)
    return _PoolStats(top if top is not None else 0, counts, priorities)


def _validate(slices: tuple[ResourceSlice, ...], generation_slices: Iterable[ResourceSlice], stats: _PoolStats) -> str:
    """Why a complete pool is invalid, or ""."""
    names: set[str] = set()
    for s in slices:
        for device in s.devices:
            if device.name in names:
                return f"duplicate device name {device.name}"
            names.add(device.name)
    counter_sets: dict[str, frozenset[str]] = {}
    for s in slices:
        for cs in s.shared_counters:
            if cs.name in counter_sets:
                return f"duplicate counter set name {cs.name}"
            counter_sets[cs.name] = frozenset(cs.counters)
    for s in generation_slices:
        for device in s.devices:
            for consumption in device.consumes_counters:
                known = counter_sets.get(consumption.counter_set)
                if known is None:
                    return f"counter set {consumption.counter_set} not found"
                for counter in consumption.counters:
                    if counter not in known:
                        return f"counter {counter} not found in counter set {consumption.counter_set}"
    generation = slices[0].pool.generation
    seen = stats.priorities.get(generation, set())
    if len(seen) > 1:
        values = ", ".join(str(p) for p in sorted(seen))
        return f"slices of generation {generation} disagree on the pool priority ({values})"
    return ""


def _pool_counters(slices: Iterable[ResourceSlice], members: Iterable[ResourceSlice]) -> PoolCounters | None:
    """The counter sets of the pool's ``slices`` and every device of ``members`` that consumes them."""
    sets = {cs.name: cs.counters for s in slices for cs in s.shared_counters}
    if not sets:
        return None
    consumers = tuple(
        (DeviceID(s.driver, s.pool.name, d.name), d) for s in members for d in s.devices if d.consumes_counters
    )
    return PoolCounters(sets, consumers)


def _local_selector(node: str) -> NodeSelector:
    return NodeSelector((NodeSelectorTerm(match_fields=(NodeSelectorRequirement("metadata.name", "In", (node,)),)),))


def gather_pools(
    node: NodeRef,
    relevant: Iterable[ResourceSlice],
    pool_slices: Mapping[PoolKey, Mapping[str, ResourceSlice]],
    candidates: Mapping[str, tuple[Candidate, ...]],
) -> tuple[NodePools, tuple[PoolKey, ...]]:
    """Gather, validate and order the pools of ``relevant`` slices for ``node``.

    ``pool_slices`` has *all* slices of each pool (for completeness, obsolescence and the
    priority check); ``candidates`` the prebuilt candidates per slice name. Also returns every
    pool key looked at, obsolete ones included, so the caller knows what to invalidate on.
    """
    groups: dict[PoolKey, list[ResourceSlice]] = {}
    for s in relevant:
        key = (s.driver, s.pool.name)
        group = groups.get(key)
        if group is None or s.pool.generation > group[0].pool.generation:
            groups[key] = [s]
        elif s.pool.generation == group[0].pool.generation:
            group.append(s)
    gathered: list[Pool] = []
    for key, group in groups.items():
        group.sort(key=lambda s: (-s.priority, s.name))
        first = min(group, key=lambda s: s.name)  # upstream reads "the first slice"; by name is deterministic
        generation, count = first.pool.generation, first.pool.resource_slice_count
        in_pool = pool_slices.get(key)
        all_slices = list(in_pool.values()) if in_pool is not None else []
        stats = _stats(all_slices)
        complete = len(group) == count
        members: list[ResourceSlice] = group
        if not complete:
            if stats.max_generation > generation:
                continue  # obsolete: the driver is replacing this generation
            members = [s for s in all_slices if s.pool.generation == generation]
            complete = len(members) == count
        slices = tuple(group)
        has_bc = any(d.binding_conditions for s in slices for d in s.devices)
        if not complete:
            gathered.append(Pool(key[0], key[1], generation, first.pool.priority, slices, False, incomplete=True))
            continue
        invalid = _validate(slices, (s for s in all_slices if s.pool.generation == generation), stats)
        counters = None if invalid else _pool_counters(slices, members)
        gathered.append(
            Pool(
                key[0],
                key[1],
                generation,
                first.pool.priority,
                slices,
                has_bc and not invalid,
                invalid=invalid,
                counters=counters,
            )
        )
    # Binding-condition pools after all others, whatever their driver or priority (1.36).
    gathered.sort(key=lambda p: (p.has_binding_conditions, p.driver, -p.priority, p.name))
    usable = tuple(p for p in gathered if p.usable)
    flat: list[Candidate] = []
    off_node: set[int] = set()
    ranks: list[int] = []
    rank: tuple[bool, str, int, int] | None = None
    run = -1
    for pool in usable:
        for s in pool.slices:
            if s.shared_counters:
                continue  # a counter slice: counter sets for the whole pool, no devices (1.36 buildPool)
            found = candidates[s.name]
            same = (pool.has_binding_conditions, pool.driver, pool.priority, s.priority)
            if found and same != rank:
                rank, run = same, run + 1
            flat.extend(found)
            ranks.extend([run] * len(found))
    # Per-device node selection is decided per node, after the selectors (as upstream's isSelectable).
    for i, c in enumerate(flat):
        dev = c.device
        if c.slice.per_device_node_selection and not node_matches(
            node, dev.node_name, dev.all_nodes, dev.node_selector
        ):
            off_node.add(i)
    pools = NodePools(
        node=node.name,
        gathered=tuple(gathered),
        pools=usable,
        unusable=tuple(p for p in gathered if not p.usable),
        candidates=tuple(flat),
        off_node=frozenset(off_node),
        has_invalid=any(p.invalid for p in gathered),
        local_selector=_local_selector(node.name),
        counters={(p.driver, p.name): p.counters for p in usable if p.counters is not None},
        ranks=tuple(ranks),
    )
    return pools, tuple(groups)
