"""What an ``Allocate`` call answers, with upstream's split between the node and the pod.

``Allocated`` (one AllocationResult per claim), ``Unschedulable`` (this node cannot do it; another
node may) or ``AllocationError`` raised (the pod is at fault everywhere: unknown class, a selector
that does not compile or fails at runtime, an ``All`` request on a node whose pools are being
updated, a claim asking for more than 32 devices).
"""

from __future__ import annotations

from dataclasses import dataclass

from allocator.errors import AllocatorError
from allocator.types import AllocationResult

__all__ = ["REASON_CANNOT_ALLOCATE", "REASON_INVALID_POOLS", "Allocated", "AllocationError", "Unschedulable"]

REASON_CANNOT_ALLOCATE = "cannot allocate all claims"  # upstream's node-level message
REASON_INVALID_POOLS = "invalid resource pools were encountered"


class AllocationError(AllocatorError):
    """The pod cannot be scheduled anywhere as it is (not a property of one node)."""


@dataclass(frozen=True, slots=True)
class Allocated:
    """One AllocationResult per claim, in the order the claims were given."""

    results: tuple[AllocationResult, ...]


@dataclass(frozen=True, slots=True)
class Unschedulable:
    """The claims cannot be allocated on this node."""

    reason: str
