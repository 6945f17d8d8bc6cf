"""Typed, immutable records that cross module boundaries.

Every record is a frozen dataclass with slots. Sequences are tuples and free-form metadata is a
read-only mapping, so a record handed to the router, the log or the admin view cannot be changed
behind its producer's back. Validation happens in ``__post_init__`` and raises
:class:`~memabra._errors.InvalidRecordError` naming the offending field.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import StrEnum
from types import MappingProxyType
from typing import Any, TypeAlias

from memabra._errors import InvalidRecordError

__all__ = [
    "STOP_ID",
    "Budget",
    "Candidate",
    "CandidateKind",
    "Episode",
    "EpisodeSummary",
    "Feedback",
    "FeedbackReceipt",
    "GoldDecision",
    "FeedbackKind",
    "JSONValue",
    "LearningItem",
    "MemoryQuality",
    "OPEResult",
    "Page",
    "PolicySnapshot",
    "RegistryItem",
    "RewardBreakdown",
    "RewardComponents",
    "RewardWeights",
    "RoutingContext",
    "ScoredCandidate",
    "Selection",
    "SlotDraw",
    "Step",
    "StepKind",
    "new_id",
    "utcnow",
]

JSONValue: TypeAlias = Any
"""Anything :func:`json.dumps` accepts; kept loose because metadata is user-supplied."""

STOP_ID = "__stop__"
"""The pseudo-candidate a slot draws when the router decides to inject nothing more of a kind."""

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def new_id() -> str:
    """A fresh identifier (UUID4 hex) generated client-side, so bulk inserts need no RETURNING."""
    return uuid.uuid4().hex


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


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


def _require_aware(name: str, value: datetime | None) -> None:
    if value is not None and value.tzinfo is None:
        raise InvalidRecordError(f"{name} must be timezone-aware (UTC), got a naive datetime")


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
class Candidate:
    """Something the router may put into the agent's context.

    ``tokens`` is the context cost of injecting it; ``metadata`` carries source, timestamps and
    anything else featurisation may use (``created_at`` as an ISO string, ``source``, ...).
    """

    id: str
    kind: CandidateKind
    text: str
    tokens: int
    metadata: Mapping[str, JSONValue] = field(default_factory=lambda: _EMPTY)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise InvalidRecordError(f"Candidate.id must be a non-empty string, got {self.id!r}")
        if self.id == STOP_ID:
            raise InvalidRecordError(f"Candidate.id {STOP_ID!r} is reserved for the stop option")
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
            raise InvalidRecordError(f"Budget.max_tokens must be a non-negative integer or None, got {self.max_tokens!r}")
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

    @classmethod
    def trusted(cls, candidate: Candidate, features: MappingProxyType[str, float], score: float, rank: int) -> ScoredCandidate:
        """Internal: a record from fields the caller has already validated (a router's feature
        rows, checked when the table was built), skipping the per-feature checks of every
        decision's dozens of records."""
        record = object.__new__(cls)
        for name, value in (("candidate", candidate), ("features", features), ("score", score), ("rank", rank)):
            object.__setattr__(record, name, value)
        return record


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
            for cid, p in zip(self.candidate_ids, probabilities):
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

    def scored(self, candidate_id: str) -> ScoredCandidate:
        for sc in self.offered:
            if sc.candidate.id == candidate_id:
                return sc
        raise KeyError(candidate_id)


@dataclass(frozen=True, slots=True)
class Step:
    """One thing the agent did during an episode: a tool call or a model call."""

    kind: StepKind
    name: str
    seq: int = 0
    arguments: Mapping[str, JSONValue] = field(default_factory=lambda: _EMPTY)
    result: str | None = None
    status: str = "ok"
    error: str | None = None
    latency_ms: float = 0.0
    input_tokens: int | None = None
    output_tokens: int | None = None
    started_at: datetime = field(default_factory=utcnow)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", StepKind(self.kind))
        object.__setattr__(self, "arguments", _frozen_mapping(self.arguments))
        _require_finite(f"Step {self.name!r} latency_ms", self.latency_ms)
        _require_aware("Step.started_at", self.started_at)
        if self.status not in ("ok", "error", "timeout"):
            raise InvalidRecordError(f"Step.status must be ok, error or timeout, got {self.status!r}")


