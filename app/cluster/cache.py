"""The watch-fed cluster cache and the assume ledger.

Every pod contributes to exactly one node's usage at a time, or to none: a bound, non-terminal pod
counts on its node; a pod we have bound but the watch has not confirmed yet counts through its
assumption. ``_counted`` records what each pod currently adds, so an update first takes out the
old contribution and a deletion takes it out once, whatever order events arrive in. The kinds of
device use a pod adds (``NodeInfo.pod_kinds``) also read its claims: ``app.cluster.pod_kinds``.

All methods are synchronous and run on the event loop thread: a filter or bind handler sees and
changes the cache atomically between two awaits, which is what makes concurrent binds safe.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from app.cluster.cache_events import CacheEvent, Counted, NodeChanged, PodChanged, PodCounted, Subscriber
from app.cluster.changes import ChangeSignal
from app.cluster.dra import DraState
from app.cluster.objects import NodeObject
from app.cluster.pod_kinds import Kinds, PodKinds, kinds_of
from app.cluster.podgroups import PodGroupStore
from app.cluster.relist import apply_relist
from app.cluster.usage import Assumption, NodeUsage
from scoring.framework import NodeInfo, PodInfo, Status
from scoring.table import NodeTable

__all__ = ["Assumption", "ClusterCache", "NodeUsage", "SourceState"]


@dataclass(slots=True)
class SourceState:
    """Sync state of one watched resource, shown in /debug and used by /readyz."""

    synced: bool = False
    connected: bool = False
    resource_version: str = ""
    last_event_at: float | None = None
    last_sync_at: float | None = None
    disconnected_since: float | None = None
    restarts: int = 0
    relists: int = 0
    last_error: str = ""


def _same_to_the_cache(previous: NodeObject, node: NodeObject) -> bool:
    """Whether two versions of a Node agree on all the cache reads of one."""
    return (
        previous.allocatable == node.allocatable
        and previous.labels == node.labels
        and previous.unschedulable == node.unschedulable
        and previous.taints == node.taints
    )


class ClusterCache:
    def __init__(self, assume_ttl: float = 300.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.assume_ttl = assume_ttl
        self.clock = clock
        self.nodes: dict[str, Any] = {}  # name -> app.cluster.objects.NodeObject
        self.prefer_no_schedule: set[str] = set()  # nodes with a PreferNoSchedule taint
        self.pods: dict[str, PodInfo] = {}
        self.ledger: dict[str, Assumption] = {}
        self.sources: dict[str, SourceState] = {}
        self._usage: dict[str, NodeUsage] = {}
        self._counted: dict[str, Counted] = {}  # uid -> where it counts, as which version
        self._snapshots: dict[str, NodeInfo] = {}
        self._table = NodeTable()  # the same snapshots as columns, for batch filtering and scoring
        # Nodes whose snapshot is out of date. Rebuilt once the current step of the event loop is done
        # (a watch event, a bind step), or on a read before that: a bind that changes a node several
        # times (assume, devices in flight, the claim written) rebuilds it once, and requests still
        # find the snapshots built.
        self._stale: dict[str, None] = {}
        # Nodes whose snapshot a read of one node rebuilt, and whose table row waits for the next read
        # of the table: a bind reads the node it has just assumed on, then changes it again.
        self._unrowed: dict[str, None] = {}
        self._rebuild_on: asyncio.AbstractEventLoop | None = None  # the loop a rebuild is scheduled on
        self.dra = DraState(clock=clock, inflight_ttl=assume_ttl)  # DRA objects and devices in use
        self.dra.listener = self._extended_changed  # DRA devices counted as extended resources
        self.dra.claims_listener = self._claims_changed  # what pod kinds read of claims
        self._kinds = PodKinds()
        # Told of every change as a typed event (app/cluster/cache_events.py): queue usage, KAI's pending
        # requests, the pods bound without the extender's /bind.
        self._subscribers: list[Subscriber] = []
        self.nodes_version = 0  # bumped on every node change (cluster totals are recomputed lazily)
        # Bumped whenever what is counted on a node, or a node itself, changes: filter compares it to
        # tell whether the cache has moved since it last judged a pod (see changed_after).
        self.changes = ChangeSignal()  # nodes and pods
        # Bumped when capacity may have been freed: a pod stopped counting on a node, a node came or grew,
        # devices were freed. The requeuer (app/cluster/requeue.py) asks kube-scheduler to retry on it.
        self.freed = self.dra.freed
        self.groups = PodGroupStore()  # PodGroup objects, and the cache's pods by group

    def close(self) -> None:
        """Tell nobody of changes any more (the subscribers and the DRA state's and groups' listeners
        are dropped): a cache made for one run, and all it holds, then goes with its last reference
        instead of waiting for a full collection of everything it held."""
        self._subscribers.clear()
        self.dra.listener = self.dra.claims_listener = None
        self.groups.listeners.clear()

    def subscribe(self, subscriber: Subscriber) -> None:
        """Call ``subscriber`` with every event from now on, after those subscribed earlier."""
        self._subscribers.append(subscriber)

    def _publish(self, event: CacheEvent) -> None:
        for subscriber in self._subscribers:
            subscriber(event)

    # ------------------------------------------------------------------ reads
    @property
    def table(self) -> NodeTable:
        """Every node's snapshot as columns (``scoring/table.py``), up to date."""
        if self._stale or self._unrowed:
            self._rebuild_stale()
        return self._table

    def node_info(self, name: str) -> NodeInfo | None:
        """The immutable snapshot of a known node (allocatable + usage)."""
        if name in self._stale:
            node = self.nodes.get(name)
            if node is None:
                self._rebuild_stale()
            else:  # this node's snapshot only; its row waits for the next read of the table
                del self._stale[name]
                self._snapshots[name] = self._build(name, node.allocatable)
                self._unrowed[name] = None
        return self._snapshots.get(name)

    def allocatable(self, name: str) -> Mapping[str, int] | None:
        """A known node's allocatable (what kubelet and device plugins advertise)."""
        node = self.node_info(name)
        return None if node is None else node.allocatable

    def node_info_for(self, name: str, allocatable: Mapping[str, int]) -> NodeInfo:
        """A snapshot for a node the cache does not know, from allocatable given in a request."""
        return self._build(name, allocatable)

    def usage(self, name: str) -> NodeUsage:
        return self._usage.get(name) or NodeUsage()

    def counted(self, uid: str) -> tuple[str, PodInfo] | None:
        """Where a pod counts now, and as which version (bound, or our assumption)."""
        entry = self._counted.get(uid)
        return (entry[0], entry[1]) if entry else None

    def counted_items(self) -> list[tuple[str, Counted]]:
        return list(self._counted.items())

    def counted_entry(self, uid: str) -> Counted | None:
        """``counted`` with whether it counts through our assumption."""
        return self._counted.get(uid)

    def counted_on(self, node: str) -> list[tuple[str, Counted]]:
        """The pods counted on one node, as ``counted_items`` entries, without scanning every pod."""
        usage = self._usage.get(node)
        return [] if usage is None else [(uid, self._counted[uid]) for uid in sorted(usage.uids)]

    def source(self, name: str) -> SourceState:
        return self.sources.setdefault(name, SourceState())

    # ------------------------------------------------------------------ nodes
    def upsert_node(self, node: NodeObject) -> None:
        previous = self.nodes.get(node.name)
        self.nodes[node.name] = node
        (self.prefer_no_schedule.add if node.prefer_no_schedule else self.prefer_no_schedule.discard)(node.name)
        if previous is not None and _same_to_the_cache(previous, node):
            # A status report (conditions, images, volumes) or a new annotation: nothing scoring, the
            # fit or the queues' totals read changed, so no snapshot, memoised score or total goes stale.
            return
        self.nodes_version += 1
        self._changed()
        if previous is None or previous.allocatable != node.allocatable or previous.labels != node.labels:
            self.freed.notify()
        self.dra.set_node(node.name, node.labels)
        self._refresh(node.name)
        self._publish(NodeChanged(node.name, node.labels))
        if previous is None or previous.labels != node.labels:
            # The node's flavor may have changed: its pods count against other (flavor, resource)s. A new
            # node: pods listed before it (the pod watch may sync first) could not be given a flavor yet.
            for uid, entry in self.counted_on(node.name):
                self._publish(PodCounted(uid, entry))

    def delete_node(self, name: str) -> None:
        self.nodes.pop(name, None)
        self.prefer_no_schedule.discard(name)
        self.nodes_version += 1
        self._changed()
        self._publish(NodeChanged(name, None))
        self.dra.delete_node(name)
        self._stale.pop(name, None)
        self._unrowed.pop(name, None)
        self._snapshots.pop(name, None)
        self._table.remove(name)

    def replace_nodes(self, nodes: Iterable[Any]) -> None:
        apply_relist(self.nodes, {node.name: node for node in nodes}, self.delete_node, self.upsert_node)

    # ------------------------------------------------------------------ pods
    def upsert_pod(self, pod: PodInfo) -> None:
        previous = self.pods.get(pod.uid)
        self.pods[pod.uid] = pod
        if (previous.pod_group if previous is not None else "") != pod.pod_group:
            self.groups.member_changed(pod.uid, previous.pod_group if previous is not None else "", pod.pod_group)
        if pod.node_name:
            self.ledger.pop(pod.uid, None)  # the watch confirms (or overrides) our assumption
        self._recount(pod.uid)
        self._publish(PodChanged(pod.uid, pod))

    def delete_pod(self, uid: str) -> None:
        previous = self.pods.pop(uid, None)
        self.ledger.pop(uid, None)
        if previous is not None and previous.pod_group:
            self.groups.member_changed(uid, previous.pod_group, "")
        self._recount(uid)
        self._publish(PodChanged(uid, None))

    def replace_pods(self, pods: Iterable[PodInfo]) -> None:
        """A relist: pods that vanished are deleted, the rest upserted, each accounted once."""
        apply_relist(self.pods, {pod.uid: pod for pod in pods}, self.delete_pod, self.upsert_pod)

    # ------------------------------------------------------------------ assume ledger
    def assume(self, pod: PodInfo, node: str, check: Callable[[NodeInfo], Status] | None = None) -> Status | None:
        """Count ``pod`` on ``node`` now, replacing any earlier assumption for its UID.

        ``check`` runs against the node *without* this pod's previous assumption; a failing status is
        returned and nothing changes. Returns None on success.
        """
        previous = self.ledger.get(pod.uid)
        if previous is not None and previous.held_for and previous.node == node:
            # A gang member bound where its plan held room for it: it already counts there (the plan
            # checked the fit and the hold kept others off), so it turns into an assumption in place.
            now = self.clock()
            self.ledger[pod.uid] = Assumption(pod.on_node(node), node, now, now + self.assume_ttl)
            self._recount(pod.uid)
            return None
        previous = self.ledger.pop(pod.uid, None)
        if previous is not None:
            self._recount(pod.uid)
        if check is not None:
            snapshot = self.node_info(node) or self._build(node, {})
            status = check(snapshot)
            if not status.passed:
                if previous is not None:
                    self.ledger[pod.uid] = previous
                    self._recount(pod.uid)
                return status
        now = self.clock()
        self.ledger[pod.uid] = Assumption(pod.on_node(node), node, now, now + self.assume_ttl)
        self._recount(pod.uid)
        return None

    def hold(self, pod: PodInfo, node: str, until: float, group: str) -> None:
        """Count a gang member on the node its group's plan gave it, until ``until`` (this cache's
        clock) or its /bind, without checking: the planner decided the fit."""
        self.ledger[pod.uid] = Assumption(pod.on_node(node), node, self.clock(), until, held_for=group)
        self._recount(pod.uid)

    def forget(self, uid: str) -> None:
        """Drop an assumption (bind failed); a pod the watch has seen bound keeps counting."""
        if self.ledger.pop(uid, None) is not None:
            self._recount(uid)

    def expire(self) -> list[Assumption]:
        now = self.clock()
        expired = [a for a in self.ledger.values() if a.expires_at <= now]
        for assumption in expired:
            self.forget(assumption.pod.uid)
        return expired

    # ------------------------------------------------------------------ internals
    def _desired(self, uid: str) -> Counted | None:
        pod = self.pods.get(uid)
        if pod is not None and pod.node_name and not pod.terminal:
            return Counted(pod.node_name, pod, False)
        assumption = self.ledger.get(uid)
        if assumption is not None and (pod is None or not pod.terminal):
            return Counted(assumption.node, assumption.pod, True)
        return None

    def _kinds_of(self, counted: Counted | None) -> Kinds:
        if counted is None:
            return ()
        return kinds_of(counted.pod, self.dra.claims, self.dra.extended.classes)

    def _recount(self, uid: str) -> None:
        current = self._counted.get(uid)
        desired = self._desired(uid)
        kinds = self._kinds_of(desired)
        applied = self._kinds.applied(uid)
        if current == desired:
            if current is not None and kinds != applied:  # its claims or the classes changed
                usage = self._usage[current.node]
                usage.add_kinds(applied, -1)
                usage.add_kinds(kinds, +1)
                self._kinds.set(uid, current.pod, kinds)
                self._refresh(current.node)
                self._changed()
            return
        if (
            current is not None
            and desired is not None
            and current.node == desired.node
            and kinds == applied
            and current.pod.resources == desired.pod.resources
        ):
            # The same demand on the same node (the watch confirming our assumption, a status update):
            # the node's aggregates and its table row stay as they are, and so stay valid what scoring
            # memoised per row.
            self._usage[current.node].assumed_count += desired.assumed - current.assumed
            self._counted[uid] = desired
            self._kinds.set(uid, desired.pod, kinds)
            self._changed()
            self._publish(PodCounted(uid, desired))
            return
        if current is not None:
            node, pod, assumed = current
            usage = self._usage[node]
            usage.add(pod, -1)
            usage.add_kinds(applied, -1)
            usage.assumed_count -= assumed
            del self._counted[uid]
            if desired is None or desired[0] != node:  # the same node: one refresh below
                self._refresh(node)
                self.freed.notify()
        self._kinds.set(uid, None if desired is None else desired.pod, kinds)
        if desired is not None:
            node, pod, assumed = desired
            usage = self._usage.setdefault(node, NodeUsage())
            usage.add(pod, +1)
            usage.add_kinds(kinds, +1)
            usage.assumed_count += assumed
            self._counted[uid] = desired
            self._refresh(node)
        self._changed()
        self._publish(PodCounted(uid, desired))

    def _claims_changed(self, keys: Iterable[str] | None) -> None:
        """Claims changed (None: which class serves which resource did): the kinds of the pods that
        name them, again."""
        for uid in self._kinds.readers(keys):
            self._recount(uid)

    def _changed(self) -> None:
        self.changes.notify()

    @property
    def generation(self) -> int:
        """Bumped on every change of nodes and pods (what filter's lag detection compares)."""
        return self.changes.version

    async def changed_after(self, generation: int, timeout: float) -> bool:
        """Wait until the cache has changed since ``generation`` (True), or ``timeout`` seconds (False)."""
        return await self.changes.changed_after(generation, timeout)

    def _build(self, name: str, allocatable: Mapping[str, int]) -> NodeInfo:
        usage = self._usage.get(name) or NodeUsage()
        dra_allocatable: dict[str, int] = {}
        dra_requested: dict[str, int] = {}
        dra_devices: dict[str, tuple[int, ...]] = {}
        extended = self.dra.extended_amounts(name)
        if extended:
            # A node that advertises the resource through a device plugin is scored on that alone,
            # as upstream's scorer: DRA devices count only where status.allocatable has none of it.
            per_device = self.dra.extended_devices(name) or {}
            for resource, (total, used) in extended.items():
                if total > 0 and allocatable.get(resource, 0) <= 0:
                    dra_allocatable[resource], dra_requested[resource] = total, used
                    dra_devices[resource] = per_device.get(resource, ())
        return NodeInfo(
            name=name,
            allocatable=allocatable,
            requested=dict(usage.requested),
            non_zero_cpu=usage.non_zero_cpu,
            non_zero_memory=usage.non_zero_memory,
            pod_count=usage.pod_count,
            allocatable_types=NodeInfo.types_of(allocatable, dra_allocatable),
            dra_allocatable=dra_allocatable,
            dra_requested=dra_requested,
            dra_devices=dra_devices,
            pod_kinds={resource: dict(counts) for resource, counts in usage.kinds.items()},
            labels=node.labels if (node := self.nodes.get(name)) is not None else {},
        )

    def _extended_changed(self, names: list[str]) -> None:
        """DRA devices counted as extended resources changed on these nodes: new snapshots."""
        for name in names:
            self._refresh(name)
        self._changed()

    def _refresh(self, name: str) -> None:
        self._stale[name] = None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no event loop (tests, tools): the next read rebuilds
            return
        if self._rebuild_on is not loop:  # (a loop that ended with one pending does not count)
            loop.call_soon(self._scheduled_rebuild)
            self._rebuild_on = loop

    def _scheduled_rebuild(self) -> None:
        self._rebuild_on = None
        if self._stale or self._unrowed:
            self._rebuild_stale()

    def _rebuild_stale(self) -> None:
        stale, self._stale = self._stale, {}
        unrowed, self._unrowed = self._unrowed, {}
        for name in unrowed:
            if name not in stale:
                self._table.upsert(self._snapshots[name])
        for name in stale:
            node = self.nodes.get(name)
            if node is None:
                self._snapshots.pop(name, None)
                self._table.remove(name)
                continue
            snapshot = self._snapshots[name] = self._build(name, node.allocatable)
            self._table.upsert(snapshot)

    def counts(self) -> dict[str, int]:
        return {
            "nodes": len(self.nodes),
            "pods": len(self.pods),
            "countedPods": len(self._counted),
            "assumedPods": len(self.ledger),
            **self.dra.counts(),
        }

    def check_invariants(self) -> None:
        """Recompute every node's usage from scratch and compare (tests and /debug?verify use it)."""
        self.dra.check_invariants()
        tainted = {name for name, node in self.nodes.items() if node.prefer_no_schedule}
        if tainted != self.prefer_no_schedule:
            kept = sorted(self.prefer_no_schedule)
            raise AssertionError(f"PreferNoSchedule nodes {kept}, recomputed {sorted(tainted)}")
        expected: dict[str, NodeUsage] = {}
        counted: dict[str, PodInfo] = {}
        kinds: dict[str, Kinds] = {}
        for uid in set(self.pods) | set(self.ledger):
            desired = self._desired(uid)
            if desired is not None:
                usage = expected.setdefault(desired[0], NodeUsage())
                usage.add(desired[1], +1)
                counted[uid], kinds[uid] = desired.pod, self._kinds_of(desired)
                usage.add_kinds(kinds[uid], +1)
                usage.assumed_count += desired[2]
        self._kinds.check(counted, kinds)
        for name in set(expected) | set(self._usage):
            have = self._usage.get(name) or NodeUsage()
            want = expected.get(name) or NodeUsage()
            if have != want:  # the dataclass compares every aggregate
                raise AssertionError(f"usage of node {name} drifted: have {have}, want {want}")
