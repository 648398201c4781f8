"""Per counted pod, the kinds of device use it adds to its node (``NodeInfo.pod_kinds``, read by
GpuClustering), kept at cache-update time.

A pod's kind for an extended resource (``scoring.framework.device_kind``): a share of one device, or
n whole devices. It is read as ``PodInfo.device_request`` reads the pod's demand:

* container requests of the resource (device plugin, or DRA's extended-resource claim): n whole
  devices;
* else the pod's ResourceClaims: per ``exactly`` request (the first alternative of a
  ``firstAvailable`` one) with ``ExactCount`` whose DeviceClass serves the resource
  (``extendedResourceName``), its ``count`` devices, summed over the pod's claims; one device
  with ``capacity.requests`` is a share.

The claim rule reads the claim's *spec*, not its allocation: what a claim asks is known from the
claim object alone and never changes for one claim (the API server keeps ``spec`` immutable), so a
pod's kind does not depend on whether, or where, its claim is allocated yet. It is exact for the
simulator's claims (a share asks one device with ``capacity.requests`` of its milli-GPUs, a whole-GPU
pod ``count`` devices without). Where it differs from the demand scoring reads for a pending pod
(``app/pipeline/claim_devices.py``, which weighs the capacity request against the devices'
capacity): a capacity request for a device's whole capacity counts as a share here.

The kind is a function of the counted version of the pod, the claims it names and which class
serves which resource. The cache works it out again whenever one of these changes: on every
``_recount`` of the pod, and through ``DraState.claims_listener`` for the pods that name a changed
claim (``readers``), or all of them when the classes changed. It stores what it added (``applied``)
and takes exactly that out again, so the counts stay exact in any event order: a pod counted
before its claim is known adds no kind, and adds it when the claim arrives.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from allocator import DeviceClass, ResourceClaim
from allocator.types import ALLOCATION_MODE_EXACT_COUNT
from app.cluster.index import reindex
from scoring.framework import PodInfo, device_kind
from scoring.resources import is_extended_resource_name

__all__ = ["Kinds", "PodKinds", "kinds_of"]

Kinds = tuple[tuple[str, int], ...]  # (resource, kind), sorted


def kinds_of(pod: PodInfo, claims: Mapping[str, ResourceClaim], classes: Mapping[str, DeviceClass]) -> Kinds:
    """The pod's kind per extended resource; ``classes``: extended resource -> the class serving it."""
    found: dict[str, int] = {}
    for name, amount in pod.resources.requests.items():
        if amount > 0 and is_extended_resource_name(name):
            found[name] = amount
    if pod.claims and classes:
        for resource, (count, share) in _claimed(pod, claims, classes).items():
            kind = device_kind(count, share)
            if resource not in found and kind is not None:
                found[resource] = kind
    return tuple(sorted(found.items()))


def _claimed(
    pod: PodInfo, claims: Mapping[str, ResourceClaim], classes: Mapping[str, DeviceClass]
) -> dict[str, tuple[int, bool]]:
    """Per resource, the devices the pod's claims ask for and whether one of them asks for a share."""
    resource_of = {device_class.name: resource for resource, device_class in classes.items()}
    out: dict[str, tuple[int, bool]] = {}
    for ref in pod.claims:
        claim = claims.get(f"{pod.namespace}/{ref.claim}")
        if claim is None:
            continue
        for request in claim.devices.requests:
            alt = request.exactly or (request.first_available[0] if request.first_available else None)
            if alt is None or alt.allocation_mode != ALLOCATION_MODE_EXACT_COUNT or alt.count <= 0:
                continue
            resource = resource_of.get(alt.device_class_name)
            if resource is None:
                continue
            count, share = out.get(resource, (0, False))
            out[resource] = (count + alt.count, share or bool(alt.capacity_requests))
    return out


def _claim_keys(pod: PodInfo | None) -> tuple[str, ...]:
    return () if pod is None else tuple(f"{pod.namespace}/{ref.claim}" for ref in pod.claims)


class PodKinds:
    """What each counted pod adds (``applied``) and which counted pods name which claim."""

    def __init__(self) -> None:
        self._applied: dict[str, Kinds] = {}  # uid -> kinds added to the node it counts on
        self._keys: dict[str, tuple[str, ...]] = {}  # uid -> the claims its counted version names
        self._readers: dict[str, set[str]] = {}  # claim key -> uids

    def applied(self, uid: str) -> Kinds:
        return self._applied.get(uid, ())

    def set(self, uid: str, pod: PodInfo | None, kinds: Kinds) -> None:
        """``pod`` (its counted version, None: counted nowhere) now adds ``kinds``."""
        if kinds:
            self._applied[uid] = kinds
        else:
            self._applied.pop(uid, None)
        keys = _claim_keys(pod)
        old = self._keys.get(uid, ())
        if keys == old:
            return
        reindex(self._readers, uid, old, keys)
        if keys:
            self._keys[uid] = keys
        else:
            self._keys.pop(uid, None)

    def readers(self, keys: Iterable[str] | None) -> list[str]:
        """The counted pods that name any of these claims (None: any claim), in a stable order."""
        if keys is None:
            return sorted(self._keys)
        found: set[str] = set()
        for key in keys:
            found |= self._readers.get(key, set())
        return sorted(found)

    def check(self, counted: Mapping[str, PodInfo], kinds: Mapping[str, Kinds]) -> None:
        """Compare with ``counted`` (uid -> counted version) and their ``kinds`` worked out afresh."""
        want_keys = {uid: keys for uid, pod in counted.items() if (keys := _claim_keys(pod))}
        want_applied = {uid: found for uid, found in kinds.items() if found}
        if want_keys != self._keys or want_applied != self._applied:
            raise AssertionError(f"pod kinds drifted: have {self._applied}, want {want_applied}")
        readers: dict[str, set[str]] = {}
        for uid, keys in want_keys.items():
            for key in keys:
                readers.setdefault(key, set()).add(uid)
        if readers != self._readers:
            raise AssertionError(f"claim readers drifted: have {self._readers}, want {readers}")