@dataclass(frozen=True, slots=True)
class RewardWeights:
    """Weights of R = ws*S + wr*H - we*E - wc*C - wl*L - wx*X + wu*U (the spec's starting values)."""

    ws: float = 1.0
    wr: float = 0.35
    we: float = 0.30
    wc: float = 0.40
    wl: float = 0.15
    wx: float = 0.20
    wu: float = 0.25

    def __post_init__(self) -> None:
        for name in ("ws", "wr", "we", "wc", "wl", "wx", "wu"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise InvalidRecordError(f"reward weight {name} must be a finite number, got {value!r}")
            if value < 0:
                raise InvalidRecordError(f"reward weight {name} must be non-negative (the sign is in the formula), got {value!r}")

    def as_dict(self) -> dict[str, float]:
        return {n: float(getattr(self, n)) for n in ("ws", "wr", "we", "wc", "wl", "wx", "wu")}


# Component ranges: the reward stays bounded so learners can be given a fixed cost range.
COMPONENT_RANGES: Mapping[str, tuple[float, float]] = MappingProxyType(
    {
        "s": (-0.5, 1.0),
        "hm": (-1.0, 1.0),
        "hs": (-1.0, 1.0),
        "ht": (-1.0, 1.0),
        "e": (0.0, 1.0),
        "c": (0.0, 1.0),
        "l": (0.0, 1.0),
        "x": (0.0, 1.0),
        "u": (0.0, 1.0),
    }
)


@dataclass(frozen=True, slots=True)
class RewardComponents:
    """The seven terms, with H split by kind. ``hm``/``hs``/``ht`` are ``None`` when the episode
    routed no candidates of that kind; H is the mean of those present (0 when none is)."""

    s: float = 0.0
    hm: float | None = None
    hs: float | None = None
    ht: float | None = None
    e: float = 0.0
    c: float = 0.0
    l: float = 0.0  # noqa: E741 - the spec's name for the latency term
    x: float = 0.0
    u: float = 0.0

    def __post_init__(self) -> None:
        for name, (low, high) in COMPONENT_RANGES.items():
            value = getattr(self, name)
            if value is None and name in ("hm", "hs", "ht"):
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise InvalidRecordError(f"reward component {name.upper()} must be a finite number, got {value!r}")
            if not low <= value <= high:
                raise InvalidRecordError(f"reward component {name.upper()} = {value!r} is outside its range [{low}, {high}]")

    @property
    def h(self) -> float:
        present = [v for v in (self.hm, self.hs, self.ht) if v is not None]
        return sum(present) / len(present) if present else 0.0

    def total(self, weights: RewardWeights) -> float:
        w = weights
        return (
            w.ws * self.s
            + w.wr * self.h
            - w.we * self.e
            - w.wc * self.c
            - w.wl * self.l
            - w.wx * self.x
            + w.wu * self.u
        )

    def as_dict(self) -> dict[str, float | None]:
        return {n: getattr(self, n) for n in COMPONENT_RANGES}


@dataclass(frozen=True, slots=True)
class RewardBreakdown:
    """A reward as stored: the components, the weights used and the total they give."""

    components: RewardComponents
    weights: RewardWeights
    version: str = "v1"
    decision_id: str | None = None

    @property
    def total(self) -> float:
        return self.components.total(self.weights)

    def reweighted(self, weights: RewardWeights) -> RewardBreakdown:
        return RewardBreakdown(self.components, weights, self.version, self.decision_id)


@dataclass(frozen=True, slots=True)
class Feedback:
    """A signal about an episode, possibly arriving long after it.

    ``payload`` carries the signal itself; recognised keys are documented in
    :mod:`memabra._reward` (``success``, ``correct``, ``correction``, ``redo``, ``rating``,
    ``used_ids``, ``useful_ids``, ``accepted``, ...). Posting the same ``idempotency_key`` twice
    is a no-op.
    """

    episode_id: str
    kind: FeedbackKind
    source: str
    payload: Mapping[str, JSONValue] = field(default_factory=lambda: _EMPTY)
    decision_id: str | None = None
    idempotency_key: str = field(default_factory=new_id)
    received_at: datetime = field(default_factory=utcnow)
    id: str = field(default_factory=new_id)
    late: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.episode_id, str) or not self.episode_id:
            raise InvalidRecordError("Feedback.episode_id must be a non-empty string")
        try:
            object.__setattr__(self, "kind", FeedbackKind(self.kind))
        except ValueError:
            raise InvalidRecordError(
                f"Feedback.kind must be explicit, implicit or programmatic, got {self.kind!r}"
            ) from None
        if not self.idempotency_key:
            raise InvalidRecordError("Feedback.idempotency_key must be non-empty")
        _require_aware("Feedback.received_at", self.received_at)
        _check_json_finite("Feedback.payload", self.payload)
        object.__setattr__(self, "payload", _frozen_mapping(self.payload))


