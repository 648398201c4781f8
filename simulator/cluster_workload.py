"""GpuFragmentation's ``workload`` and GpuCpuBalance's ``cpuPerGpu`` from a cluster's own pods
(``kube-gpu-extender workload``), read from the API server or from a ``kubectl get -o yaml`` file.

Which pods count:

* bound and pending pods; finished ones (phase ``Succeeded`` or ``Failed``) only with
  ``include_finished``;
* not DaemonSet pods nor static (mirror) pods: they are tied to their node, nobody chooses where
  they go;
* with ``scheduler_names``, only pods whose ``spec.schedulerName`` is one of them (unset is
  ``default-scheduler``).

A pod's cpu and memory are its effective requests as kube-scheduler computes them (containers,
init containers, pod-level resources, overhead). Its GPUs are whole GPUs:

* ``nvidia.com/gpu`` in its container requests (the device plugin's, or DRA's extended resource);
* plus the devices its ResourceClaims get from a GPU DeviceClass (``gpu_classes``): for an
  allocated claim its allocation's results of requests of such a class (admin access left out);
  for a claim not allocated yet, or one still to be made from a ResourceClaimTemplate, the
  ``ExactCount`` count of each such request (a ``firstAvailable`` request: its first
  subrequest). ``All`` requests count once allocated. A claim several pods share counts for each
  of them. A share of a device (consumable capacity) counts as a whole GPU.

Everything else is ``simulator.policies``: task types most frequent first until they cover 95 % of
the pods, and the milli-CPU the GPU pods ask per whole GPU.
"""

from __future__ import annotations

import datetime
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from k8s_semantics.quantity import QuantityError
from scoring.resources import pod_resources
from simulator.policies import cpu_per_gpu, workload
from simulator.trace import GPU, SimPod

__all__ = [
    "DEFAULT_GPU_CLASSES",
    "Collector",
    "Selection",
    "Tally",
    "claim_gpus",
    "collect_cluster",
    "render",
]

DEFAULT_GPU_CLASSES = ("gpu.nvidia.com",)
DEFAULT_SCHEDULER = "default-scheduler"
FINISHED = ("Succeeded", "Failed")
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
DRA = "/apis/resource.k8s.io/v1"


@dataclass(frozen=True, slots=True)
class Selection:
    """Which pods count and which DeviceClasses are GPUs."""

    scheduler_names: frozenset[str] = frozenset()  # empty: every scheduler
    include_finished: bool = False
    gpu_classes: frozenset[str] = frozenset(DEFAULT_GPU_CLASSES)


@dataclass(slots=True)
class Tally:
    """What was read and what was left out, for the output's header."""

    bound: int = 0
    pending: int = 0
    finished: int = 0  # left out
    node_bound: int = 0  # DaemonSet and static pods, left out
    other_scheduler: int = 0  # left out
    unreadable: list[str] = field(default_factory=list)  # "namespace/name: why", left out
    container_gpu_pods: int = 0
    claim_gpu_pods: int = 0
    missing_claims: int = 0  # claim references found neither as a claim nor as a template
    claims_unlisted: str = ""  # why ResourceClaims could not be read ("" when they were)

    @property
    def counted(self) -> int:
        return self.bound + self.pending


@dataclass(frozen=True, slots=True)
class _PodRecord:
    namespace: str
    name: str
    cpu_milli: int
    memory: int
    gpus: int  # from container requests
    claims: tuple[tuple[str, str], ...]  # ("claim" | "template", name)


def _class_of(request: Mapping[str, Any]) -> tuple[str, str, int, bool]:
    """(deviceClassName, allocationMode, count, adminAccess) of an ``exactly`` request or subrequest."""
    mode = str(request.get("allocationMode") or "ExactCount")
    count = request.get("count")
    return (
        str(request.get("deviceClassName") or ""),
        mode,
        count if isinstance(count, int) and not isinstance(count, bool) else 1,
        bool(request.get("adminAccess")),
    )


