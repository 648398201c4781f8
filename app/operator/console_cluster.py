"""The console's Cluster view: one row per node, each GPU or DRA device a cell, totals on top.

Pagination keeps a page's cost proportional to its size: one cheap pass over the node names decides
which nodes match the filters and adds up the totals (numbers only, no HTML), and only the nodes of
the requested page get cells and rows.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from allocator import DeviceID

if TYPE_CHECKING:
    from allocator.pools import Pool
    from app.service import ExtenderService

__all__ = [
    "GPU_PRODUCT_LABEL",
    "MAX_CELLS",
    "Cell",
    "ClusterPage",
    "ClusterQuery",
    "NodeRow",
    "Totals",
    "cluster_page",
]

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"  # set by NVIDIA GPU feature discovery
DRA_PRODUCT_ATTRIBUTES = ("productName", "model")  # device attributes naming a DRA device's model
Int64Array = npt.NDArray[np.int64]
MAX_CELLS = 64  # cells drawn per resource of one node; the rest is a count
FREE, ALLOCATED, ASSUMED, SHARED, UNAVAILABLE = "free", "allocated", "assumed", "shared", "unavailable"


@dataclass(frozen=True, slots=True)
class Cell:
    """One GPU (device plugin) or DRA device.

    ``state``: free, allocated (bound pods, claims), assumed (bound by our /bind, or a DRA allocation
    being written, not yet confirmed by the watch), shared (``fraction`` of it in use; nothing
    produces it until GPU sharing exists), or unavailable (a device the allocator never hands out).
    ``title`` is what the browser shows on hover: the device and who holds it.
    """

    state: str
    title: str
    fraction: float = 1.0


@dataclass(slots=True)
class CellGroup:
    """The cells of one managed resource or one DRA pool on a node."""

    label: str
    cells: list[Cell]
    hidden: int = 0  # cells beyond MAX_CELLS, counted but not drawn


@dataclass(slots=True)
class NodeRow:
    name: str
    model: str
    labels: Mapping[str, str]
    groups: list[CellGroup]
    gpus: int
    free: int
    pods: int
    assumed_pods: int


@dataclass(slots=True)
class Totals:
    """GPU units (device plugin GPUs and DRA devices) over the matching nodes.

    ``fragmentation``: the share of free GPUs that sit on partly allocated nodes, where a pod asking
    for all of a node's GPUs cannot use them (0 when every free GPU is on an entirely free node).
    DRA devices of pools shared by several nodes count once in the totals and not in fragmentation.
    """

    nodes: int = 0
    gpu_nodes: int = 0
    gpus: int = 0
    free: int = 0
    allocated: int = 0
    assumed: int = 0
    unavailable: int = 0
    free_on_partly_used: int = 0
    entirely_free_nodes: int = 0

    @property
    def fragmentation(self) -> float:
        return self.free_on_partly_used / self.free if self.free else 0.0


@dataclass(frozen=True, slots=True)
class ClusterQuery:
    name: str = ""  # substring of the node name
    label: str = ""  # "key" (present) or "key=value"
    model: str = ""  # exact GPU model
    page: int = 1
    size: int = 50


@dataclass(slots=True)
class ClusterPage:
    query: ClusterQuery
    rows: list[NodeRow]
    totals: Totals
    matching: int
    pages: int
    page: int
    models: list[str]
    resources: tuple[str, ...]
    notice: str = ""
    legend: tuple[str, ...] = field(default=(FREE, ALLOCATED, ASSUMED, SHARED, UNAVAILABLE))


# ---------------------------------------------------------------------------------------------- filter
def _label_test(label: str) -> tuple[str, str | None]:
    key, sep, value = label.partition("=")
    return key.strip(), (value.strip() if sep else None)


def _dra_pools(service: ExtenderService, name: str) -> tuple[Pool, ...]:
    dra = service.cache.dra
    ref = dra.node_ref(name)
    if ref is None or not len(dra.slices):
        return ()
    return dra.slices.pools_for(ref).gathered


def node_models(service: ExtenderService, name: str, labels: Mapping[str, str]) -> tuple[str, ...]:
    """The node's GPU models: GPU feature discovery's label, else its DRA devices' product names."""
    model = labels.get(GPU_PRODUCT_LABEL)
    if model:
        return (model,)
    found: dict[str, None] = {}  # in device order, each once
    for pool in _dra_pools(service, name):
        for resource_slice in pool.slices:
            for device in resource_slice.devices:
                for attribute in DRA_PRODUCT_ATTRIBUTES:
                    value = device.attributes.get(attribute)
                    if value is not None and isinstance(value.value, str):
                        found[value.value] = None
                        break
    return tuple(found)


