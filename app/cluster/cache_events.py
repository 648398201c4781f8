"""What the cache tells its subscribers, as typed events (published in the order things change).

- ``NodeChanged``: a node was added or changed (``labels``), or removed (``labels`` None);
- ``PodCounted``: what a pod counts changed: on which node, as which version, whether through our
  assumption (``counted``), or nothing any more (``counted`` None). Published again for every pod on
  a node whose labels changed, since its flavor may have changed with them;
- ``PodChanged``: a pod event from the watch: the pod as it is now, or None once deleted.

Subscribers are called synchronously, on the event loop thread, in the order they subscribed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from scoring.framework import PodInfo

__all__ = ["CacheEvent", "Counted", "NodeChanged", "PodChanged", "PodCounted", "Subscriber"]


class Counted(NamedTuple):
    """Where a pod counts and as which version (the bound pod, or our assumption of it)."""

    node: str
    pod: PodInfo
    assumed: bool


@dataclass(frozen=True, slots=True)
class NodeChanged:
    name: str
    labels: Mapping[str, str] | None  # None: the node was removed


@dataclass(frozen=True, slots=True)
class PodCounted:
    uid: str
    counted: Counted | None  # None: the pod counts nowhere now


@dataclass(frozen=True, slots=True)
class PodChanged:
    uid: str
    pod: PodInfo | None  # None: deleted (or finished and dropped by the watch)


CacheEvent = NodeChanged | PodCounted | PodChanged
Subscriber = Callable[[CacheEvent], None]
