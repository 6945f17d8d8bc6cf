"""Routing records: candidates, budgets, contexts, scored candidates, slot draws and selections,
plus the checks every record shares. Re-exported by :mod:`memabra._records`."""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from types import MappingProxyType
from typing import Any, TypeAlias

from memabra._errors import InvalidRecordError
from memabra._records_repr import selection_repr

JSONValue: TypeAlias = Any
"""Anything :func:`json.dumps` accepts; kept loose because metadata is user-supplied."""

MAX_ID_LENGTH = 200
"""Longest user, thread, candidate id or idempotency key: the episode log's id columns are
``VARCHAR(200)``, so a longer one is refused here, before the turn runs, rather than at logging."""

STOP_ID = "__stop__"
"""The pseudo-candidate a slot draws when the router decides to inject nothing more of a kind."""

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def new_id() -> str:
    """A fresh identifier (UUID4 hex) generated client-side, so bulk inserts need no RETURNING."""
    return uuid.uuid4().hex


def utcnow() -> datetime:
    return datetime.now(UTC)


def _frozen_mapping(value: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if value is None:
        return _EMPTY
    if isinstance(value, MappingProxyType):
        return value
    return MappingProxyType(dict(value))


_PLAIN_NUMBERS = frozenset({float, int})


def _require_finite(name: str, value: float) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise InvalidRecordError(f"{name} must be a finite number, got {value!r}")


def _require_id_length(name: str, value: str | None) -> None:
    if value is not None and len(value) > MAX_ID_LENGTH:
        raise InvalidRecordError(
            f"{name} holds at most {MAX_ID_LENGTH} characters, got {len(value)} ({value[:40]!r}...)"
        )


def _require_aware(name: str, value: datetime | None) -> None:
    if value is not None and value.tzinfo is None:
        raise InvalidRecordError(f"{name} must be timezone-aware (UTC), got a naive datetime")


def _check_json_finite(name: str, value: Any) -> None:
    try:
        _walk_json_finite(name, value)
    except RecursionError:  # nested past the interpreter's depth: no JSON encoder could write it
        raise InvalidRecordError(f"{name} is nested too deeply to be stored as JSON") from None


def _walk_json_finite(name: str, value: Any) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidRecordError(f"{name} holds a non-finite number ({value!r})")
    if isinstance(value, Mapping):
        for k, v in value.items():
            _walk_json_finite(f"{name}.{k}", v)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _walk_json_finite(f"{name}[{i}]", v)


def ensure_sequence(name: str, value: Sequence[Any]) -> tuple[Any, ...]:
    if isinstance(value, (str, bytes)):
        raise InvalidRecordError(f"{name} must be a sequence, not a string")
    return tuple(value)


class CandidateKind(StrEnum):
    MEMORY = "memory"
    SKILL = "skill"
    TOOL = "tool"


class FeedbackKind(StrEnum):
    EXPLICIT = "explicit"
    IMPLICIT = "implicit"
    PROGRAMMATIC = "programmatic"


class StepKind(StrEnum):
    TOOL = "tool"
    MODEL = "model"


@dataclass(frozen=True, slots=True)
class CandidateStats:
    """How often a candidate was chosen and how often it helped (a turn it was chosen for used it:
    the log's ``times_used``), counted from the episode log."""

    times_chosen: int = 0
    times_helped: int = 0

    def __post_init__(self) -> None:
        for name in ("times_chosen", "times_helped"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidRecordError(f"CandidateStats.{name} must be a non-negative integer, got {value!r}")


USAGE_METADATA_KEYS = frozenset({"times_chosen", "times_helped", "created_at"})
"""Metadata keys that once carried :attr:`Candidate.usage` and :attr:`Candidate.created_at` as
strings; refused in new candidates so a caller still passing them learns it instead of losing them."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """Something the router may put into the agent's context.

    ``tokens`` is the context cost of injecting it; ``usage`` is its history in the episode log
    (``None``: never counted, featurised as never chosen); ``created_at`` gives its age (``None``:
    unknown); ``metadata`` carries free-form extras (``source``, ``name``, ``owner``, ...).
    """

    id: str
    kind: CandidateKind
    text: str
    tokens: int
    metadata: Mapping[str, JSONValue] = field(default_factory=lambda: _EMPTY)
    usage: CandidateStats | None = None
    created_at: datetime | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise InvalidRecordError(f"Candidate.id must be a non-empty string, got {self.id!r}")
        if self.id == STOP_ID:
            raise InvalidRecordError(f"Candidate.id {STOP_ID!r} is reserved for the stop option")
        _require_id_length("Candidate.id", self.id)
        try:
            object.__setattr__(self, "kind", CandidateKind(self.kind))
        except ValueError:
            raise InvalidRecordError(
                f"Candidate.kind must be one of memory, skill, tool; got {self.kind!r} (id {self.id!r})"
            ) from None
        if not isinstance(self.text, str):
            raise InvalidRecordError(f"Candidate.text must be a string (id {self.id!r})")
        if isinstance(self.tokens, bool) or not isinstance(self.tokens, int) or self.tokens < 0:
            raise InvalidRecordError(
                f"Candidate.tokens must be a non-negative integer, got {self.tokens!r} (id {self.id!r})"
            )
        if self.usage is not None and not isinstance(self.usage, CandidateStats):
            raise InvalidRecordError(
                f"Candidate.usage must be a CandidateStats or None, got {type(self.usage).__name__} (id {self.id!r})"
            )
        if self.created_at is not None:
            if not isinstance(self.created_at, datetime):
                raise InvalidRecordError(
                    f"Candidate.created_at must be a datetime or None, got {self.created_at!r} (id {self.id!r})"
                )
            _require_aware(f"Candidate.created_at (id {self.id!r})", self.created_at)
        legacy = USAGE_METADATA_KEYS.intersection(self.metadata or ())
        if legacy:
            raise InvalidRecordError(
                f"Candidate.metadata key(s) {sorted(legacy)} of {self.id!r} are not read: pass "
                "usage=CandidateStats(times_chosen, times_helped) and created_at=datetime instead"
            )
        object.__setattr__(self, "metadata", _frozen_mapping(self.metadata))


_DEFAULT_SLOTS: Mapping[CandidateKind, int] = MappingProxyType(
    {CandidateKind.MEMORY: 5, CandidateKind.SKILL: 2, CandidateKind.TOOL: 3}
)


@dataclass(frozen=True, slots=True)
class Budget:
    """How much may enter the context: at most ``slots[kind]`` candidates per kind and at most
    ``max_tokens`` tokens in all (``None``: no token limit)."""

    max_tokens: int | None = 2000
    slots: Mapping[CandidateKind, int] = field(default_factory=lambda: _DEFAULT_SLOTS)

    def __post_init__(self) -> None:
        if self.max_tokens is not None and (
            isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens < 0
        ):
            raise InvalidRecordError(
                f"Budget.max_tokens must be a non-negative integer or None, got {self.max_tokens!r}"
            )
        slots: dict[CandidateKind, int] = {}
        for kind, count in dict(self.slots).items():
            try:
                kind = CandidateKind(kind)
            except ValueError:
                raise InvalidRecordError(f"Budget.slots has an unknown kind {kind!r}") from None
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise InvalidRecordError(f"Budget.slots[{kind.value!r}] must be a non-negative integer, got {count!r}")
            slots[kind] = count
        object.__setattr__(self, "slots", MappingProxyType(slots))

    def slots_for(self, kind: CandidateKind) -> int:
        return self.slots.get(kind, 0)


@dataclass(frozen=True, slots=True)
class RoutingContext:
    """What the router knows about the turn it routes."""

    query: str
    user_id: str
    thread_id: str | None = None
    turn: int = 0
    kinds: tuple[CandidateKind, ...] = (CandidateKind.MEMORY, CandidateKind.SKILL, CandidateKind.TOOL)
    budget: Budget = field(default_factory=Budget)

    def __post_init__(self) -> None:
        if not isinstance(self.query, str):
            raise InvalidRecordError("RoutingContext.query must be a string")
        if not isinstance(self.user_id, str) or not self.user_id:
            raise InvalidRecordError(f"RoutingContext.user_id must be a non-empty string, got {self.user_id!r}")
        _require_id_length("RoutingContext.user_id", self.user_id)
        _require_id_length("RoutingContext.thread_id", self.thread_id)
        if isinstance(self.turn, bool) or not isinstance(self.turn, int) or self.turn < 0:
            raise InvalidRecordError(f"RoutingContext.turn must be a non-negative integer, got {self.turn!r}")
        try:
            kinds = tuple(CandidateKind(k) for k in self.kinds)
        except ValueError as exc:
            raise InvalidRecordError(f"RoutingContext.kinds: {exc}") from None
        if len(set(kinds)) != len(kinds):
            raise InvalidRecordError(f"RoutingContext.kinds repeats a kind: {[k.value for k in kinds]}")
        object.__setattr__(self, "kinds", kinds)


@dataclass(frozen=True, slots=True)
class ScoredCandidate:
    """A candidate as the router saw it: its features, its score and its rank by score
    (0 = best) among the candidates of its kind."""

    candidate: Candidate
    features: Mapping[str, float]
    score: float
    rank: int

    def __post_init__(self) -> None:
        # One C-level pass on the hot path (every decision builds dozens of these); the
        # per-field walk below runs only to name what is wrong.
        try:
            valid = math.isfinite(self.score) and all(map(math.isfinite, self.features.values()))
        except TypeError:
            valid = False
        if not valid:
            _require_finite(f"score of candidate {self.candidate.id!r}", self.score)
            for name, value in self.features.items():
                _require_finite(f"feature {name!r} of candidate {self.candidate.id!r}", value)
        object.__setattr__(self, "features", _frozen_mapping(self.features))


@dataclass(frozen=True, slots=True)
class SlotDraw:
    """One slot of a selection: the distribution it was drawn from and what was drawn.

    ``candidate_ids`` lists the eligible candidates in the order the router scored them, with
    :data:`STOP_ID` wherever the stop option was offered; ``probabilities`` is aligned with it.
    """

    slot: int
    kind: CandidateKind
    candidate_ids: tuple[str, ...]
    probabilities: tuple[float, ...]
    chosen_id: str
    chosen_probability: float

    def __post_init__(self) -> None:
        if len(self.candidate_ids) != len(self.probabilities):
            raise InvalidRecordError(
                f"SlotDraw {self.slot}: candidate_ids ({len(self.candidate_ids)}) and probabilities "
                f"({len(self.probabilities)}) differ in length"
            )
        if not self.candidate_ids:
            raise InvalidRecordError(f"SlotDraw {self.slot}: empty distribution")
        probabilities = self.probabilities
        total = sum(probabilities) if set(map(type, probabilities)) <= _PLAIN_NUMBERS else math.nan
        if not (math.isfinite(total) and min(probabilities) >= 0.0 and max(probabilities) <= 1.0):
            # the slow path names the offending entry; routers hit the fast one above every slot
            total = 0.0
            for cid, p in zip(self.candidate_ids, probabilities, strict=True):
                _require_finite(f"SlotDraw {self.slot} probability of {cid!r}", p)
                if p < 0.0 or p > 1.0:
                    raise InvalidRecordError(f"SlotDraw {self.slot}: probability of {cid!r} is {p}, outside [0, 1]")
                total += p
        if abs(total - 1.0) > 1e-6:
            raise InvalidRecordError(f"SlotDraw {self.slot}: probabilities sum to {total!r}, not 1 (within 1e-6)")
        if self.chosen_id not in self.candidate_ids:
            raise InvalidRecordError(f"SlotDraw {self.slot}: chosen {self.chosen_id!r} is not in the distribution")
        expected = self.probabilities[self.candidate_ids.index(self.chosen_id)]
        if abs(expected - self.chosen_probability) > 1e-12 or self.chosen_probability <= 0.0:
            raise InvalidRecordError(
                f"SlotDraw {self.slot}: chosen_probability {self.chosen_probability!r} does not match the "
                f"distribution ({expected!r}) or is not positive"
            )

    def probability_of(self, candidate_id: str) -> float:
        try:
            return self.probabilities[self.candidate_ids.index(candidate_id)]
        except ValueError:
            return 0.0


@dataclass(frozen=True, slots=True)
class Selection:
    """A routing decision: what was offered, what was chosen slot by slot, and with what
    probability.

    ``propensity`` is the joint probability of the whole slate, the product of each slot's
    ``chosen_probability`` (stop draws included).
    """

    context: RoutingContext
    offered: tuple[ScoredCandidate, ...]
    slots: tuple[SlotDraw, ...]
    policy: str
    policy_version: str
    seed: int
    latency_ms: float = 0.0
    id: str = field(default_factory=new_id)
    created_at: datetime = field(default_factory=utcnow)

    def __post_init__(self) -> None:
        if not self.offered:
            raise InvalidRecordError("Selection.offered is empty: a decision needs at least one candidate")
        ids = [sc.candidate.id for sc in self.offered]
        if len(set(ids)) != len(ids):
            dupes = sorted({i for i in ids if ids.count(i) > 1})
            raise InvalidRecordError(f"Selection offers duplicate candidate ids: {dupes}")
        offered = set(ids)
        for draw in self.slots:
            if draw.chosen_id != STOP_ID and draw.chosen_id not in offered:
                raise InvalidRecordError(f"Selection slot {draw.slot} chose {draw.chosen_id!r}, which was not offered")
        chosen = [d.chosen_id for d in self.slots if d.chosen_id != STOP_ID]
        if len(set(chosen)) != len(chosen):
            raise InvalidRecordError(f"Selection chose a candidate twice: {chosen}")
        _require_finite("Selection.latency_ms", self.latency_ms)
        _require_aware("Selection.created_at", self.created_at)

    @property
    def chosen_ids(self) -> tuple[str, ...]:
        """Chosen candidate ids in slot order (stop draws left out)."""
        return tuple(d.chosen_id for d in self.slots if d.chosen_id != STOP_ID)

    @property
    def chosen(self) -> tuple[Candidate, ...]:
        by_id = {sc.candidate.id: sc.candidate for sc in self.offered}
        return tuple(by_id[cid] for cid in self.chosen_ids)

    @property
    def propensity(self) -> float:
        p = 1.0
        for draw in self.slots:
            p *= draw.chosen_probability
        return p

    @property
    def tokens_injected(self) -> int:
        return sum(c.tokens for c in self.chosen)

    def __repr__(self) -> str:  # what was chosen, not every candidate's features
        return selection_repr(self)

    def scored(self, candidate_id: str) -> ScoredCandidate:
        for sc in self.offered:
            if sc.candidate.id == candidate_id:
                return sc
        raise KeyError(candidate_id)
