"""The pipeline a configuration asks for: resource fit (always), DRA claims, queues, gangs."""

from __future__ import annotations

import time
from collections.abc import Callable

from app.cluster.cache import ClusterCache
from app.config import ExtenderConfiguration
from app.pipeline.claims import DraClaims
from app.pipeline.device_preference import DevicePreference
from app.pipeline.dynamicresources import ClaimWriter, DynamicResources
from app.pipeline.fairness import Fairness, FlavorFairness
from app.pipeline.fit import ResourceFit
from app.pipeline.framework import Participant, Pipeline
from app.pipeline.gangs import Gangs
from app.pipeline.queues import Queues
from scoring.managed_fit import ManagedResourcesFit
from scoring.tie_break import TiePick

__all__ = ["build_pipeline"]


def build_pipeline(
    config: ExtenderConfiguration,
    cache: ClusterCache,
    claim_writer: ClaimWriter | None,
    wall_clock: Callable[[], float] = time.time,
    tie_pick: TiePick | None = None,
) -> tuple[Pipeline, ResourceFit]:
    """The participants in order (fit, claims, queues, gangs), and the resource fit (the pipeline's
    scorer); ``tie_pick``: ``tieBreak.random``'s pick among tied nodes (None: a random position)."""
    cache.dra.proposal_ttl = config.dra.proposalTTLSeconds
    fairness = Fairness.attach(cache, config.queue_config(), wall_clock)
    profile = config.build_profile(FlavorFairness(fairness) if fairness is not None else None)
    fit = ResourceFit(
        cache,
        profile,
        ManagedResourcesFit(config.managed_resource_names),
        config.priorityScale,
        config.tie_break(),
        tie_pick,
    )
    participants: list[Participant] = [fit]
    dra = None
    # Pods with ResourceClaims are ours to allocate only when DRA is on and claims can be written.
    if config.dra.enabled and claim_writer is not None:
        prefer = DevicePreference.of(profile.placer, cache, cache.dra)  # the devices the scores assumed
        dra = DynamicResources(cache.dra, wall_clock=wall_clock, allocatable=cache.allocatable, prefer=prefer)
        participants.append(DraClaims(dra, claim_writer, config.dra.bindingTimeoutSeconds))
    if fairness is not None:
        participants.append(Queues(fairness))
    # Last: a gang member's filter keeps, of what the others passed, the node its group's plan gave it.
    if config.gangs.enabled:
        participants.append(Gangs(config.gangs, cache, dra, fairness, wall_clock))
    return Pipeline(participants), fit
