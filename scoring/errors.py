"""The base of every error the scoring package raises, so callers can catch by package."""

from __future__ import annotations

__all__ = ["ScoringError"]


class ScoringError(ValueError):
    """Bad input to scoring: an invalid quantity or invalid plugin args."""
