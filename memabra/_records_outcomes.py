"""Outcome records: rewards, feedback, episodes, snapshots, registry items, listings, learning
items and offline results. Re-exported by :mod:`memabra._records`."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any

from memabra._errors import InvalidFeedbackError, InvalidRecordError
from memabra._records_repr import snapshot_repr
from memabra._records_routing import (
    _EMPTY,
    FeedbackKind,
    JSONValue,
    Selection,
    StepKind,
    _check_json_finite,
    _frozen_mapping,
    _require_aware,
    _require_finite,
    _require_id_length,
    new_id,
    utcnow,
)
from memabra._signals import FeedbackSignals


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
                raise InvalidRecordError(
                    f"reward weight {name} must be non-negative (the sign is in the formula), got {value!r}"
                )

    def as_dict(self) -> dict[str, float]:
        return {n: float(getattr(self, n)) for n in ("ws", "wr", "we", "wc", "wl", "wx", "wu")}

    def total_range(self) -> tuple[float, float]:
        """The lowest and highest total these weights allow, from the components' ranges (H's
        kinds enter as their mean, so H spans one kind's range; the weights are non-negative, so
        each term's end is its weight times its component's end)."""
        r = COMPONENT_RANGES
        highest = self.ws * r["s"][1] + self.wr * r["hm"][1] + self.wu * r["u"][1]
        lowest = self.ws * r["s"][0] + self.wr * r["hm"][0] - self.we * r["e"][1] - self.wc * r["c"][1]
        lowest = lowest - self.wl * r["l"][1] - self.wx * r["x"][1]
        return lowest, highest


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
                raise InvalidRecordError(
                    f"reward component {name.upper()} = {value!r} is outside its range [{low}, {high}]"
                )

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

    ``payload`` is given as a JSON object (or use :meth:`of` with a
    :class:`~memabra.FeedbackSignals`) and parsed here, once: an unknown key or an out-of-range value raises
    :class:`~memabra._errors.InvalidFeedbackError`. ``signals`` is the typed record everything
    downstream reads; ``payload`` keeps the canonical JSON form that is stored. Posting the same
    ``idempotency_key`` twice is a no-op.
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
    signals: FeedbackSignals = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.episode_id, str) or not self.episode_id:
            raise InvalidRecordError("Feedback.episode_id must be a non-empty string")
        try:
            object.__setattr__(self, "kind", FeedbackKind(self.kind))
        except ValueError:
            accepted = ", ".join(k.value for k in FeedbackKind)
            raise InvalidFeedbackError(f"feedback kind must be one of {accepted}; got {self.kind!r}") from None
        if not isinstance(self.idempotency_key, str) or not self.idempotency_key:
            raise InvalidRecordError("Feedback.idempotency_key must be a non-empty string")
        _require_id_length("Feedback.idempotency_key", self.idempotency_key)
        _require_aware("Feedback.received_at", self.received_at)
        # parsed first: a bad value (NaN, a huge number, a nested object) is an InvalidFeedbackError
        # naming its key, as at every other entry point; what parses holds only finite numbers
        signals = FeedbackSignals.parse(self.payload)
        _check_json_finite("Feedback.payload", self.payload)
        object.__setattr__(self, "signals", signals)
        object.__setattr__(self, "payload", MappingProxyType(signals.as_payload()))

    @classmethod
    def of(
        cls, episode_id: str, kind: FeedbackKind | str, source: str, signals: FeedbackSignals, **fields: Any
    ) -> Feedback:
        """Feedback from an already typed record (``fields``: decision_id, idempotency_key, ...)."""
        return cls(episode_id, FeedbackKind(kind), source, signals.as_payload(), **fields)


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
        _require_id_length("Episode.user_id", self.user_id)
        _require_id_length("Episode.thread_id", self.thread_id)
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

    def __repr__(self) -> str:  # the model's size, not its bytes
        return snapshot_repr(self)


@dataclass(frozen=True, slots=True)
class FeedbackReceipt:
    """What happened to posted feedback: ``stored`` (applies to the reward), ``late`` (stored
    for review, never applied: the episode's reward was already final or its feedback window had
    closed) or ``duplicate`` (an earlier post had the same idempotency key; nothing written).

    ``retired_memory``: the memory a ``retract_memory`` in it retired (a retry of the same
    retraction answers as the first did), ``None`` where it retired none: no ``retract_memory``,
    or an id that was not the episode user's current memory (unknown, another user's, retired or
    superseded since), whose correction still counts in the reward."""

    feedback_id: str
    status: str
    retired_memory: str | None = None

    @property
    def applied(self) -> bool:
        return self.status == "stored"


@dataclass(frozen=True, slots=True)
class LearningItem:
    """A final reward ready for the router: each selection of the episode, the reward, and the
    local outcome (1.0 used, 0.0 injected but unused) of every chosen candidate whose outcome is known;
    ``missing``: candidates its feedback says should have been injected (``relevant_ids``: a tool the
    model fetched with ``find_tools``, a memory the user restated) that no selection chose."""

    episode_id: str
    selections: tuple[Selection, ...]
    reward: RewardBreakdown
    outcomes: Mapping[str, float]
    missing: tuple[str, ...] = ()
