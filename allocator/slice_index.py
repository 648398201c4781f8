"""Every ResourceSlice, indexed at cache-update time, with each node's ``NodePools`` memoised.

Upstream gathers a node's pools inside every ``Allocate`` call; here a node's pools are gathered
(``allocator.pools.gather_pools``) once and kept until a slice that can matter to that node changes,
so a filter over 1,000 nodes does no gathering, validation or sorting at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from allocator.nodeselector import node_selector_matches
from allocator.pools import Candidate, NodePools, PoolKey, gather_pools, node_matches, slice_candidates
from allocator.types import NodeRef, ResourceSlice

__all__ = ["SliceIndex"]


def _scope(s: ResourceSlice) -> str:
    """How a slice's relevance is decided: "node" (its nodeName), "wide" (labels / all nodes) or "none"."""
    if s.node_name is not None:
        return "node"
    if s.all_nodes or s.node_selector is not None or s.per_device_node_selection:
        return "wide"
    return "none"  # a future node-selection field: never relevant (upstream skips it too)


def _relevant(s: ResourceSlice, node: NodeRef) -> bool:
    if s.all_nodes:
        return True
    if s.node_selector is not None:
        return node_selector_matches(s.node_selector, node)
    if s.per_device_node_selection:
        return any(node_matches(node, d.node_name, d.all_nodes, d.node_selector) for d in s.devices)
    return False


def _label_dependent(s: ResourceSlice) -> bool:
    if s.node_selector is not None:
        return True
    return s.per_device_node_selection and any(d.node_selector is not None for d in s.devices)


@dataclass(slots=True)
class _Memo:
    labels: Mapping[str, str]
    label_dependent: bool
    pools: NodePools
    keys: tuple[PoolKey, ...]


@dataclass
class SliceIndex:
    """All ResourceSlices, indexed at cache-update time, with ``NodePools`` memoised per node.

    Invalidation is precise: a change to a slice forgets the memo of the node it names (old and
    new version), of every node whose memo used its pool (completeness, the KEP-5773 check and
    counter sets look at a pool's slices on other nodes too), and of all nodes when it is a
    node-selector, all-nodes or per-device slice. A node whose labels changed is re-gathered when its
    memo depended on labels (``NodeRef.labels`` is compared on every lookup, by identity first).
    """

    _slices: dict[str, ResourceSlice] = field(default_factory=dict)
    _candidates: dict[str, tuple[Candidate, ...]] = field(default_factory=dict)
    _by_pool: dict[PoolKey, dict[str, ResourceSlice]] = field(default_factory=dict)
    _by_node: dict[str, dict[str, ResourceSlice]] = field(default_factory=dict)
    _wide: dict[str, ResourceSlice] = field(default_factory=dict)
    _memo: dict[str, _Memo] = field(default_factory=dict)
    _memo_by_pool: dict[PoolKey, set[str]] = field(default_factory=dict)
    # Nodes whose pools may have changed since the owner last looked (``changed_nodes``).
    _changed: set[str] = field(default_factory=set)
    _changed_all: bool = False

    # ------------------------------------------------------------------ reads
    def __len__(self) -> int:
        return len(self._slices)

    def __iter__(self) -> Iterator[ResourceSlice]:
        return iter(list(self._slices.values()))

    def __contains__(self, name: object) -> bool:
        return name in self._slices

    def get(self, name: str) -> ResourceSlice | None:
        return self._slices.get(name)

    def slices(self) -> list[ResourceSlice]:
        """Every slice, by name."""
        return [self._slices[name] for name in sorted(self._slices)]

    def pools_for(self, node: NodeRef) -> NodePools:
        """The node's pools in allocation order (memoised; see the class docstring for invalidation)."""
        memo = self._memo.get(node.name)
        if memo is not None:
            labels = node.labels
            if memo.labels is labels or not memo.label_dependent:
                return memo.pools
            if memo.labels == labels:
                memo.labels = labels  # identity hits from now on
                return memo.pools
            self._forget(node.name)
        relevant = list(self._by_node.get(node.name, {}).values())
        dependent = False
        for s in self._wide.values():
            dependent = dependent or _label_dependent(s)
            if _relevant(s, node):
                relevant.append(s)
        # The counter slices of every pool the node sees belong to its view of the pool, whatever
        # node they were published for.
        names = {s.name for s in relevant}
        for key in {(s.driver, s.pool.name) for s in relevant}:
            for other in self._by_pool.get(key, {}).values():
                if other.shared_counters and other.name not in names:
                    relevant.append(other)
        pools, keys = gather_pools(node, relevant, self._by_pool, self._candidates)
        self._memo[node.name] = _Memo(node.labels, dependent, pools, keys)
        for key in keys:
            self._memo_by_pool.setdefault(key, set()).add(node.name)
        return pools

    # ------------------------------------------------------------------ writes
    def upsert(self, resource_slice: ResourceSlice) -> None:
        old = self._slices.get(resource_slice.name)
        if old is resource_slice:
            return
        if old is not None:
            self._remove(old)
        self._add(resource_slice)

    def delete(self, name: str) -> None:
        old = self._slices.get(name)
        if old is not None:
            self._remove(old)

    def replace(self, slices: Iterable[ResourceSlice]) -> None:
        self._slices.clear()
        self._candidates.clear()
        self._by_pool.clear()
        self._by_node.clear()
        self._wide.clear()
        self._forget_all()
        for s in slices:
            self.upsert(s)

    def changed_nodes(self) -> set[str] | None:
        """The nodes whose pools may have changed since the last call; None means every node."""
        changed = None if self._changed_all else self._changed
        self._changed, self._changed_all = set(), False
        return changed

    def forget_node(self, name: str) -> None:
        """Drop a node's memo (the node left the cluster)."""
        self._forget(name)

    def _add(self, s: ResourceSlice) -> None:
        self._slices[s.name] = s
        self._candidates[s.name] = slice_candidates(s)
        self._by_pool.setdefault((s.driver, s.pool.name), {})[s.name] = s
        scope = _scope(s)
        if scope == "node":
            assert s.node_name is not None
            self._by_node.setdefault(s.node_name, {})[s.name] = s
        elif scope == "wide":
            self._wide[s.name] = s
        self._invalidate(s, scope)

    def _remove(self, s: ResourceSlice) -> None:
        del self._slices[s.name]
        del self._candidates[s.name]
        key = (s.driver, s.pool.name)
        members = self._by_pool[key]
        del members[s.name]
        if not members:
            del self._by_pool[key]
        scope = _scope(s)
        if scope == "node":
            assert s.node_name is not None
            on_node = self._by_node[s.node_name]
            del on_node[s.name]
            if not on_node:
                del self._by_node[s.node_name]
        elif scope == "wide":
            del self._wide[s.name]
        self._invalidate(s, scope)

    def _invalidate(self, s: ResourceSlice, scope: str) -> None:
        if scope == "wide":
            self._forget_all()
            return
        for node in list(self._memo_by_pool.get((s.driver, s.pool.name), ())):
            self._forget(node)
        if scope == "node":
            assert s.node_name is not None
            self._forget(s.node_name)

    def _forget(self, node: str) -> None:
        self._changed.add(node)
        memo = self._memo.pop(node, None)
        if memo is None:
            return
        for key in memo.keys:
            nodes = self._memo_by_pool.get(key)
            if nodes is not None:
                nodes.discard(node)
                if not nodes:
                    del self._memo_by_pool[key]

    def _forget_all(self) -> None:
        self._changed_all = True
        self._memo.clear()
        self._memo_by_pool.clear()
