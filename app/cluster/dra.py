"""DRA state for the extender: watch-fed classes, claims and slices, and the devices in use.

The allocator (``allocator/``) is pure; this module owns *when* its inputs change. Everything
expensive happens here at cache-update time: slices are indexed into per-node ordered pools
(memoised by ``SliceIndex``), the set of allocated devices is kept incrementally from every
claim's ``status.allocation``, and each node's ``NodeRef`` is built once per node version.

Two ledgers, both keyed by pod UID, stand in for the scheduler's Reserve step, which an
extender does not get:

* **proposals**: what ``/filter`` would allocate on each candidate node. Replaced when the pod is
  filtered again, expired after a TTL, never counted against other pods (counting a pod's
  proposals on every candidate node would turn other pods away from nodes it will never use).
  ``/bind`` takes the chosen node's proposal if its devices are still free.
* **in flight**: the allocation ``/bind`` is writing. It counts as allocated from the moment bind
  decides (before the first API write) until the written claims are in the cache, so two pods
  never get one device, whatever the order of watch events.

Devices are held two ways, as kube-scheduler's AllocatedState: *whole* (a result without a
``shareID``: nobody else may take the device) or as *shares* of a device that allows multiple
allocations (a result with a ``shareID`` and its ``consumedCapacity``: others may take further
shares while the capacity lasts). Both are kept per device, for claims and for in-flight binds,
and handed to the allocator (``allocated_view`` / ``shared_view``); a device holding any share
also consumes its shared counters.

Devices of classes with ``extendedResourceName`` are counted per node as that resource
(``app.cluster.dra_extended``) for the nodes a change can affect; ``listener`` hears which changed.

Claims are an *assume cache* like upstream's: a claim update older (by resourceVersion) than the
one we stored after our own write is ignored, so a late watch event cannot free a device again.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from allocator import (
    AllocatedShare,
    AllocationResult,
    DeviceClass,
    DeviceID,
    NodeRef,
    ResourceClaim,
    ResourceSlice,
    SelectorCache,
    SliceIndex,
    allocated_device_ids,
    allocated_shares,
    device_class_mapping,
    is_extended_resource_claim,
)
from allocator.taints import DeviceTaintRule, TaintRules
from app.cluster import dra_invariants, dra_views
from app.cluster.changes import ChangeSignal
from app.cluster.dra_extended import FREE, Amounts, Devices, ExtendedResources, Held, held
from app.cluster.dra_fast import FastDevices
from app.cluster.dra_inuse import AllocatedDevices, SharedView, Shares, add_shares, drop_shares, unwritten
from app.cluster.relist import apply_relist

__all__ = ["AllocatedDevices", "DraState", "InFlight", "Proposal", "SharedView"]

_PROPOSALS = 10_000  # pods with filter-time proposals kept at most (least recently filtered dropped first)


@dataclass(frozen=True, slots=True)
class Proposal:
    """Filter-time allocations of one pod: node name -> one AllocationResult per unallocated claim."""

    claims: tuple[str, ...]  # claim keys (ns/name) the results are for, in order
    by_node: Mapping[str, tuple[AllocationResult, ...]]
    expires_at: float


@dataclass(frozen=True, slots=True)
class InFlight:
    """An allocation being written by /bind: counted as allocated until the claims show it."""

    pod_uid: str
    pod: str  # ns/name, for /debug
    node: str
    claims: Mapping[str, AllocationResult]  # claim key -> what we write
    devices: tuple[DeviceID, ...]  # held whole
    shares: tuple[AllocatedShare, ...]
    started_at: float
    expires_at: float
    held: bool = False  # a gang member's devices held on its planned node, not a bind under way


def _rv(value: str) -> int | None:
    return int(value) if value.isdigit() else None


def _devices_of(claim: ResourceClaim | None) -> list[DeviceID]:
    """Every device a claim's allocation names, held whole or as a share."""
    if claim is None or claim.allocation is None:
        return []
    return [r.id for r in claim.allocation.devices]


