"""A reverse index kept beside a forward map: key -> the set of owners that name it."""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import TypeVar

__all__ = ["reindex"]

K = TypeVar("K", bound=Hashable)
O = TypeVar("O", bound=Hashable)  # noqa: E741 (the owner)


def reindex(index: dict[K, set[O]], owner: O, old: Iterable[K], new: Iterable[K]) -> None:
    """``owner`` named ``old`` and now names ``new``: move it between the keys' sets, dropping sets
    left empty (so the index holds only keys someone names)."""
    for key in old:
        owners = index.get(key)
        if owners is not None:
            owners.discard(owner)
            if not owners:
                del index[key]
    for key in new:
        index.setdefault(key, set()).add(owner)
