"""Each node's flavor-label signature (the values of every ResourceFlavor's label keys) as a small
integer, kept at cache-update time: a request judges each distinct signature once and maps the
verdicts onto its nodes with numpy, instead of reading every node's labels.

A request whose candidates are all rows of the node table reads the ids by row (``by_row``): one
gather, kept until a node's signature or the table's rows change. Other requests look names up.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from scoring.row_lookup import RowLookup
from scoring.table import Int64Array, NodeTable

__all__ = ["NodeSignatures"]


class NodeSignatures:
    def __init__(self, keys: tuple[str, ...]) -> None:
        self.keys = keys
        self.ids: dict[tuple[str | None, ...], int] = {}
        self.labels: list[dict[str, str]] = []  # id -> the labels that decide flavors
        self.by_node: dict[str, int] = {}
        self.version = 0  # changes with any node's signature
        self._rows = RowLookup()

    def set_node(self, name: str, labels: Mapping[str, str] | None) -> None:
        if labels is None:
            if self.by_node.pop(name, None) is not None:
                self.version += 1
            return
        signature = tuple(labels.get(k) for k in self.keys)
        sid = self.ids.get(signature)
        if sid is None:
            sid = self.ids[signature] = len(self.labels)
            self.labels.append({k: v for k, v in zip(self.keys, signature, strict=True) if v is not None})
        if self.by_node.get(name) != sid:
            self.by_node[name] = sid
            self.version += 1

    def lookup(self, names: Sequence[str]) -> npt.NDArray[np.int64]:
        """Signature id per name; -1 for nodes the cache does not know."""
        get = self.by_node.get
        return np.fromiter((get(n, -1) for n in names), dtype=np.int64, count=len(names))

    def by_row(self, table: NodeTable) -> Int64Array:
        """Signature id per row of ``table`` (-1 for a free row or a node not set here); computed
        again only after a node's signature or the table's name -> row mapping changed."""
        return self._rows.by_row(table, self.by_node, self.version)