@dataclass
class DraState:
    """Watch-fed DRA objects plus the two ledgers. All methods run on the event loop thread."""

    clock: Callable[[], float] = time.monotonic
    proposal_ttl: float = 60.0
    inflight_ttl: float = 300.0
    classes: dict[str, DeviceClass] = field(default_factory=dict)
    claims: dict[str, ResourceClaim] = field(default_factory=dict)
    slices: SliceIndex = field(default_factory=SliceIndex)
    selectors: SelectorCache = field(default_factory=SelectorCache)
    proposals: OrderedDict[str, Proposal] = field(default_factory=OrderedDict)
    inflight: dict[str, InFlight] = field(default_factory=dict)
    # Bumped when a device of the pool changes holders (per (driver, pool)), and when classes or
    # device taint rules change: what allocating on a node read, for memos of its outcome.
    pool_versions: dict[tuple[str, str], int] = field(default_factory=dict)
    rules_version: int = 0
    _node_refs: dict[str, NodeRef] = field(default_factory=dict)
    _claim_devices: dict[DeviceID, str] = field(default_factory=dict)  # device -> claim key holding it
    _inflight_devices: dict[DeviceID, str] = field(default_factory=dict)  # device -> pod uid
    _claim_shares: Shares = field(default_factory=dict)  # holder: claim key
    _inflight_shares: Shares = field(default_factory=dict)  # holder: pod uid
    taint_rules: TaintRules = field(default_factory=TaintRules)  # DeviceTaintRules (when the API is served)
    claim_changes: ChangeSignal = field(default_factory=ChangeSignal)  # bumped on every claim change
    # Bumped when devices may have become free (deallocated, new slices, classes changed): the requeuer's cue.
    freed: ChangeSignal = field(default_factory=ChangeSignal)
    extended: ExtendedResources = field(default_factory=ExtendedResources)
    listener: Callable[[list[str]], None] | None = None  # told of nodes whose extended amounts changed
    # Told of claims whose spec may have changed, or None: which class serves which resource did (pod kinds)
    claims_listener: Callable[[Iterable[str] | None], None] | None = None
    fast: FastDevices = field(default_factory=FastDevices)  # free capacity per class, for simple claims
    _special_by_owner: dict[str, set[str]] = field(default_factory=dict)  # pod uid -> its special claims
    _class_mapping: Mapping[str, str] | None = None
    _held: dict[DeviceID, Held] = field(default_factory=dict)  # how each held device was last told held

    # ------------------------------------------------------------------ nodes
    def node_ref(self, name: str) -> NodeRef | None:
        return self._node_refs.get(name)

    def set_node(self, name: str, labels: Mapping[str, str]) -> None:
        ref = self._node_refs.get(name)
        if ref is None or ref.labels != labels:
            self._node_refs[name] = NodeRef(name, dict(labels))
            self.fast.invalidate()
            self._recount([name])

    def delete_node(self, name: str) -> None:
        self._node_refs.pop(name, None)
        self.fast.invalidate()
        self._recount([name])

    @property
    def node_refs(self) -> Mapping[str, NodeRef]:
        return self._node_refs

    def holders(self, device: DeviceID) -> Held:
        """How ``device`` is held now: whole, and its shares with what they consume together."""
        return self._holders(device)

    # ------------------------------------------------------------------ extended resources
    def class_mapping(self) -> Mapping[str, str]:
        """Extended resource name -> the DeviceClass serving it (``allocator.device_class_mapping``),
        kept until the classes change."""
        if self._class_mapping is None:
            self._class_mapping = device_class_mapping(self.classes.values())
        return self._class_mapping

    def owns_special_claims(self, pod_uid: str) -> bool:
        return bool(self._special_by_owner.get(pod_uid))

    def special_claims_of(self, pod_uid: str) -> frozenset[str]:
        """Keys of the special claims (extended resources) the pod owns."""
        return frozenset(self._special_by_owner.get(pod_uid, ()))

    def _index_special(self, old: ResourceClaim | None, new: ResourceClaim | None) -> None:
        for claim, add in ((old, False), (new, True)):
            if claim is None or not claim.owner_pod_uid or not is_extended_resource_claim(claim.annotations):
                continue
            keys = self._special_by_owner.setdefault(claim.owner_pod_uid, set())
            if add:
                keys.add(claim.key)
            else:
                keys.discard(claim.key)
                if not keys:
                    del self._special_by_owner[claim.owner_pod_uid]

    def extended_devices(self, node: str) -> Devices | None:
        """Per extended resource, milli-devices in use of each device of ``node`` in search order."""
        return self.extended.devices(node)

    def extended_amounts(self, node: str) -> Amounts | None:
        """Extended resources DRA devices serve on ``node``: (allocatable, in use) in milli-devices."""
        return self.extended.amounts(node)

    def _holders(self, device: DeviceID) -> Held:
        whole = (self._claim_devices, self._inflight_devices)
        claimed = self._claim_shares.get(device)
        return held(device, whole, (claimed, unwritten(self._inflight_shares.get(device), claimed)))

    def _recount(self, nodes: Iterable[str] | None, moved: set[DeviceID] | None = None) -> None:
        """Count the extended resources of ``nodes`` (None: every node) again and tell the listener;
        ``moved``: only these devices changed hands."""
        if not self.extended.classes and not self.extended.by_node:
            return
        if nodes is None:
            nodes = set(self._node_refs) | set(self.extended.by_node)
        changed = self.extended.count(nodes, self._node_refs, self.slices, self.selectors, self._holders, moved)
        if changed and self.listener is not None:
            self.listener(changed)

    def _classes_changed(self) -> None:
        self.rules_version += 1
        self._class_mapping = None
        self.fast.invalidate()
        self.freed.notify()
        if self.extended.set_classes(self.classes.values()):
            self._recount(None)
            if self.claims_listener is not None:
                self.claims_listener(None)

    def _slices_changed(self) -> None:
        changed = self.slices.changed_nodes()  # drained on every change, counted only when it matters
        self.fast.invalidate()
        self.freed.notify()
        if self.extended.classes:
            self._recount(changed)

    def _devices_changed(self, devices: Iterable[DeviceID]) -> None:
        """Tell the fast path and the extended-resource counts of the devices whose holding changed. A
        bind changes a device's holders three times (in flight, claim written, in flight ended) but
        its holding only the first time (a share written to its claim is the in-flight one,
        ``unwritten``): the others are left out."""
        moved: dict[DeviceID, Held] = {}
        for device in dict.fromkeys(devices):
            now = self._holders(device)
            if self._held.get(device, FREE) == now:
                continue
            if now == FREE:
                self._held.pop(device, None)
            else:
                self._held[device] = now
            moved[device] = now
        if not moved:
            return
        for device in moved:
            key = (device.driver, device.pool)
            self.pool_versions[key] = self.pool_versions.get(key, 0) + 1
        self.fast.devices_changed(moved, moved.__getitem__)
        if self.extended.by_node:
            self._recount(self.extended.nodes_of(moved), set(moved))

    # ------------------------------------------------------------------ classes and slices
    def upsert_class(self, device_class: DeviceClass) -> None:
        self.classes[device_class.name] = device_class
        self._classes_changed()

    def delete_class(self, name: str) -> None:
        self.classes.pop(name, None)
        self._classes_changed()

    def replace_classes(self, classes: Iterable[DeviceClass]) -> None:
        self.classes = {c.name: c for c in classes}
        self._classes_changed()

    def upsert_slice(self, resource_slice: ResourceSlice) -> None:
        old = self.slices.get(resource_slice.name)
        if old is not None and replace(old, resource_version=resource_slice.resource_version) == resource_slice:
            # Republished as it was (a metadata update, say): the allocator reads nothing new, so the
            # fast path, the pools memo and capacity waiters are left alone.
            return
        self.slices.upsert(resource_slice)
        self._slices_changed()

    def delete_slice(self, name: str) -> None:
        self.slices.delete(name)
        self._slices_changed()

    def replace_slices(self, slices: Iterable[ResourceSlice]) -> None:
        self.slices.replace(slices)
        self._slices_changed()

    def upsert_taint_rule(self, rule: DeviceTaintRule) -> None:
        self.taint_rules.upsert(rule)
        self.rules_version += 1

    def delete_taint_rule(self, name: str) -> None:
        self.taint_rules.delete(name)
        self.rules_version += 1

    def replace_taint_rules(self, rules: Iterable[DeviceTaintRule]) -> None:
        self.taint_rules.replace(rules)
        self.rules_version += 1

    # ------------------------------------------------------------------ claims
    def upsert_claim(self, claim: ResourceClaim) -> bool:
        """Store a claim unless it is older than the stored one; returns whether it was stored."""
        old = self.claims.get(claim.key)
        if old is not None and old.uid == claim.uid:
            new_rv, old_rv = _rv(claim.resource_version), _rv(old.resource_version)
            if new_rv is not None and old_rv is not None and new_rv < old_rv:
                return False  # a watch event from before our own write: keep what we wrote
        self._uncount(old)
        self._index_special(old, claim)
        self.claims[claim.key] = claim
        if claim.allocation is not None:
            for device in allocated_device_ids(claim.allocation):
                self._claim_devices[device] = claim.key
            add_shares(self._claim_shares, claim.key, allocated_shares(claim.allocation))
        if (old is not None and old.allocation is not None) or claim.allocation is not None:
            self._devices_changed([*_devices_of(old), *_devices_of(claim)])
        if not set(_devices_of(old)) <= set(_devices_of(claim)):
            self.freed.notify()  # deallocated, or allocated elsewhere
        if self.claims_listener is not None and (old is None or old.devices != claim.devices):
            self.claims_listener((claim.key,))
        self.claim_changes.notify()
        return True

    def delete_claim(self, key: str) -> None:
        old = self.claims.pop(key, None)
        self._uncount(old)
        self._index_special(old, None)
        if old is not None and old.allocation is not None:
            self._devices_changed(_devices_of(old))
            self.freed.notify()
        if self.claims_listener is not None and old is not None:
            self.claims_listener((key,))
        self.claim_changes.notify()

    def replace_claims(self, claims: Iterable[ResourceClaim]) -> None:
        def upsert(claim: ResourceClaim) -> None:
            current = self.claims.get(claim.key)
            if current is not None and current.uid != claim.uid:
                self.delete_claim(claim.key)  # recreated under the same name: a different claim
            self.upsert_claim(claim)

        apply_relist(self.claims, {c.key: c for c in claims}, self.delete_claim, upsert)

    def _uncount(self, claim: ResourceClaim | None) -> None:
        if claim is None or claim.allocation is None:
            return
        for device in allocated_device_ids(claim.allocation):
            if self._claim_devices.get(device) == claim.key:
                del self._claim_devices[device]
        drop_shares(self._claim_shares, claim.key, allocated_shares(claim.allocation))

    # ------------------------------------------------------------------ allocated devices
    def allocated_view(self, pod_uid: str = "") -> AllocatedDevices:
        """Devices no other pod may take: claimed ones plus other pods' in-flight ones. The special
        claims the pod owns while it is being scheduled are leftovers of an earlier bind, which
        /bind deletes: their devices do not block the pod itself."""
        return AllocatedDevices(self._claim_devices, self._inflight_devices, pod_uid, self.special_claims_of(pod_uid))

    def shared_view(self, pod_uid: str = "") -> SharedView:
        """Shares of devices held by claims and by other pods' in-flight binds (the allocator's
        ``SharedDevices``), the pod's own leftover special claims left out as in ``allocated_view``."""
        own = self.special_claims_of(pod_uid)
        # A pod holding nothing itself sees every holder: the totals kept as devices change hands say it all.
        totals = self._held if not own and pod_uid not in self.inflight else None
        return SharedView(self._claim_shares, self._inflight_shares, pod_uid, own, totals)

    def shares(self, device: DeviceID) -> list[dict[str, Any]]:
        """Who holds which share of a device, for /debug."""
        return dra_views.shares(self, device)

    def holder(self, device: DeviceID) -> str:
        """Who holds a device, for /debug: ``claim ns/name``, ``in flight for pod <uid>`` or ``""``."""
        if device in self._claim_devices:
            return f"claim {self._claim_devices[device]}"
        if device in self._inflight_devices:
            return f"in flight for pod {self.inflight[self._inflight_devices[device]].pod}"
        return ""

    # ------------------------------------------------------------------ proposals
    def propose(
        self, pod_uid: str, claims: tuple[str, ...], by_node: Mapping[str, tuple[AllocationResult, ...]]
    ) -> None:
        self.proposals[pod_uid] = Proposal(claims, by_node, self.clock() + self.proposal_ttl)
        self.proposals.move_to_end(pod_uid)
        while len(self.proposals) > _PROPOSALS:
            self.proposals.popitem(last=False)

    def proposal(self, pod_uid: str, claims: tuple[str, ...], node: str) -> tuple[AllocationResult, ...] | None:
        """The filter-time allocation for ``node`` if it is for these claims, unexpired and still free."""
        proposal = self.proposals.get(pod_uid)
        if proposal is None or proposal.claims != claims or proposal.expires_at <= self.clock():
            return None
        results = proposal.by_node.get(node)
        if results is None:
            return None
        # Shares and shared counters depend on what else was allocated since: decide again.
        if any(r.shared for result in results for r in result.devices):
            return None
        ref = self._node_refs.get(node)
        if ref is None or self.slices.pools_for(ref).counters:
            return None
        allocated = self.allocated_view(pod_uid)
        for result in results:
            if any(device in allocated for device in allocated_device_ids(result)):
                return None
        return results

    # ------------------------------------------------------------------ in flight
    def begin(
        self,
        pod_uid: str,
        pod: str,
        node: str,
        claims: Mapping[str, AllocationResult],
        expires_at: float | None = None,
        *,
        held: bool = False,
    ) -> InFlight:
        """Count ``claims``' devices as allocated from now on, replacing the pod's earlier entry, until
        ``expires_at`` (this state's clock; the in-flight TTL from now by default)."""
        self.end(pod_uid)
        devices = tuple(d for result in claims.values() for d in allocated_device_ids(result))
        shares = tuple(share for result in claims.values() for share in allocated_shares(result))
        now = self.clock()
        until = now + self.inflight_ttl if expires_at is None else expires_at
        entry = InFlight(pod_uid, pod, node, dict(claims), devices, shares, now, until, held)
        self.inflight[pod_uid] = entry
        for device in devices:
            self._inflight_devices[device] = pod_uid
        add_shares(self._inflight_shares, pod_uid, shares)
        self._devices_changed([*devices, *(share.device for share in shares)])
        return entry

    def end(self, pod_uid: str) -> None:
        entry = self.inflight.pop(pod_uid, None)
        if entry is None:
            return
        for device in entry.devices:
            if self._inflight_devices.get(device) == pod_uid:
                del self._inflight_devices[device]
        drop_shares(self._inflight_shares, pod_uid, entry.shares)
        self._devices_changed([*entry.devices, *(share.device for share in entry.shares)])
        if entry.shares or any(device not in self._claim_devices for device in entry.devices):
            self.freed.notify()  # not (all) taken over by the written claims: an aborted or expired bind

    def expire(self) -> list[InFlight]:
        """Drop expired proposals and in-flight entries (a bind that never finished either way)."""
        now = self.clock()
        for uid in [uid for uid, p in self.proposals.items() if p.expires_at <= now]:
            del self.proposals[uid]
        expired = [entry for entry in self.inflight.values() if entry.expires_at <= now]
        for entry in expired:
            self.end(entry.pod_uid)
        return expired

    # ------------------------------------------------------------------ /debug
    def node_view(self, name: str) -> dict[str, Any] | None:
        """A node's pools in allocation order with their priorities and who holds each device."""
        return dra_views.node_view(self, name)

    def inflight_view(self) -> list[dict[str, Any]]:
        return dra_views.inflight_view(self)

    def counts(self) -> dict[str, int]:
        return {
            "deviceClasses": len(self.classes),
            "resourceClaims": len(self.claims),
            "resourceSlices": len(self.slices),
            "deviceTaintRules": len(self.taint_rules),
            "allocatedDevices": len(self._claim_devices),
            "sharedDevices": len(self._claim_shares),
            "inFlightAllocations": len(self.inflight),
        }

    def check_invariants(self) -> None:
        """Recompute the allocated-device maps from scratch and compare (tests use it)."""
        dra_invariants.check(self)
