"""The base of every error the fairshare package raises, so callers can catch by package."""

from __future__ import annotations

__all__ = ["FairshareError"]


class FairshareError(ValueError):
    """Bad queue, flavor or quota input; the message names the field path."""