class _NameOrder:
    """Node names in order, sorted again only when the set of nodes changes."""

    def __init__(self) -> None:
        self.version = -1
        self.names: list[str] = []
        self.models: set[str | None] | None = None

    def of(self, service: ExtenderService) -> list[str]:
        cache = service.cache
        if cache.nodes_version != self.version:
            self.names, self.version = sorted(cache.nodes), cache.nodes_version
            self.models = None
        return self.names

    def labelled_models(self, service: ExtenderService) -> set[str | None]:
        """The GPU product labels of all nodes (they change only with the nodes)."""
        names = self.of(service)
        if self.models is None:
            nodes = service.cache.nodes
            self.models = {nodes[n].labels.get(GPU_PRODUCT_LABEL) for n in names}
        return self.models


# One per cache (tests run several services in a process), dropped with it.
_ORDERS: weakref.WeakKeyDictionary[Any, _NameOrder] = weakref.WeakKeyDictionary()


def _order(service: ExtenderService) -> _NameOrder:
    order = _ORDERS.get(service.cache)
    if order is None:
        order = _ORDERS[service.cache] = _NameOrder()
    return order


# ---------------------------------------------------------------------------------------------- numbers
def _holder_state(holder: str) -> str:
    if not holder:
        return FREE
    return ASSUMED if holder.startswith("in flight") else ALLOCATED


def _device_plugin_columns(service: ExtenderService, names: list[str]) -> tuple[Int64Array, Int64Array, Int64Array]:
    """Per node of ``names``: managed GPUs, in use, and in use by our assumptions, read as columns
    of the cache's node table (no per-node objects) and the assume ledger (small)."""
    cache = service.cache
    table = cache.table
    index = table.index
    rows = np.fromiter((index.get(n, -1) for n in names), dtype=np.intp, count=len(names))
    known = rows >= 0
    rows[~known] = 0
    gpus = np.zeros(len(names), dtype=np.int64)
    used = np.zeros(len(names), dtype=np.int64)
    for resource in service.fit.resources:
        capacity = table.gather(table.allocatable, resource, rows, known)
        gpus += capacity
        used += np.minimum(capacity, table.gather(table.requested, resource, rows, known))
    assumed = np.zeros(len(names), dtype=np.int64)
    if cache.ledger:
        position = {name: i for i, name in enumerate(names)}
        for assumption in cache.ledger.values():
            at = position.get(assumption.node)
            if at is not None:
                assumed[at] += sum(assumption.pod.resources.requests.get(r, 0) for r in service.fit.resources)
        np.minimum(assumed, used, out=assumed)
    return gpus, used, assumed


def _totals(service: ExtenderService, names: list[str]) -> Totals:
    """The totals over ``names``: device plugin GPUs as columns, then DRA devices node by node (only
    when the cluster publishes ResourceSlices). Fragmentation counts node-local capacity only."""
    gpus, used, assumed = _device_plugin_columns(service, names)
    totals = Totals(nodes=len(names))
    totals.gpus = int(gpus.sum())
    totals.assumed = int(assumed.sum())
    totals.allocated = int(used.sum()) - totals.assumed
    totals.free = totals.gpus - int(used.sum())
    local_gpus, local_free = gpus.copy(), gpus - used
    dra = service.cache.dra
    if len(dra.slices):
        seen_shared: set[DeviceID] = set()  # devices of multi-node pools count once
        for at, name in enumerate(names):
            for pool in _dra_pools(service, name):
                for resource_slice in pool.slices:
                    for device in resource_slice.devices:
                        device_id = DeviceID(pool.driver, pool.name, device.name)
                        local = resource_slice.node_local or device.node_name is not None
                        if not local:
                            if device_id in seen_shared:
                                continue
                            seen_shared.add(device_id)
                        totals.gpus += 1
                        if device.unsupported or not pool.usable:
                            totals.unavailable += 1
                            continue
                        state = _holder_state(dra.holder(device_id))
                        if state == FREE:
                            totals.free += 1
                        elif state == ASSUMED:
                            totals.assumed += 1
                        else:
                            totals.allocated += 1
                        if local:
                            local_gpus[at] += 1
                            local_free[at] += state == FREE
    has_gpus = local_gpus > 0
    totals.gpu_nodes = int(np.count_nonzero(has_gpus))
    totals.entirely_free_nodes = int(np.count_nonzero(has_gpus & (local_free == local_gpus)))
    partly = has_gpus & (local_free > 0) & (local_free < local_gpus)
    totals.free_on_partly_used = int(local_free[partly].sum())
    return totals


