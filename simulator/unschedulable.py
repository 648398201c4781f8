"""Pod shapes known to find no node, while the cluster's free capacity has only shrunk.

Every check of the extender's filter asks whether a node still has room for the pod (cpu, memory,
GPUs and their devices, pod slots), and a bind only takes room away. So between two deletions, a pod
exactly like one that found no node finds none either. The simulator records its
failure without calling the filter; a deletion frees room and forgets every shape. Inflate and fill
runs delete nothing: once the cluster is full (about a quarter of an inflate run's pods on the openb
default trace, nearly all repeats of some 90 shapes), arriving pods of a shape seen failing cost no
filter call. Placements are the same (``tests/simulator/test_unschedulable.py`` runs both ways).

A pod's shape is everything the extender reads of it except its identity: its body without name,
UID and the name of its ResourceClaim, and what its claim asks for. Pods of a queue or a pod group
are never remembered: a queue's fair share moves with other queues' usage, and a gang member's
verdict with its group's plan, not with room alone.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import msgspec

from simulator.trace import SimPod

__all__ = ["UnschedulableShapes", "shape"]

_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder(order="sorted").encode


def shape(pod: SimPod) -> Hashable:
    """What the extender's filter reads of ``pod``, its name and UID left out."""
    body: dict[str, Any] = _decode(pod.body)
    metadata = dict(body.get("metadata") or {})
    for identity in ("name", "uid", "generateName"):
        metadata.pop(identity, None)
    spec = dict(body.get("spec") or {})
    claims = spec.get("resourceClaims")
    if claims:  # the claim's name follows the pod's; what it asks for is in the fields below
        spec["resourceClaims"] = [{k: v for k, v in ref.items() if k != "resourceClaimName"} for ref in claims]
    anonymous = _encode({**body, "metadata": metadata, "spec": spec})
    return (anonymous, pod.namespace, pod.gpus, pod.gpu_milli, pod.gpu_spec)


class UnschedulableShapes:
    """The shapes that found no node since the last deletion."""

    def __init__(self) -> None:
        self._shapes: set[Hashable] = set()
        self.skipped = 0  # pods answered from here, for tests and curiosity

    def known(self, key: Hashable) -> bool:
        found = key in self._shapes
        self.skipped += found
        return found

    def failed(self, key: Hashable) -> None:
        self._shapes.add(key)

    def freed(self) -> None:
        """A pod was deleted: room may have come back anywhere."""
        self._shapes.clear()