def _check_json_finite(name: str, value: Any) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidRecordError(f"{name} holds a non-finite number ({value!r})")
    if isinstance(value, Mapping):
        for k, v in value.items():
            _check_json_finite(f"{name}.{k}", v)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_json_finite(f"{name}[{i}]", v)


@dataclass(frozen=True, slots=True)
class Episode:
    """One turn of an agent: the routing decisions it made, what it did, what it answered, and
    (once known) its reward."""

    user_id: str
    query: str
    selections: tuple[Selection, ...] = ()
    steps: tuple[Step, ...] = ()
    answer: str | None = None
    thread_id: str | None = None
    turn: int = 0
    id: str = field(default_factory=new_id)
    created_at: datetime = field(default_factory=utcnow)
    reward: RewardBreakdown | None = None
    finalized_at: datetime | None = None
    feedback: tuple[Feedback, ...] = ()
    used_ids: frozenset[str] | None = None
    metadata: Mapping[str, JSONValue] = field(default_factory=lambda: _EMPTY)

    def __post_init__(self) -> None:
        if not isinstance(self.user_id, str) or not self.user_id:
            raise InvalidRecordError("Episode.user_id must be a non-empty string")
        for sel in self.selections:
            if sel.context.user_id != self.user_id:
                raise InvalidRecordError(
                    f"Episode {self.id}: selection {sel.id} belongs to user {sel.context.user_id!r}, "
                    f"not {self.user_id!r}"
                )
        _require_aware("Episode.created_at", self.created_at)
        _require_aware("Episode.finalized_at", self.finalized_at)
        _check_json_finite("Episode.metadata", self.metadata)
        if self.used_ids is not None:
            object.__setattr__(self, "used_ids", frozenset(self.used_ids))
        object.__setattr__(self, "metadata", _frozen_mapping(self.metadata))


@dataclass(frozen=True, slots=True)
class PolicySnapshot:
    """A learner's state at a point in time, as stored in the log."""

    policy: str
    version: str
    model: bytes
    learner_args: Mapping[str, JSONValue] = field(default_factory=lambda: _EMPTY)
    parent: str | None = None
    created_at: datetime = field(default_factory=utcnow)
    metrics: Mapping[str, JSONValue] = field(default_factory=lambda: _EMPTY)
    status: str = "candidate"

    def __post_init__(self) -> None:
        if not self.version:
            raise InvalidRecordError("PolicySnapshot.version must be non-empty")
        if self.status not in ("candidate", "active", "retired"):
            raise InvalidRecordError(f"PolicySnapshot.status must be candidate, active or retired, got {self.status!r}")
        object.__setattr__(self, "learner_args", _frozen_mapping(self.learner_args))
        object.__setattr__(self, "metrics", _frozen_mapping(self.metrics))


def ensure_sequence(name: str, value: Sequence[Any]) -> tuple[Any, ...]:
    if isinstance(value, (str, bytes)):
        raise InvalidRecordError(f"{name} must be a sequence, not a string")
    return tuple(value)


