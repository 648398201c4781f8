"""The base of every error the fairshare package raises, so callers can catch by package."""

from __future__ import annotations

__all__ = ["FairshareError", "QueueConfigError"]


class FairshareError(ValueError):
    """Bad queue, flavor or quota input; the message names the field path."""


class QueueConfigError(FairshareError):
    """Bad ``queues:`` configuration (flavors, queues, cohorts, fair sharing); names the field path."""
