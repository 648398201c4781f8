"""The base of every error the k8s_semantics package raises, so callers can catch by package."""

from __future__ import annotations

__all__ = ["SemanticsError"]


class SemanticsError(ValueError):
    """A value Kubernetes itself would refuse (a quantity that does not parse, say)."""