def claim_gpus(claim_spec: Mapping[str, Any], status: Mapping[str, Any] | None, gpu_classes: Iterable[str]) -> int:
    """Devices of a GPU class a claim holds (allocated) or asks for (``ExactCount``), whole."""
    classes = set(gpu_classes)
    devices = claim_spec.get("devices") if isinstance(claim_spec, Mapping) else None
    requests = devices.get("requests") if isinstance(devices, Mapping) else None
    by_name: dict[str, tuple[str, str, int, bool]] = {}
    first: list[tuple[str, str, int, bool]] = []
    for request in requests if isinstance(requests, list) else ():
        if not isinstance(request, Mapping):
            continue
        name = str(request.get("name") or "")
        exactly = request.get("exactly")
        if isinstance(exactly, Mapping):
            by_name[name] = _class_of(exactly)
            first.append(by_name[name])
            continue
        alternatives = [a for a in request.get("firstAvailable") or () if isinstance(a, Mapping)]
        for index, alternative in enumerate(alternatives):
            by_name[f"{name}/{alternative.get('name') or ''}"] = _class_of(alternative)
            if index == 0:
                first.append(by_name[f"{name}/{alternative.get('name') or ''}"])
    allocation = status.get("allocation") if isinstance(status, Mapping) else None
    results = ((allocation or {}).get("devices") or {}).get("results") if isinstance(allocation, Mapping) else None
    if isinstance(results, list):
        taken = 0
        for result in results:
            if not isinstance(result, Mapping) or result.get("adminAccess"):
                continue
            request = by_name.get(str(result.get("request") or ""))
            if request is not None and request[0] in classes and not request[3]:
                taken += 1
        return taken
    return sum(count for cls, mode, count, admin in first if cls in classes and mode == "ExactCount" and not admin)


def _node_bound(metadata: Mapping[str, Any]) -> bool:
    annotations = metadata.get("annotations")
    if isinstance(annotations, Mapping) and MIRROR_ANNOTATION in annotations:
        return True
    owners = metadata.get("ownerReferences")
    return any(
        isinstance(owner, Mapping) and owner.get("kind") == "DaemonSet" and owner.get("controller")
        for owner in (owners if isinstance(owners, list) else ())
    )


