"""Read-only watch of Kueue's own queue objects (``queues.watchKueue: true``, cluster mode only).

Kueue's ResourceFlavors, Cohorts, ClusterQueues and LocalQueues (kueue.x-k8s.io/v1beta2) are listed
and watched by the ordinary reflectors; this module keeps them by kind and key and, after every
change, rebuilds the ``queues:`` section: the config file's section with those four lists replaced
by the watched objects (its kaiQueues and fairSharing stay). The result goes through the same
validation as the file and into ``Fairness.reconfigure`` (usage recounted).

A section that does not validate is never applied: the last good configuration stays in force and
the error, naming the object and field, is kept for /debug/queues (``KueueSource.view``). Only each
object's identity and spec are kept: status, managedFields and the rest of the metadata change often
(Kueue's controller writes status) and mean nothing to quota, so a status-only update costs no
rebuild. Nothing is applied before all four kinds have been listed once: a partial tree would put
pods of not-yet-seen queues outside quota; /readyz waits for the same lists.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from app.cluster.cache import ClusterCache
from app.cluster.reflector import Resource
from fairshare.config import QueueConfig, parse_queue_config
from fairshare.errors import QueueConfigError

__all__ = ["KUEUE_API", "KUEUE_KINDS", "KUEUE_NOT_SERVED", "KUEUE_SOURCES", "KueueKind", "KueueSource"]

log = logging.getLogger("kube_gpu_extender.kueue")

KUEUE_API = "/apis/kueue.x-k8s.io/v1beta2"
KUEUE_NOT_SERVED = "kueue.x-k8s.io/v1beta2 not served: install Kueue CRDs or set queues.watchKueue: false"


@dataclass(frozen=True, slots=True)
class KueueKind:
    kind: str  # ClusterQueue
    resource: str  # clusterqueues (the URL path segment)
    section: str  # clusterQueues (the list in the queues: section)
    namespaced: bool

    @property
    def source(self) -> str:
        """Reflector/readiness name: the resource's fully qualified name, as kubectl spells it."""
        return f"{self.resource}.kueue.x-k8s.io"


# Flavors first: the order /debug lists them in, and the order a ClusterQueue's references resolve.
KUEUE_KINDS = (
    KueueKind("ResourceFlavor", "resourceflavors", "resourceFlavors", False),
    KueueKind("Cohort", "cohorts", "cohorts", False),
    KueueKind("ClusterQueue", "clusterqueues", "clusterQueues", False),
    KueueKind("LocalQueue", "localqueues", "localQueues", True),
)
KUEUE_SOURCES = tuple(k.source for k in KUEUE_KINDS)
_BY_SECTION = {k.section: k for k in KUEUE_KINDS}
# "queues.clusterQueues[3].spec...": the parser's path into the rebuilt section, turned back into the object's name.
_INDEXED = re.compile(r"queues\.(resourceFlavors|cohorts|clusterQueues|localQueues)\[(\d+)\](\.?)")

Obj = dict[str, Any]


def _key(obj: Mapping[str, Any], namespaced: bool) -> str:
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    name = str(meta.get("name") or "")
    return f"{meta.get('namespace') or ''}/{name}" if namespaced else name


