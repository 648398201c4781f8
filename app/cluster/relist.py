"""A relist applied to one kind of cached object: what vanished is deleted, then the rest upserted,
so every object is accounted once whatever the cache held before."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

__all__ = ["apply_relist"]

K = TypeVar("K")
V = TypeVar("V")


def apply_relist(
    held: Iterable[K], fresh: Mapping[K, V], delete: Callable[[K], None], upsert: Callable[[V], None]
) -> None:
    for key in [key for key in held if key not in fresh]:
        delete(key)
    for obj in fresh.values():
        upsert(obj)
