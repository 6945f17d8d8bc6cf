"""Records the registry and the log hand out when they list: a registered memory, skill or tool,
its usage counts, an episode's listing row and a page of a listing."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from memabra._errors import InvalidRecordError
from memabra._records_routing import (
    _EMPTY,
    USAGE_METADATA_KEYS,
    Candidate,
    CandidateKind,
    CandidateStats,
    JSONValue,
    _check_json_finite,
    _frozen_mapping,
    _require_aware,
    utcnow,
)


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
        """The candidate the router sees: its usage counters and age as typed fields."""
        meta = {k: v for k, v in self.metadata.items() if k not in USAGE_METADATA_KEYS}
        meta.update(name=self.name or self.id, source=self.source, owner=self.owner)
        usage = CandidateStats(times_chosen=self.times_chosen, times_helped=self.times_used)
        return Candidate(self.id, self.kind, self.text, self.tokens, meta, usage=usage, created_at=self.created_at)


@dataclass(frozen=True, slots=True)
class UsageCounts:
    """How often a candidate was offered to, chosen for and used by one user (from the log)."""

    times_offered: int = 0
    times_chosen: int = 0
    times_used: int = 0

    def __post_init__(self) -> None:
        for name in ("times_offered", "times_chosen", "times_used"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidRecordError(f"UsageCounts.{name} must be a non-negative integer, got {value!r}")


@dataclass(frozen=True, slots=True)
class EpisodeSummary:
    """One row of an episode listing; ``kinds`` are the kinds its decisions chose (a stop draw
    chooses nothing), in the kinds' order. Feedback received after ``feedback_due_at`` (or once
    ``finalized``) is kept as late and never scored. ``failed``: the episode was logged as a
    failed turn (an exception ended it, or a new message superseded it), ``failure_cause`` the
    stable word its feedback names the cause by (``recursion_limit``, ``model_error``,
    ``tool_error``, ``superseded``; ``None`` where it names none)."""

    id: str
    user_id: str
    query: str
    created_at: datetime
    policy_version: str | None
    kinds: tuple[str, ...]
    reward_total: float | None
    corrected: bool
    finalized: bool
    feedback_due_at: datetime
    failed: bool = False
    failure_cause: str | None = None


@dataclass(frozen=True, slots=True)
class Page:
    """A page of a keyset-paginated listing; pass ``next_cursor`` back to get the next one.

    ``has_previous``: a page comes before this one; ``previous_cursor`` is that page's cursor
    (``None`` when it is the first page). ``total`` counts the matching items when the listing was
    asked to (``None`` otherwise), up to a cap (``total_capped``: there are more)."""

    items: tuple[Any, ...]
    next_cursor: str | None
    has_previous: bool = False
    previous_cursor: str | None = None
    total: int | None = None
    total_capped: bool = False
