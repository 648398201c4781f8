"""The scheduling framework the verbs run: extension points over an ordered list of participants.

kube-scheduler's shape, cut to what an extender sees. Each participant (resource fit, DRA claims,
queues) implements the extension points it needs; the pipeline calls, per point, only the
participants that implement it, in their configured order, and only for pods they apply to. A
participant that is switched off is not in the list, so no verb asks "is DRA on?".

Extension points, in the order a pod meets them:
- ``prepare``: the request's pod was parsed (a participant may keep what it needs of the raw object).
- ``filter``: judge the candidates still passing in a ``FilterCycle`` (the first failure wins).
- ``select_victims`` / ``check_victims``: preempt; choose who is evicted on a node, then check that
  evicting them frees enough.
- ``admit``: bind's re-check of a filter verdict that may have changed since (nothing held yet).
- ``reserve`` / ``unreserve``: hold what the pod takes on the node before the first await; give it
  back if the bind fails for certain.
- ``pre_bind``: API writes before the Binding (claim allocation).
- ``post_bind``: the Binding succeeded.
- ``explain``: per-node detail for /debug/explain, under the participant's ``name``.
- ``metrics``: gauges for /metrics.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from app.http.wire import Candidates
from scoring.framework import NodeInfo, PodInfo
from scoring.table import Batch
from scoring.verdicts import BatchVerdicts

__all__ = [
    "BindCycle",
    "FilterCycle",
    "FilterError",
    "Participant",
    "Pipeline",
    "Refusal",
    "VictimChoice",
]


class FilterError(Exception):
    """A participant cannot judge the pod at all: the filter answers with this message as its Error."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a bind stops. ``kind`` labels the bind-error metric; when ``definite`` is False a write may
    have been applied, so nothing reserved is given back (the assume TTL settles it)."""

    kind: str
    message: str
    definite: bool = True


@dataclass(slots=True)
class FilterCycle:
    """One filter request: the candidates, their node-table rows (None: judged one by one) and the
    verdicts so far, by candidate position."""

    pod: PodInfo
    candidates: Candidates
    batch: Batch | None
    verdicts: BatchVerdicts

    @property
    def names(self) -> list[str]:
        return self.candidates.names

    def passing(self) -> list[int]:
        """Positions of the candidates every participant so far let through."""
        positions: list[int] = (self.verdicts.codes == 0).nonzero()[0].tolist()
        return positions

    def merge(self, verdicts: BatchVerdicts) -> None:
        """A participant's verdicts over every candidate: its failures count where all passed so far
        (the first failure wins). Taken as they are while nothing has failed yet."""
        if not self.verdicts.reasons and not self.verdicts.codes.any():
            self.verdicts = verdicts
        else:
            self.verdicts.merge_later(verdicts)


@dataclass(slots=True)
class BindCycle:
    """One bind: the pod, the node, the participants that reserved so far (unreserve gives back in
    reverse order) and what each keeps between its extension points (by participant name)."""

    pod: PodInfo
    node: str
    reserved: list[Participant] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return self.pod.key


@dataclass(frozen=True, slots=True)
class VictimChoice:
    """A participant's victims on one node: ``victims`` replace the scheduler's, or ``drop`` says why
    the node cannot serve the pod by preemption. ``chosen_by`` names them in a drop reason."""

    victims: tuple[str, ...] = ()
    drop: str = ""
    chosen_by: str = ""


class Participant:
    """Base of the pipeline's participants: every extension point does nothing by default."""

    name: ClassVar[str] = ""

    def applies(self, pod: PodInfo) -> bool:
        """Whether this participant has anything to say about ``pod`` (e.g. it has claims)."""
        return True

    def prepare(self, pod: PodInfo, obj: Mapping[str, Any] | bytes) -> None:
        return None

    def filter(self, cycle: FilterCycle) -> None:
        return None

    def select_victims(self, pod: PodInfo, node: str, victims: Sequence[str]) -> VictimChoice | None:
        """None keeps the victims as they are."""
        return None

    def check_victims(self, pod: PodInfo, node: NodeInfo, victims: Sequence[str]) -> str:
        """Why evicting ``victims`` would not let ``pod`` onto ``node`` ("" when it would)."""
        return ""

    def admit(self, pod: PodInfo, node: str) -> Refusal | None:
        return None

    def reserve(self, cycle: BindCycle) -> Refusal | None:
        return None

    async def unreserve(self, cycle: BindCycle) -> None:
        return None

    async def pre_bind(self, cycle: BindCycle) -> Refusal | None:
        return None

    def post_bind(self, cycle: BindCycle) -> None:
        return None

    def explain(self, pod: PodInfo, names: Sequence[str]) -> Mapping[str, Any]:
        """Per node name, this participant's detail (nodes it says nothing about are left out)."""
        return {}

    def metrics(self) -> dict[str, dict[str, float]]:
        return {}


_POINTS = (
    "prepare",
    "filter",
    "select_victims",
    "check_victims",
    "admit",
    "reserve",
    "unreserve",
    "pre_bind",
    "post_bind",
    "explain",
    "metrics",
)


_P = TypeVar("_P", bound=Participant)


class Pipeline:
    """The participants in order, and per extension point those that implement it."""

    def __init__(self, participants: Sequence[Participant]) -> None:
        names = [p.name for p in participants]
        if len(set(names)) != len(names) or not all(names):
            raise ValueError(f"participants need distinct names: {names}")
        self.participants = tuple(participants)
        self._at: dict[str, tuple[Participant, ...]] = {
            point: tuple(p for p in participants if getattr(type(p), point) is not getattr(Participant, point))
            for point in _POINTS
        }

    def at(self, point: str, pod: PodInfo | None = None) -> Iterator[Participant]:
        """The participants implementing ``point`` (those that apply to ``pod``, when given)."""
        for participant in self._at[point]:
            if pod is None or participant.applies(pod):
                yield participant

    def get(self, kind: type[_P]) -> _P | None:
        """The participant of this class, or None when it is switched off."""
        return next((p for p in self.participants if isinstance(p, kind)), None)