@dataclass(frozen=True, slots=True)
class RegistryItem:
    """A memory, skill or tool as kept in the registry.

    ``text`` is what the router weighs (a memory's text, a skill's or tool's description);
    ``body`` is what is injected when a skill is chosen (its instructions) or a tool's JSON
    schema. ``owner`` is the user it belongs to; ``""`` marks a skill or tool shared by all users.
    """

    kind: CandidateKind
    id: str
    owner: str
    text: str
    tokens: int
    name: str = ""
    body: str | None = None
    source: str = "user"
    metadata: Mapping[str, JSONValue] = field(default_factory=lambda: _EMPTY)
    created_at: datetime = field(default_factory=utcnow)
    updated_at: datetime | None = None
    last_chosen_at: datetime | None = None
    times_chosen: int = 0
    times_used: int = 0

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "kind", CandidateKind(self.kind))
        except ValueError:
            raise InvalidRecordError(f"RegistryItem.kind must be memory, skill or tool, got {self.kind!r}") from None
        if not self.id:
            raise InvalidRecordError("RegistryItem.id must be non-empty")
        if self.kind is CandidateKind.MEMORY and not self.owner:
            raise InvalidRecordError(f"memory {self.id!r} needs an owner: memories are always scoped to a user")
        if isinstance(self.tokens, bool) or not isinstance(self.tokens, int) or self.tokens < 0:
            raise InvalidRecordError(f"RegistryItem.tokens must be a non-negative integer (id {self.id!r})")
        _require_aware("RegistryItem.created_at", self.created_at)
        if self.updated_at is None:
            object.__setattr__(self, "updated_at", self.created_at)
        _check_json_finite("RegistryItem.metadata", self.metadata)
        object.__setattr__(self, "metadata", _frozen_mapping(self.metadata))

    def as_candidate(self) -> Candidate:
        """The candidate the router sees, with usage counters in its metadata for featurisation."""
        meta = dict(self.metadata)
        meta.update(
            name=self.name or self.id,
            source=self.source,
            owner=self.owner,
            created_at=self.created_at.isoformat(),
            times_chosen=self.times_chosen,
            times_helped=self.times_used,
        )
        return Candidate(self.id, self.kind, self.text, self.tokens, meta)


@dataclass(frozen=True, slots=True)
class EpisodeSummary:
    """One row of an episode listing."""

    id: str
    user_id: str
    query: str
    created_at: datetime
    policy_version: str | None
    kinds: tuple[str, ...]
    reward_total: float | None
    corrected: bool
    finalized: bool


@dataclass(frozen=True, slots=True)
class Page:
    """A page of a keyset-paginated listing; pass ``next_cursor`` back to get the next one."""

    items: tuple[Any, ...]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class FeedbackReceipt:
    """What happened to posted feedback: ``stored`` (applies to the reward), ``late`` (stored,
    but the episode's reward was already final and learned from) or ``duplicate`` (an earlier
    post had the same idempotency key; nothing written)."""

    feedback_id: str
    status: str

    @property
    def applied(self) -> bool:
        return self.status == "stored"


@dataclass(frozen=True, slots=True)
class LearningItem:
    """A final reward ready for the router: each selection of the episode, the reward, and the
    local outcome (1.0 used, 0.0 injected but unused) of every chosen candidate whose outcome is known."""

    episode_id: str
    selections: tuple[Selection, ...]
    reward: RewardBreakdown
    outcomes: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class OPEResult:
    """One estimator's estimate of one target policy's value on the log."""

    policy: str
    estimator: str
    value: float
    ci_low: float
    ci_high: float
    n_rounds: int
    alpha: float = 0.05
    snapshot_version: str | None = None
    details: Mapping[str, JSONValue] = field(default_factory=lambda: _EMPTY)
    run_id: str = field(default_factory=new_id)
    created_at: datetime = field(default_factory=utcnow)
    id: str = field(default_factory=new_id)

    def __post_init__(self) -> None:
        for name in ("value", "ci_low", "ci_high", "alpha"):
            _require_finite(f"OPEResult.{name}", getattr(self, name))
        _check_json_finite("OPEResult.details", self.details)
        object.__setattr__(self, "details", _frozen_mapping(self.details))


@dataclass(frozen=True, slots=True)
class GoldDecision:
    """A logged decision whose gold answer is known: what MemPO grades."""

    id: str
    question: str
    selected: tuple[str, ...]
    candidates: tuple[str, ...]
    gold_answer: str


@dataclass(frozen=True, slots=True)
class MemoryQuality:
    """MemPO's label of a decision: P(gold | selected memories) against P(gold | every candidate);
    ``reward`` +1 when the selection does as well, else -1."""

    decision_id: str
    scorer: str
    p_selected: float
    p_all: float
    difference: float
    reward: int
    answer_tokens: int
    scored_at: datetime = field(default_factory=utcnow)

    def __post_init__(self) -> None:
        for name in ("p_selected", "p_all", "difference"):
            _require_finite(f"MemoryQuality.{name}", getattr(self, name))
        if self.reward not in (1, -1):
            raise InvalidRecordError(f"MemoryQuality.reward must be +1 or -1, got {self.reward!r}")