def _claim_refs(spec: Mapping[str, Any], status: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """The pod's claims: ("claim", name) for a named or generated claim, ("template", name) for one
    still to be generated; a template entry resolved to no claim (nothing needed) is left out."""
    generated: dict[str, Any] = {}
    for entry in status.get("resourceClaimStatuses") or ():
        if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
            generated[entry["name"]] = entry.get("resourceClaimName")
    refs: list[tuple[str, str]] = []
    for ref in spec.get("resourceClaims") or ():
        if not isinstance(ref, Mapping):
            continue
        if ref.get("resourceClaimName"):
            refs.append(("claim", str(ref["resourceClaimName"])))
        elif ref.get("resourceClaimTemplateName"):
            name = ref.get("name")
            if name in generated:
                if generated[name]:
                    refs.append(("claim", str(generated[name])))
            else:
                refs.append(("template", str(ref["resourceClaimTemplateName"])))
    return tuple(refs)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


class Collector:
    """Pods, ResourceClaims and ResourceClaimTemplates in any order; ``pods()`` resolves them."""

    def __init__(self, selection: Selection) -> None:
        self.selection = selection
        self.tally = Tally()
        self._records: list[_PodRecord] = []
        self._claims: dict[tuple[str, str], int] = {}
        self._templates: dict[tuple[str, str], int] = {}

    def add(self, obj: Mapping[str, Any], kind: str = "") -> None:
        """One object; ``kind`` when a list's items carry none."""
        kind = str(obj.get("kind") or kind)
        if kind == "Pod":
            self._add_pod(obj)
        elif kind in ("ResourceClaim", "ResourceClaimTemplate"):
            metadata, spec = _mapping(obj.get("metadata")), _mapping(obj.get("spec"))
            key = (str(metadata.get("namespace") or "default"), str(metadata.get("name") or ""))
            if kind == "ResourceClaim":
                self._claims[key] = claim_gpus(spec, _mapping(obj.get("status")), self.selection.gpu_classes)
            else:
                self._templates[key] = claim_gpus(_mapping(spec.get("spec")), None, self.selection.gpu_classes)

    def _add_pod(self, obj: Mapping[str, Any]) -> None:
        metadata = obj.get("metadata")
        metadata = metadata if isinstance(metadata, Mapping) else {}
        namespace, name = str(metadata.get("namespace") or "default"), str(metadata.get("name") or "")
        spec, status = obj.get("spec"), obj.get("status") or {}
        if not isinstance(spec, Mapping) or not isinstance(status, Mapping):
            self.tally.unreadable.append(f"{namespace}/{name}: no spec")
            return
        if status.get("phase") in FINISHED and not self.selection.include_finished:
            self.tally.finished += 1
            return
        if _node_bound(metadata):
            self.tally.node_bound += 1
            return
        names = self.selection.scheduler_names
        if names and str(spec.get("schedulerName") or DEFAULT_SCHEDULER) not in names:
            self.tally.other_scheduler += 1
            return
        try:
            requests = pod_resources(spec).requests
        except (QuantityError, AttributeError, TypeError) as exc:
            self.tally.unreadable.append(f"{namespace}/{name}: {exc}")
            return
        if spec.get("nodeName"):
            self.tally.bound += 1
        else:
            self.tally.pending += 1
        self._records.append(
            _PodRecord(
                namespace,
                name,
                requests.get("cpu", 0),
                requests.get("memory", 0),
                requests.get(GPU, 0),
                _claim_refs(spec, status),
            )
        )

    def pods(self) -> list[SimPod]:
        """The counted pods, GPUs from their claims added."""
        out: list[SimPod] = []
        tally = self.tally
        tally.container_gpu_pods = tally.claim_gpu_pods = tally.missing_claims = 0
        for record in self._records:
            from_claims = 0
            for what, name in record.claims:
                table = self._claims if what == "claim" else self._templates
                found = table.get((record.namespace, name))
                if found is None:
                    tally.missing_claims += 1
                else:
                    from_claims += found
            gpus = record.gpus + from_claims
            tally.container_gpu_pods += record.gpus > 0
            tally.claim_gpu_pods += from_claims > 0
            out.append(
                SimPod(
                    f"{record.namespace}/{record.name}",
                    b"",
                    record.cpu_milli,
                    record.memory,
                    gpus,
                    1000 if gpus else 0,
                    namespace=record.namespace,
                    created=float(len(out)),
                    file_ordered=True,
                )
            )
        return out


async def _pages(client: Any, path: str) -> AsyncIterator[list[dict[str, Any]]]:
    async for page, _ in client.list_pages(path):
        yield page


async def collect_cluster(client: Any, collector: Collector) -> None:
    """Every pod, ResourceClaim and ResourceClaimTemplate of the cluster, page by page, into
    ``collector``. Pods must be readable; claims and templates are skipped on 404 (no
    resource.k8s.io/v1) and on 403 (noted in ``tally.claims_unlisted``)."""
    from app.cluster.kube import ApiError

    async for page in _pages(client, "/api/v1/pods"):
        for obj in page:
            collector.add(obj, "Pod")
    for resource, kind in (("resourceclaims", "ResourceClaim"), ("resourceclaimtemplates", "ResourceClaimTemplate")):
        try:
            async for page in _pages(client, f"{DRA}/{resource}"):
                for obj in page:
                    collector.add(obj, kind)
        except ApiError as exc:
            if exc.status == 404:
                continue
            if exc.status == 403:
                collector.tally.claims_unlisted = collector.tally.claims_unlisted or f"{resource}: {exc}"
                continue
            raise


def _count(number: int, what: str) -> str:
    return f"{number:,} {what}"


def render(pods: list[SimPod], tally: Tally, source: str, gpu_classes: Iterable[str], today: datetime.date) -> str:
    """The YAML fragment: a header of comments, then the two plugins' entries with the derived args."""
    gpu_pods = sum(1 for pod in pods if pod.gpus)
    classes = ", ".join(sorted(gpu_classes)) or "none"
    left_out = [
        _count(n, what)
        for n, what in (
            (tally.finished, "finished"),
            (tally.node_bound, "DaemonSet or static"),
            (tally.other_scheduler, "of other schedulers"),
            (len(tally.unreadable), "unreadable"),
        )
        if n
    ]
    counted = f"# {_count(len(pods), 'pods')}"
    if tally.counted:  # pods read from a cluster or a file (a trace has neither states nor claims)
        counted += (
            f" ({tally.bound:,} bound, {tally.pending:,} pending), {gpu_pods:,} asking for GPUs "
            f"({tally.container_gpu_pods:,} in containers, {tally.claim_gpu_pods:,} through ResourceClaims "
            f"of {classes})"
        )
    else:
        counted += f", {gpu_pods:,} asking for GPUs"
    lines = [f"# kube-gpu-extender workload, {today.isoformat()}, {source}:", counted]
    if left_out:
        lines.append(f"# left out: {', '.join(left_out)}")
    lines += [
        "# The args of GpuFragmentation and GpuCpuBalance in the plugins of the extender's config.yaml;",
        "# keep the entries' weights and other args.",
        "- name: GpuFragmentation",
        "  args:",
        "    workload:",
    ]
    for task in workload(pods):
        lines.append("    - {" + ", ".join(f"{key}: {value}" for key, value in task.items()) + "}")
    lines += ["- name: GpuCpuBalance", "  args:", f"    cpuPerGpu: {cpu_per_gpu(pods)}"]
    return "\n".join(lines) + "\n"
