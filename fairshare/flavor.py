"""ResourceFlavor: which nodes a flavor covers, whether a pod may use it, and its resource weights.

Kueue semantics (flavorassigner): only NoSchedule/NoExecute flavor taints count, flavor tolerations
count toward its own taints, and a pod's nodeSelector/required affinity is filtered to the keys of
*this* flavor's nodeLabels before it is evaluated against those labels. Weights are KEP-8902's,
accepted in both draft shapes (``spec.resourceWeights`` quantities, ``spec.fairSharing.resourceWeights``
numbers); missing means 1.0.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fairshare.errors import QueueConfigError
from k8s_semantics.nodeselector import NodeSelectorRequirement, requirement_matches
from k8s_semantics.placement import PodPlacement, node_matches_placement
from k8s_semantics.quantity import QuantityError, parse_quantity
from k8s_semantics.taints import Taint, Toleration, tolerates

__all__ = [
    "DEFAULT_RESOURCE_WEIGHT",
    "NodeSelectorRequirement",
    "PodPlacement",
    "ResourceFlavor",
    "Taint",
    "Toleration",
    "crd_object",
    "flavor_fits_pod",
    "node_matches_flavor",
    "node_matches_placement",
    "parse_resource_flavor",
    "parse_toleration",
]

DEFAULT_RESOURCE_WEIGHT = 1.0
MAX_FLAVOR_ITEMS = 8
_CHECKED_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
_EFFECTS = frozenset({"NoSchedule", "PreferNoSchedule", "NoExecute"})


@dataclass(frozen=True, slots=True)
class ResourceFlavor:
    name: str
    node_labels: Mapping[str, str] = field(default_factory=dict)
    node_taints: tuple[Taint, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    resource_weights: Mapping[str, float] = field(default_factory=dict)

    def weight(self, resource: str) -> float:
        return self.resource_weights.get(resource, DEFAULT_RESOURCE_WEIGHT)


def node_matches_flavor(node_labels: Mapping[str, str], flavor: ResourceFlavor) -> bool:
    """A node belongs to a flavor when it carries every flavor nodeLabel; an empty flavor takes all."""
    return all(node_labels.get(k) == v for k, v in flavor.node_labels.items())


def flavor_fits_pod(flavor: ResourceFlavor, pod: PodPlacement) -> str | None:
    """None when the pod may use the flavor, otherwise the reason it may not."""
    tolerations = pod.tolerations + flavor.tolerations
    for taint in flavor.node_taints:
        if taint.effect not in _CHECKED_EFFECTS:
            continue
        if not any(tolerates(t, taint) for t in tolerations):
            return f"untolerated taint {taint.key}={taint.value}:{taint.effect} of flavor {flavor.name}"
    keys = flavor.node_labels
    for key, value in pod.node_selector.items():
        if key in keys and keys[key] != value:
            return f"nodeSelector {key}={value} does not match flavor {flavor.name}"
    terms: list[tuple[NodeSelectorRequirement, ...]] = []
    for term in pod.affinity_terms:
        kept = tuple(r for r in term if r.key in keys)
        if not kept:
            return None  # one term lost every expression: the whole affinity is dropped
        terms.append(kept)
    if terms and not any(all(requirement_matches(r, keys) for r in term) for term in terms):
        return f"required node affinity does not match flavor {flavor.name}"
    return None


def _str_map(raw: Any, path: str) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
        raise QueueConfigError(f"{path}: must be a map of strings")
    if len(raw) > MAX_FLAVOR_ITEMS:
        raise QueueConfigError(f"{path}: at most {MAX_FLAVOR_ITEMS} entries")
    return dict(raw)


def _list(raw: Any, path: str) -> list[Any]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise QueueConfigError(f"{path}: must be a list")
    if len(raw) > MAX_FLAVOR_ITEMS:
        raise QueueConfigError(f"{path}: at most {MAX_FLAVOR_ITEMS} entries")
    return raw


def _weights(raw: Any, path: str, quantities: bool) -> dict[str, float]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise QueueConfigError(f"{path}: must be a map of resource name to weight")
    out: dict[str, float] = {}
    for name, value in raw.items():
        fpath = f"{path}.{name}"
        if isinstance(value, bool):
            raise QueueConfigError(f"{fpath}: must be a number")
        if quantities and isinstance(value, str):
            try:
                weight = float(parse_quantity(value))
            except QuantityError as exc:
                raise QueueConfigError(f"{fpath}: {exc}") from None
        elif isinstance(value, int | float):
            weight = float(value)
        else:
            raise QueueConfigError(f"{fpath}: must be a {'quantity or number' if quantities else 'number'}")
        if not weight > 0:
            raise QueueConfigError(f"{fpath}: must be > 0")
        out[str(name)] = weight
    return out


def crd_object(raw: Any, path: str) -> tuple[str, Mapping[str, Any], str]:
    """(name, spec, the spec's field path) of a CRD-shaped object: ``metadata.name`` + ``spec``, or flat
    (``name`` and the spec's fields at the top). Every queue parser reads its objects through this."""
    if not isinstance(raw, Mapping):
        raise QueueConfigError(f"{path}: must be an object")
    meta = raw.get("metadata")
    name = (meta.get("name") if isinstance(meta, Mapping) else None) or raw.get("name")
    if not isinstance(name, str) or not name:
        raise QueueConfigError(f"{path}.metadata.name: required")
    spec = raw.get("spec", raw)
    spath = f"{path}.spec" if "spec" in raw else path
    if not isinstance(spec, Mapping):
        raise QueueConfigError(f"{spath}: must be an object")
    return name, spec, spath


def parse_toleration(raw: Any, path: str) -> Toleration:
    if not isinstance(raw, Mapping):
        raise QueueConfigError(f"{path}: must be an object")
    tol = Toleration(
        key=str(raw.get("key", "")),
        operator=str(raw.get("operator", "Equal") or "Equal"),
        value=str(raw.get("value", "")),
        effect=str(raw.get("effect", "")),
    )
    if tol.operator not in ("Equal", "Exists", "Lt", "Gt"):
        raise QueueConfigError(f"{path}.operator: must be Equal, Exists, Lt or Gt")
    if not tol.key and tol.operator != "Exists":
        raise QueueConfigError(f"{path}.operator: must be Exists when key is empty")
    return tol


def parse_resource_flavor(raw: Any, path: str) -> ResourceFlavor:
    """Parse a ResourceFlavor object (``metadata.name`` or ``name``, and ``spec`` or flat fields)."""
    name, spec, spath = crd_object(raw, path)
    taints: list[Taint] = []
    for i, t in enumerate(_list(spec.get("nodeTaints"), f"{spath}.nodeTaints")):
        tpath = f"{spath}.nodeTaints[{i}]"
        if not isinstance(t, Mapping) or not t.get("key"):
            raise QueueConfigError(f"{tpath}.key: required")
        effect = str(t.get("effect", ""))
        if effect not in _EFFECTS:
            raise QueueConfigError(f"{tpath}.effect: must be NoSchedule, PreferNoSchedule or NoExecute")
        taints.append(Taint(key=str(t["key"]), value=str(t.get("value", "")), effect=effect))
    tolerations = tuple(
        parse_toleration(t, f"{spath}.tolerations[{i}]")
        for i, t in enumerate(_list(spec.get("tolerations"), f"{spath}.tolerations"))
    )
    weights = _weights(spec.get("resourceWeights"), f"{spath}.resourceWeights", quantities=True)
    fs = spec.get("fairSharing")
    if fs is not None:
        if not isinstance(fs, Mapping):
            raise QueueConfigError(f"{spath}.fairSharing: must be an object")
        fs_weights = _weights(fs.get("resourceWeights"), f"{spath}.fairSharing.resourceWeights", quantities=False)
        if weights and fs_weights:
            raise QueueConfigError(
                f"{spath}.fairSharing.resourceWeights: set either this or spec.resourceWeights, not both"
            )
        weights = weights or fs_weights
    if len(weights) > MAX_FLAVOR_ITEMS:
        raise QueueConfigError(f"{spath}.resourceWeights: at most {MAX_FLAVOR_ITEMS} entries")
    return ResourceFlavor(
        name=name,
        node_labels=_str_map(spec.get("nodeLabels"), f"{spath}.nodeLabels"),
        node_taints=tuple(taints),
        tolerations=tolerations,
        resource_weights=weights,
    )