def _strip(obj: Mapping[str, Any], namespaced: bool) -> Obj:
    """Identity and spec only, in the shape the queue parsers take (``metadata.name`` + ``spec``)."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    identity: Obj = {"name": meta.get("name")}
    if namespaced:
        identity["namespace"] = meta.get("namespace")
    spec = obj.get("spec")
    return {"metadata": identity, "spec": {} if spec is None else spec}


class Reconfigurable(Protocol):
    """What takes a rebuilt configuration: ``app.pipeline.fairness.Fairness`` (it recounts Kueue and KAI usage)."""

    def reconfigure(self, config: QueueConfig) -> None: ...


class KueueSource:
    """The watched Kueue objects and the queue configuration rebuilt from them."""

    def __init__(
        self, file_section: Mapping[str, Any], usage: Reconfigurable, clock: Callable[[], float] | None = None
    ) -> None:
        # The file's queues: section without the lists the watch owns (kaiQueues, fairSharing, watchKueue stay).
        self._base = {k: v for k, v in file_section.items() if k not in _BY_SECTION}
        self.usage = usage
        self.clock = clock
        self.objects: dict[str, dict[str, Obj]] = {k.section: {} for k in KUEUE_KINDS}
        self.listed: set[str] = set()
        self.generation = 0  # bumped whenever a watched spec changes
        self.applied_generation = 0  # the generation in force; 0 while the file's configuration is
        self.applies = 0
        self.failures = 0
        self.last_error = ""
        self._applied_at: float | None = None
        self._failed_at: float | None = None

    # ---------------------------------------------------------------- reflector callbacks
    def resources(self) -> tuple[Resource, ...]:
        """One read-only Resource per kind, for app.cluster.reflector.Reflector (the cache argument is unused)."""
        return tuple(self._resource(k) for k in KUEUE_KINDS)

    def _resource(self, kind: KueueKind) -> Resource:
        def replace(_cache: ClusterCache, items: list[Obj]) -> None:
            self.replace(kind.section, items)

        def upsert(_cache: ClusterCache, obj: Obj) -> None:
            self.upsert(kind.section, obj)

        def delete(_cache: ClusterCache, obj: Obj) -> None:
            self.delete(kind.section, obj)

        return Resource(
            name=kind.source,
            path=f"{KUEUE_API}/{kind.resource}",
            field_selector="",
            replace=replace,
            upsert=upsert,
            delete=delete,
            not_found=KUEUE_NOT_SERVED,
        )

    def replace(self, section: str, items: list[Obj]) -> None:
        """A (re)list: the kind's whole set of objects."""
        namespaced = _BY_SECTION[section].namespaced
        new = {_key(obj, namespaced): _strip(obj, namespaced) for obj in items}
        if section in self.listed and new == self.objects[section]:
            return
        self.objects[section] = new
        self.listed.add(section)
        self._changed()

    def upsert(self, section: str, obj: Obj) -> None:
        namespaced = _BY_SECTION[section].namespaced
        key, stripped = _key(obj, namespaced), _strip(obj, namespaced)
        if self.objects[section].get(key) == stripped:
            return  # a status or metadata update: nothing quota depends on changed
        self.objects[section][key] = stripped
        self._changed()

    def delete(self, section: str, obj: Obj) -> None:
        if self.objects[section].pop(_key(obj, _BY_SECTION[section].namespaced), None) is not None:
            self._changed()

    # ---------------------------------------------------------------- rebuild
    @property
    def synced(self) -> bool:
        return len(self.listed) == len(KUEUE_KINDS)

    def section(self) -> tuple[Obj, dict[str, list[str]]]:
        """The queues: section to apply, and per list the object keys in list order (to name errors)."""
        raw = dict(self._base)
        order: dict[str, list[str]] = {}
        for section, objects in self.objects.items():
            order[section] = sorted(objects)
            raw[section] = [objects[key] for key in order[section]]
        return raw, order

    def _changed(self) -> None:
        self.generation += 1
        if self.synced:
            self.rebuild()

    def rebuild(self) -> bool:
        """Validate the rebuilt section and apply it; on error keep the configuration in force. True if applied."""
        raw, order = self.section()
        try:
            config = parse_queue_config(raw, strict=False)
        except QueueConfigError as exc:
            return self._failed(_name_objects(str(exc), order))
        except Exception as exc:  # a parser bug on an odd object must not stop the watch loop
            log.exception("kueue: unexpected error validating the watched objects")
            return self._failed(f"unexpected {type(exc).__name__}: {exc}")
        self.usage.reconfigure(config)
        if self.last_error:
            log.info("kueue: watched objects valid again (previous error: %s)", self.last_error)
        self.last_error = ""
        self.applied_generation = self.generation
        self.applies += 1
        self._applied_at = self._now()
        log.info(
            "kueue: applied generation %d (%s)",
            self.generation,
            ", ".join(f"{len(objs)} {s}" for s, objs in self.objects.items()),
        )
        return True

    def _failed(self, message: str) -> bool:
        self.last_error = message
        self.failures += 1
        self._failed_at = self._now()
        kept = f"generation {self.applied_generation}" if self.applied_generation else "the config file's lists"
        log.error("kueue: invalid queue objects, keeping the last good queue configuration (%s): %s", kept, message)
        return False

    def _now(self) -> float | None:
        return self.clock() if self.clock is not None else None

    # ---------------------------------------------------------------- operator view
    def view(self) -> dict[str, Any]:
        """For /debug/queues: where the queue configuration comes from and whether the last change applied."""
        now = self._now()

        def age(at: float | None) -> float | None:
            return None if at is None or now is None else round(now - at, 3)

        return {
            "kind": "kueue",
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "synced": self.synced,
            # Until the first valid rebuild the file's lists stay in force (and /readyz waits for the lists).
            "inForce": "kueue" if self.applied_generation else "file",
            "notListedYet": [k.kind for k in KUEUE_KINDS if k.section not in self.listed],
            "objects": {k.kind: len(self.objects[k.section]) for k in KUEUE_KINDS},
            "generation": self.generation,
            "appliedGeneration": self.applied_generation,
            "applies": self.applies,
            "failures": self.failures,
            "lastError": self.last_error,
            "lastAppliedAgeSeconds": age(self._applied_at),
            "lastErrorAgeSeconds": age(self._failed_at) if self.last_error else None,
        }


def _name_objects(message: str, order: Mapping[str, list[str]]) -> str:
    """Replace the parser's list index (meaningless for watched objects) by the object's kind and name."""

    def named(match: re.Match[str]) -> str:
        keys, index = order.get(match[1], []), int(match[2])
        if index >= len(keys):
            return match[0]
        return f"{_BY_SECTION[match[1]].kind} {keys[index]}" + (": " if match[3] else "")

    return _INDEXED.sub(named, message)
