"""DRA device allocation (resource.k8s.io/v1) with KEP-5773 ResourceSlice priorities.

Pure: ResourceSlices, DeviceClasses and ResourceClaims in, AllocationResults out. No I/O, no
HTTP, no Kubernetes client, like kube-scheduler's structured allocator.

* ``types`` - the v1 objects; ``parse`` / ``parse_slice`` - their strict parsers (priorities from spec or
  annotations); ``errors`` - the package's base error;
* ``pools`` - per-node pool gathering, validation and KEP-5773 order, memoised in ``SliceIndex``;
* ``cel`` - CEL selectors (cel-expr-python) with the Kubernetes quantity and semver libraries;
* ``requests`` - a claim's requests set up for the search; ``outcome`` - what Allocate answers;
* ``allocate`` - the backtracking first-fit search and the AllocationResult it builds;
* ``capacity`` - consumable capacity (shares, request policies); ``counters`` - shared counters
  of partitionable devices; ``constraints`` - matchAttribute / distinctAttribute; ``taints`` - device
  taints and DeviceTaintRules; ``binding`` - whether binding conditions let a claim's pod bind;
* ``extended`` - a DeviceClass's extendedResourceName counted on a node, for scoring;
  ``extended_claim`` - the special claim that serves such a name to a pod's containers;
* ``nodeselector`` / ``result`` - core/v1 NodeSelector matching, allocation JSON.
"""

from allocator.allocate import (
    REASON_CANNOT_ALLOCATE,
    REASON_INVALID_POOLS,
    Allocated,
    AllocationError,
    Allocator,
    Unschedulable,
)
from allocator.capacity import NO_SHARES, SharedDevices
from allocator.cel import SelectorCache, SelectorError
from allocator.counters import PoolCounters
from allocator.errors import AllocatorError
from allocator.extended import class_devices, device_use, extended_resource_classes
from allocator.extended_claim import (
    EXTENDED_RESOURCE_CLAIM_ANNOTATION,
    ExtendedClaimPlan,
    RequestMapping,
    claim_object,
    device_class_mapping,
    is_extended_resource_claim,
    plan_extended_claim,
)
from allocator.nodeselector import node_selector_matches, node_selector_to_obj
from allocator.parse import (
    ParseError,
    parse_device_class,
    parse_node_selector,
    parse_resource_claim,
)
from allocator.parse_slice import parse_resource_slice
from allocator.pools import NodePools, Pool
from allocator.result import (
    AllocatedShare,
    allocated_device_ids,
    allocated_shares,
    allocation_to_obj,
    parse_allocation,
)
from allocator.slice_index import SliceIndex
from allocator.taints import NO_TAINT_RULES, DeviceTaintRule, TaintRules, parse_device_taint_rule
from allocator.types import (
    POOL_PRIORITY_ANNOTATION,
    PRIORITY_ANNOTATION,
    AllocationResult,
    DeviceClass,
    DeviceID,
    DeviceRequestAllocationResult,
    NodeRef,
    NodeSelector,
    ResourceClaim,
    ResourceClaimConsumer,
    ResourceSlice,
)

__all__ = [
    "EXTENDED_RESOURCE_CLAIM_ANNOTATION",
    "NO_SHARES",
    "NO_TAINT_RULES",
    "POOL_PRIORITY_ANNOTATION",
    "PRIORITY_ANNOTATION",
    "REASON_CANNOT_ALLOCATE",
    "REASON_INVALID_POOLS",
    "Allocated",
    "AllocatedShare",
    "AllocationError",
    "AllocationResult",
    "Allocator",
    "AllocatorError",
    "DeviceClass",
    "DeviceID",
    "DeviceRequestAllocationResult",
    "DeviceTaintRule",
    "ExtendedClaimPlan",
    "NodePools",
    "NodeRef",
    "NodeSelector",
    "ParseError",
    "Pool",
    "PoolCounters",
    "RequestMapping",
    "ResourceClaim",
    "ResourceClaimConsumer",
    "ResourceSlice",
    "SelectorCache",
    "SelectorError",
    "SharedDevices",
    "SliceIndex",
    "TaintRules",
    "Unschedulable",
    "allocated_device_ids",
    "allocated_shares",
    "allocation_to_obj",
    "claim_object",
    "class_devices",
    "device_class_mapping",
    "device_use",
    "extended_resource_classes",
    "is_extended_resource_claim",
    "node_selector_matches",
    "node_selector_to_obj",
    "parse_allocation",
    "parse_device_class",
    "parse_device_taint_rule",
    "parse_node_selector",
    "parse_resource_claim",
    "parse_resource_slice",
    "plan_extended_claim",
]
