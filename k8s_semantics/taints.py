"""Taints and tolerations: core/v1 ``Toleration.ToleratesTaint`` (also resource.k8s.io's device
taints), plus the numeric ``Gt``/``Lt`` operators of Kubernetes 1.35 (KEP-5471) that Kueue's
flavors use: the taint's value and the toleration's, both integers, compared."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

__all__ = ["Taint", "TaintLike", "Toleration", "TolerationLike", "tolerates"]

_INT_TEXT = re.compile(r"[+-]?[0-9]+")


class TaintLike(Protocol):
    @property
    def key(self) -> str: ...
    @property
    def value(self) -> str: ...
    @property
    def effect(self) -> str: ...


class TolerationLike(Protocol):
    @property
    def key(self) -> str: ...
    @property
    def operator(self) -> str: ...
    @property
    def value(self) -> str: ...
    @property
    def effect(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""


def tolerates(toleration: TolerationLike, taint: TaintLike) -> bool:
    """An empty effect matches every effect, an empty key every key (with ``Exists``); ``Exists``
    ignores the value, ``Equal`` (or no operator) compares it; an unknown operator tolerates nothing."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    op = toleration.operator
    if op == "Exists":
        return True
    if not toleration.key:
        return False  # an empty key is valid with Exists only
    if op in ("", "Equal"):
        return toleration.value == taint.value
    if op in ("Gt", "Lt"):
        if _INT_TEXT.fullmatch(toleration.value) is None or _INT_TEXT.fullmatch(taint.value) is None:
            return False
        have, limit = int(taint.value), int(toleration.value)
        return have > limit if op == "Gt" else have < limit
    return False
