"""The admin view's records: typed, immutable rows of the aggregates :class:`AdminQueries` reads."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from memabra._records import JSONValue
from memabra.storage._snapshot_audit import StatusChange
from memabra.storage._suspended_turns import SuspendedTurn

__all__ = [
    "ConversationTurn",
    "KindShare",
    "PolicyVersionStats",
    "RewardPoint",
    "SnapshotInfo",
    "TurnPage",
    "VersionCount",
    "kind_shares_of",
]


@dataclass(frozen=True, slots=True)
class ConversationTurn:
    """One turn of a conversation thread: what the user asked and what the agent answered."""

    episode_id: str
    turn: int
    query: str
    answer: str | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    """A policy snapshot without its model bytes (only their size); ``history`` is its audit trail
    of status changes made through :class:`~memabra.storage._snapshot_audit.SnapshotAudit`, oldest first."""

    version: str
    policy: str
    parent: str | None
    status: str
    created_at: datetime
    model_size: int
    metrics: Mapping[str, JSONValue]
    history: tuple[StatusChange, ...] = ()
    # what a rollback of this snapshot re-activates while it is active (storage._snapshots.rollback_version);
    # ``None`` when it is not active or has nothing to roll back to
    rollback_to: str | None = None


@dataclass(frozen=True, slots=True)
class VersionCount:
    """A policy version the episodes were logged with, how many and when it last routed one."""

    policy_version: str
    episodes: int
    last_at: datetime | None


@dataclass(frozen=True, slots=True)
class RewardPoint:
    """Mean reward of the episodes a policy version routed in one time bucket.

    ``bucket`` is the bucket's start as text (``YYYY-MM-DD`` for days, ``YYYY-MM-DD HH`` for
    hours, ``YYYY-MM-DD HH:MM`` for minutes, ``YYYY-MM-DD HH:MM:SS`` for seconds, UTC); ``rewarded`` counts the episodes that have a reward so far.
    """

    policy_version: str
    bucket: str
    episodes: int
    rewarded: int
    mean_reward: float | None


@dataclass(frozen=True, slots=True)
class PolicyVersionStats:
    """How a policy version drew its slots: decisions, draws, exploration and propensities.

    ``decisions`` and the propensities cover every decision in the window; the draw counts cover
    the ``sampled_decisions`` among them that were in the sample (the latest ones)."""

    policy_version: str
    decisions: int
    sampled_decisions: int
    draws: int
    explored_draws: int
    stop_draws: int
    min_propensity: float | None
    mean_propensity: float | None
    min_chosen_probability: float | None
    first_at: datetime | None
    last_at: datetime | None

    @property
    def exploration_rate(self) -> float | None:
        return self.explored_draws / self.draws if self.draws else None


@dataclass(frozen=True, slots=True)
class KindShare:
    """Share of a policy version's chosen candidates (stop draws left out) of one kind."""

    policy_version: str
    kind: str
    chosen: int
    share: float


def kind_shares_of(chosen: list[tuple[str, str, int]]) -> list[KindShare]:
    """Each (version, kind)'s share of its version's chosen candidates, from their counts."""
    totals: dict[str, int] = defaultdict(int)
    for version, _, n in chosen:
        totals[version] += n
    return sorted(
        (KindShare(version, kind, n, n / totals[version]) for version, kind, n in chosen),
        key=lambda k: (k.policy_version, k.kind),
    )


@dataclass(frozen=True, slots=True)
class TurnPage:
    """One page of the kept turns, the oldest first. ``position``: how many matching turns come
    before it (where its rows stand in the whole list when it was read); ``next_cursor``: where
    the next page starts (``None``: this is the last); ``has_previous`` with ``previous_cursor``
    ``None``: the page before is the first."""

    items: tuple[SuspendedTurn, ...]
    position: int
    next_cursor: str | None
    has_previous: bool
    previous_cursor: str | None