# ---------------------------------------------------------------------------------------------- cells
def _device_plugin_groups(service: ExtenderService, name: str) -> list[CellGroup]:
    cache = service.cache
    info = cache.node_info(name)
    if info is None:
        return []
    pods = cache.counted_on(name)
    groups = []
    for resource in service.fit.resources:
        capacity = info.allocatable.get(resource, 0)
        if capacity <= 0:
            continue
        cells: list[Cell] = []
        index = 0
        # Holders in a stable order: confirmed pods first, then our assumptions, each by pod name.
        holders = sorted(
            ((is_assumed, pod.key, pod.resources.requests.get(resource, 0)) for _uid, (_n, pod, is_assumed) in pods),
            key=lambda h: (h[0], h[1]),
        )
        for is_assumed, key, amount in holders:
            for _ in range(amount):
                state = ASSUMED if is_assumed else ALLOCATED
                what = "assumed for" if is_assumed else "allocated to"
                over = " (over allocatable)" if index >= capacity else ""
                cells.append(Cell(state, f"{resource} #{index}: {what} pod {key}{over}"))
                index += 1
        while index < capacity:
            cells.append(Cell(FREE, f"{resource} #{index}: free"))
            index += 1
        groups.append(CellGroup(resource, cells[:MAX_CELLS], max(0, len(cells) - MAX_CELLS)))
    return groups


def _device_title(pool: Pool, device: Any, holder: str) -> str:
    details = [f"{k}={a.value}" for k, a in sorted(device.attributes.items()) if k in DRA_PRODUCT_ATTRIBUTES]
    details += [f"{k}={c.text}" for k, c in sorted(device.capacity.items())]
    where = f"{pool.driver}/{pool.name}/{device.name}" + (f" ({', '.join(details)})" if details else "")
    if device.unsupported:
        return f"{where}: never allocated ({device.unsupported})"
    if not pool.usable:
        return f"{where}: pool {pool.problem}"
    return f"{where}: {holder}" if holder else f"{where}: free"


def _dra_groups(service: ExtenderService, name: str) -> list[CellGroup]:
    dra = service.cache.dra
    groups = []
    for pool in _dra_pools(service, name):
        cells = []
        for resource_slice in pool.slices:
            for device in resource_slice.devices:
                holder = dra.holder(DeviceID(pool.driver, pool.name, device.name))
                state = UNAVAILABLE if device.unsupported or not pool.usable else _holder_state(holder)
                cells.append(Cell(state, _device_title(pool, device, holder)))
        shared = not all(s.node_local for s in pool.slices)
        label = f"DRA pool {pool.driver}/{pool.name}" + (" (published for several nodes)" if shared else "")
        groups.append(CellGroup(label, cells[:MAX_CELLS], max(0, len(cells) - MAX_CELLS)))
    return groups


def node_row(service: ExtenderService, name: str) -> NodeRow | None:
    node = service.cache.nodes.get(name)
    if node is None:
        return None
    groups = _device_plugin_groups(service, name) + _dra_groups(service, name)
    cells = [cell for group in groups for cell in group.cells]
    hidden = sum(group.hidden for group in groups)
    usage = service.cache.usage(name)
    labels: Mapping[str, str] = node.labels
    return NodeRow(
        name=name,
        model=", ".join(node_models(service, name, labels)),
        labels=labels,
        groups=groups,
        gpus=len(cells) + hidden,
        free=sum(cell.state == FREE for cell in cells),
        pods=usage.pod_count,
        assumed_pods=usage.assumed_count,
    )


# ---------------------------------------------------------------------------------------------- page
def _matches(service: ExtenderService, names: Iterable[str], query: ClusterQuery) -> list[str]:
    nodes = service.cache.nodes
    out = list(names)
    if query.name:
        needle = query.name.lower()
        out = [n for n in out if needle in n.lower()]
    if query.label:
        key, value = _label_test(query.label)
        if value is None:
            out = [n for n in out if key in nodes[n].labels]
        else:
            out = [n for n in out if nodes[n].labels.get(key) == value]
    if query.model:
        out = [n for n in out if query.model in node_models(service, n, nodes[n].labels)]
    return out


def _models(service: ExtenderService, names: list[str]) -> list[str]:
    """Every GPU model of the cluster, for the filter's choices."""
    nodes = service.cache.nodes
    found = set(_order(service).labelled_models(service))
    if len(service.cache.dra.slices):  # DRA product names only when there are slices at all
        for n in names:
            found.update(node_models(service, n, nodes[n].labels))
    return sorted(m for m in found if m)


def cluster_page(service: ExtenderService, query: ClusterQuery) -> ClusterPage:
    """The matching nodes' totals and the rows of one page (a page past the end shows the last)."""
    names = _order(service).of(service)
    matching = _matches(service, names, query)
    totals = _totals(service, matching)
    pages = max(1, math.ceil(len(matching) / query.size))
    page, notice = query.page, ""
    if page > pages:
        notice = f"page {page} is past the last page ({pages}); showing page {pages}"
        page = pages
    start = (page - 1) * query.size
    rows = [row for name in matching[start : start + query.size] if (row := node_row(service, name)) is not None]
    return ClusterPage(
        query=query,
        rows=rows,
        totals=totals,
        matching=len(matching),
        pages=pages,
        page=page,
        models=_models(service, names),
        resources=tuple(service.fit.resources),
        notice=notice,
    )
