"""A claim's ``constraints``: ``matchAttribute`` and ``distinctAttribute`` across the devices it gets.

A constraint applies to a device picked for a request when its ``requests`` list is empty, names
the request, or names ``request/subrequest``. The attribute is looked up fully qualified, and by
its bare name when the domain is the device's driver; a device without it never satisfies the
constraint. Both are monotonic (once a device is refused, adding more never helps), which the
search relies on; ``remove`` undoes the latest ``add`` that returned True.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from allocator.pools import Candidate
from allocator.types import Attribute

__all__ = ["Constraint", "DistinctAttribute", "MatchAttribute"]


class _Named(Protocol):
    @property
    def request(self) -> str: ...

    @property
    def result_name(self) -> str: ...


@dataclass(slots=True, eq=False)
class _AttributeConstraint:
    attribute: str
    requests: tuple[str, ...]
    values: list[Attribute] = field(default_factory=list)

    def applies(self, alt: _Named) -> bool:
        return not self.requests or alt.request in self.requests or alt.result_name in self.requests

    def add(self, candidate: Candidate) -> bool:
        value = candidate.device.attribute(self.attribute, candidate.id.driver)
        if value is None or not self.accepts(value):
            return False
        self.values.append(value)
        return True

    def accepts(self, value: Attribute) -> bool:
        raise NotImplementedError

    def remove(self) -> None:
        self.values.pop()


class MatchAttribute(_AttributeConstraint):
    """The first device fixes the value (type and value), every later one must equal it."""

    __slots__ = ()

    def accepts(self, value: Attribute) -> bool:
        return not self.values or value == self.values[0]


class DistinctAttribute(_AttributeConstraint):
    """No two devices share the value (values of different types never collide).

    Pairwise, as the API documents it. Upstream 1.36 remembers one value per *request name*, so
    with ``count > 1`` only the latest device of a request is compared against (v1, v2, v1 passes
    there); this implementation refuses that third device.
    """

    __slots__ = ()

    def accepts(self, value: Attribute) -> bool:
        return value not in self.values


Constraint = MatchAttribute | DistinctAttribute
