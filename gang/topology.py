"""Topology domains: nodes grouped by the value of one label, and the levels a request may use.

A cluster's levels are node label keys from the widest to the narrowest (Kueue's Topology order),
e.g. ``[example.com/block, example.com/rack, kubernetes.io/hostname]``. A required request uses its
own level only; a preferred one its own level, then each wider level, then the whole cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gang.spec import TopologyRequest

__all__ = ["ANYWHERE", "Domain", "domains", "search_levels"]

ANYWHERE = ""  # the level of the whole cluster: one domain holding every node


@dataclass(frozen=True, slots=True)
class Domain:
    """The nodes whose label ``key`` has ``value`` (key ANYWHERE: every node)."""

    key: str
    value: str
    nodes: tuple[str, ...]

    def describe(self) -> str:
        return "the cluster" if self.key == ANYWHERE else f"{self.key}={self.value}"


def domains(key: str, nodes: Iterable[str], labels: Mapping[str, Mapping[str, str]]) -> list[Domain]:
    """The domains of level ``key`` over ``nodes``, by value; nodes without the label belong to none."""
    names = sorted(nodes)
    if key == ANYWHERE:
        return [Domain(ANYWHERE, "", tuple(names))]
    grouped: dict[str, list[str]] = {}
    for name in names:
        value = labels.get(name, {}).get(key)
        if value is not None:
            grouped.setdefault(value, []).append(name)
    return [Domain(key, value, tuple(members)) for value, members in sorted(grouped.items())]


def search_levels(request: TopologyRequest | None, levels: Sequence[str]) -> list[str]:
    """The levels a group is placed at, in the order they are tried."""
    if request is None:
        return [ANYWHERE]
    if request.required:
        return [request.key]
    wider = list(reversed(levels[: levels.index(request.key)])) if request.key in levels else []
    return [request.key, *wider, ANYWHERE]
