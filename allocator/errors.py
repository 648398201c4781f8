"""The base of every error the allocator raises, so callers can catch by package."""

from __future__ import annotations

__all__ = ["AllocatorError"]


class AllocatorError(Exception):
    """An object that cannot be used, a selector that fails, or a pod that cannot be allocated."""
