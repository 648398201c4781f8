"""The special claim of a pod's extended resources that DeviceClasses serve (DRAExtendedResource),
planned per node as kube-scheduler 1.36's DynamicResources does (``allocator.extended_claim``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from allocator import ExtendedClaimPlan, ResourceClaim, claim_object, parse_resource_claim, plan_extended_claim
from scoring.framework import PodInfo

__all__ = ["SPECIAL_CLAIM_NAME", "ExtendedClaims"]

# The in-memory name of the special claim until the API server names it (not a valid name, as upstream).
SPECIAL_CLAIM_NAME = "<extended-resources>"


@dataclass(slots=True)
class ExtendedClaims:
    """The pod's extended resources that DeviceClasses serve (DRAExtendedResource), and the special
    claim each node needs: only the resources the node does not advertise through a device plugin."""

    pod: PodInfo
    classes: Mapping[str, str]  # resource -> DeviceClass name, for the resources the pod asks for
    _by_need: dict[frozenset[str], tuple[ResourceClaim, ExtendedClaimPlan] | None] = field(default_factory=dict)

    def for_node(self, allocatable: Mapping[str, int] | None) -> tuple[ResourceClaim, ExtendedClaimPlan] | None:
        if allocatable is None:
            return None  # a node the cache does not know (NodeList mode): judged by its own allocatable
        missing = [r for r in self.classes if allocatable.get(r, 0) <= 0]
        if not missing:
            return None  # device plugins advertise them all here
        need = frozenset(missing)
        if need not in self._by_need:
            self._by_need[need] = self._claim(need)
        return self._by_need[need]

    def _claim(self, need: frozenset[str]) -> tuple[ResourceClaim, ExtendedClaimPlan] | None:
        plan = plan_extended_claim(self.pod.extended_requests, {r: self.classes[r] for r in need})
        if plan is None:
            return None
        obj = claim_object(self.pod.namespace, self.pod.name, self.pod.uid, plan)
        obj["metadata"] |= {"name": SPECIAL_CLAIM_NAME, "uid": f"extended-resources/{self.pod.uid}"}
        return parse_resource_claim(obj), plan
