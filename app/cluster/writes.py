"""What an API write (a Binding, a claim's allocation) reports when it fails. ``definite`` is False
when the API server may have applied it (timeout, lost reply): the caller then keeps its assumption."""

from __future__ import annotations

__all__ = ["BindError", "ClaimWriteError"]


class BindError(Exception):
    """A failed Binding. ``definite`` is False when the API may have applied it (timeout, lost reply)."""

    def __init__(self, message: str, *, kind: str = "api", definite: bool = True, bound_to: str | None = None):
        super().__init__(message)
        self.kind = kind
        self.definite = definite
        self.bound_to = bound_to


class ClaimWriteError(Exception):
    """A failed claim write; ``definite`` is False when the API may have applied it."""

    def __init__(self, message: str, *, definite: bool = True) -> None:
        super().__init__(message)
        self.definite = definite
