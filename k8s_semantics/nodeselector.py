"""core/v1 NodeSelector matching, as component-helpers' ``nodeaffinity`` does it.

The terms of a selector are ORed, the requirements inside a term ANDed; a term without requirements
matches no node. A requirement that component-helpers would refuse to turn into a selector (an
unknown operator, ``In``/``NotIn`` without values, ``Exists``/``DoesNotExist`` with values, ``Gt``/``Lt``
without exactly one integer) matches nothing. ``matchFields`` supports ``metadata.name`` with ``In``
and ``NotIn`` only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "NAME_FIELD",
    "NodeSelector",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "node_selector_matches",
    "requirement_matches",
    "term_matches",
]

NAME_FIELD = "metadata.name"
# strconv.ParseInt syntax: Python's int() would also read "1_0" or " 10" (a label can hold "1_0").
_INT_TEXT = re.compile(r"[+-]?[0-9]+")


@dataclass(frozen=True, slots=True)
class NodeSelectorRequirement:
    key: str
    operator: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    match_expressions: tuple[NodeSelectorRequirement, ...] = ()
    match_fields: tuple[NodeSelectorRequirement, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeSelector:
    """core/v1 NodeSelector: the terms are ORed, the requirements inside a term ANDed."""

    terms: tuple[NodeSelectorTerm, ...]


def requirement_matches(req: NodeSelectorRequirement, labels: Mapping[str, str]) -> bool:
    """One ``matchExpressions`` requirement against a node's labels."""
    value = labels.get(req.key)
    op = req.operator
    if op == "In":
        return value is not None and value in req.values
    if op == "NotIn":
        return bool(req.values) and (value is None or value not in req.values)
    if op == "Exists":
        return value is not None and not req.values
    if op == "DoesNotExist":
        return value is None and not req.values
    if op in ("Gt", "Lt"):
        if value is None or len(req.values) != 1:
            return False
        if _INT_TEXT.fullmatch(value) is None or _INT_TEXT.fullmatch(req.values[0]) is None:
            return False
        have, want = int(value), int(req.values[0])
        return have > want if op == "Gt" else have < want
    return False


def _field_matches(req: NodeSelectorRequirement, name: str) -> bool:
    if req.key != NAME_FIELD:
        return False
    if req.operator == "In":
        return name in req.values
    if req.operator == "NotIn":
        return name not in req.values
    return False


def term_matches(term: NodeSelectorTerm, name: str, labels: Mapping[str, str]) -> bool:
    """All requirements of the term hold; a term without requirements matches no node."""
    if not term.match_expressions and not term.match_fields:
        return False
    if not all(requirement_matches(req, labels) for req in term.match_expressions):
        return False
    return all(_field_matches(req, name) for req in term.match_fields)


def node_selector_matches(selector: NodeSelector | None, name: str, labels: Mapping[str, str]) -> bool:
    """Any term matches; ``None`` (no selector) matches every node."""
    if selector is None:
        return True
    return any(term_matches(term, name, labels) for term in selector.terms)
