"""SQLAlchemy 2.x ORM models of the episode log. They never leave ``memabra.storage``.

Every primary key is generated client-side (UUID hex, or a natural composite key), so a whole
batch of episodes is written with a handful of multi-row INSERTs and no RETURNING round trips.
The declarative base and the column types live in :mod:`memabra.storage._model_base` (re-exported
here, where the other model modules and ``migrations/env.py`` import them from).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    text,
    true,
)
from sqlalchemy.orm import Mapped, mapped_column

from memabra.storage._model_base import NAMING_CONVENTION, Base, JSONType, UTCDateTime, table_of


class EpisodeRow(Base):
    __tablename__ = "episodes"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    user_id: Mapped[str] = mapped_column(String(200))
    thread_id: Mapped[str | None] = mapped_column(String(200))
    turn: Mapped[int] = mapped_column(Integer, default=0)
    query: Mapped[str] = mapped_column(Text)
    answer: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    feedback_due_at: Mapped[datetime] = mapped_column(UTCDateTime())
    finalized_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # Denormalised so the admin list filters on indexed columns without joins.
    policy_version: Mapped[str | None] = mapped_column(String(100))
    kinds: Mapped[str] = mapped_column(String(40), default="")
    reward_total: Mapped[float | None] = mapped_column(Float)
    corrected: Mapped[bool] = mapped_column(Boolean, default=False)
    used_ids: Mapped[list[str] | None] = mapped_column(JSONType)
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSONType, default=dict)

    __table_args__ = (
        Index(None, "created_at", "id"),
        Index(None, "user_id", "created_at"),
        Index(None, "policy_version", "created_at"),
        Index(None, "finalized_at", "feedback_due_at"),
        Index(None, "reward_total"),
        Index(None, "corrected", "created_at"),
        Index(None, "user_id", "thread_id", "turn"),
    )


class DecisionRow(Base):
    __tablename__ = "decisions"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    episode_id: Mapped[str] = mapped_column(ForeignKey("episodes.id", ondelete="CASCADE"), index=True)
    user_id: Mapped[str] = mapped_column(String(200), index=True)
    seq: Mapped[int] = mapped_column(Integer, default=0)
    query: Mapped[str] = mapped_column(Text)
    thread_id: Mapped[str | None] = mapped_column(String(200))
    turn: Mapped[int] = mapped_column(Integer, default=0)
    kinds: Mapped[list[str]] = mapped_column(JSONType)
    slots_budget: Mapped[dict[str, int]] = mapped_column(JSONType)
    token_budget: Mapped[int | None] = mapped_column(Integer)
    policy: Mapped[str] = mapped_column(String(100))
    policy_version: Mapped[str] = mapped_column(String(100), index=True)
    seed: Mapped[int] = mapped_column(BigInteger)
    propensity: Mapped[float] = mapped_column(Float)
    latency_ms: Mapped[float] = mapped_column(Float)
    tokens_injected: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)


class DecisionSlotRow(Base):
    """One slot's full distribution; what offline estimators need to recompute propensities."""

    __tablename__ = "decision_slots"

    decision_id: Mapped[str] = mapped_column(ForeignKey("decisions.id", ondelete="CASCADE"), primary_key=True)
    slot: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(10))
    candidate_ids: Mapped[list[str]] = mapped_column(JSONType)
    probabilities: Mapped[list[float]] = mapped_column(JSONType)
    chosen_id: Mapped[str] = mapped_column(String(200))
    chosen_probability: Mapped[float] = mapped_column(Float)
    # The distribution's largest probability, kept when the draw is logged so the admin view tells
    # explored from greedy draws without reading the JSON; NULL on rows logged before revision 0013.
    max_probability: Mapped[float | None] = mapped_column(Float)


class DecisionCandidateRow(Base):
    """Every candidate offered per decision, chosen or not: the counterfactual log."""

    __tablename__ = "decision_candidates"

    decision_id: Mapped[str] = mapped_column(ForeignKey("decisions.id", ondelete="CASCADE"), primary_key=True)
    candidate_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    ordinal: Mapped[int] = mapped_column(Integer)
    user_id: Mapped[str] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(10))
    text: Mapped[str] = mapped_column(Text)
    tokens: Mapped[int] = mapped_column(Integer)
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSONType, default=dict)
    features: Mapped[dict[str, float]] = mapped_column(JSONType)
    score: Mapped[float] = mapped_column(Float)
    rank: Mapped[int] = mapped_column(Integer)
    # Probability at the slot that drew it, or at the first slot of its kind when not chosen.
    probability: Mapped[float] = mapped_column(Float)
    slot: Mapped[int | None] = mapped_column(Integer)
    chosen: Mapped[bool] = mapped_column(Boolean)
    # Local outcome: was it used (None while unknown). Per-slot credit and "helped" counts read it.
    used: Mapped[bool | None] = mapped_column(Boolean)

    __table_args__ = (Index(None, "user_id", "candidate_id"),)


class StepRow(Base):
    __tablename__ = "steps"

    episode_id: Mapped[str] = mapped_column(ForeignKey("episodes.id", ondelete="CASCADE"), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(10))
    name: Mapped[str] = mapped_column(String(200))
    arguments: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    result: Mapped[str | None] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(10))
    error: Mapped[str | None] = mapped_column(Text)
    latency_ms: Mapped[float] = mapped_column(Float)
    input_tokens: Mapped[int | None] = mapped_column(Integer)
    output_tokens: Mapped[int | None] = mapped_column(Integer)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime())


class FeedbackRow(Base):
    __tablename__ = "feedback"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    episode_id: Mapped[str] = mapped_column(ForeignKey("episodes.id", ondelete="CASCADE"), index=True)
    # indexed: deleting a decision cascades here (see migration 0008)
    decision_id: Mapped[str | None] = mapped_column(ForeignKey("decisions.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(20))
    source: Mapped[str] = mapped_column(String(200))
    payload: Mapped[dict[str, Any]] = mapped_column(JSONType)
    idempotency_key: Mapped[str] = mapped_column(String(200), unique=True)
    received_at: Mapped[datetime] = mapped_column(UTCDateTime())
    late: Mapped[bool] = mapped_column(Boolean, default=False)
    # the failed-turn filter reads one source's rows here, not by a scan (revision 0021)
    __table_args__ = (Index(None, "source", "episode_id"),)


class RewardRow(Base):
    """One reward per episode: the components are kept so a new weighting recomputes the total."""

    __tablename__ = "rewards"

    episode_id: Mapped[str] = mapped_column(ForeignKey("episodes.id", ondelete="CASCADE"), primary_key=True)
    s: Mapped[float] = mapped_column(Float)
    hm: Mapped[float | None] = mapped_column(Float)
    hs: Mapped[float | None] = mapped_column(Float)
    ht: Mapped[float | None] = mapped_column(Float)
    e: Mapped[float] = mapped_column(Float)
    c: Mapped[float] = mapped_column(Float)
    l: Mapped[float] = mapped_column(Float)  # noqa: E741 - the spec's name
    x: Mapped[float] = mapped_column(Float)
    u: Mapped[float] = mapped_column(Float)
    weights: Mapped[dict[str, float]] = mapped_column(JSONType)
    total: Mapped[float] = mapped_column(Float)
    reward_version: Mapped[str] = mapped_column(String(40))
    final: Mapped[bool] = mapped_column(Boolean, default=False)
    computed_at: Mapped[datetime] = mapped_column(UTCDateTime())
    learned_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # Commit-order position of a final reward, set by a database trigger (revision 0004): the
    # learner reads rewards in this order (see storage/_learner.py).
    commit_seq: Mapped[int | None] = mapped_column(BigInteger)

    __table_args__ = (Index(None, "final", "learned_at"), Index(None, "commit_seq", "episode_id"))


class PolicySnapshotRow(Base):
    __tablename__ = "policy_snapshots"

    version: Mapped[str] = mapped_column(String(100), primary_key=True)
    policy: Mapped[str] = mapped_column(String(100))
    parent: Mapped[str | None] = mapped_column(ForeignKey("policy_snapshots.version", ondelete="SET NULL"))
    model: Mapped[bytes] = mapped_column(LargeBinary)
    learner_args: Mapped[dict[str, Any]] = mapped_column(JSONType)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSONType)
    status: Mapped[str] = mapped_column(String(20))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    # the snapshot of the policy that was active when a promote or a learner's publish made this
    # one active: what a rollback re-activates (its parent when unset, revision 0011)
    previous_active: Mapped[str | None] = mapped_column(String(100))

    # at most one active snapshot per policy, held by the database (revision 0011): whatever
    # activates a snapshot retires the active one first, in the same transaction
    __table_args__ = (
        Index(None, "policy", "created_at"),
        # deleting a snapshot nulls its children's parent: found here, not by a scan (revision 0020)
        Index(None, "parent"),
        Index(
            "uq_policy_snapshots_one_active",
            "policy",
            unique=True,
            sqlite_where=text("status = 'active'"),
            postgresql_where=text("status = 'active'"),
        ),
    )


class RegistryRow(Base):
    """Memories, skills and tools. ``owner`` is the user a row belongs to; '' means shared by all
    users (skills and tools only: a memory always has an owner)."""

    __tablename__ = "registry"

    kind: Mapped[str] = mapped_column(String(10), primary_key=True)
    owner: Mapped[str] = mapped_column(String(200), primary_key=True)
    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    text: Mapped[str] = mapped_column(Text)
    body: Mapped[str | None] = mapped_column(Text)
    tokens: Mapped[int] = mapped_column(Integer)
    source: Mapped[str] = mapped_column(String(100))
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSONType, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())
    last_chosen_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    times_chosen: Mapped[int] = mapped_column(Integer, default=0)
    times_used: Mapped[int] = mapped_column(Integer, default=0)
    deleted_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # A memory a newer fact on the same subject replaced: kept for its history, out of recall.
    retired_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    superseded_by: Mapped[str | None] = mapped_column(String(200))

    # one user's memories newest first, a page at a time (revision 0022)
    __table_args__ = (Index(None, "owner", "kind"), Index(None, "owner", "kind", "created_at", "id"))


__all__ = [
    "Base",
    "JSONType",
    "NAMING_CONVENTION",
    "UTCDateTime",
    "table_of",
    "DecisionCandidateRow",
    "DecisionRow",
    "DecisionSlotRow",
    "EpisodeRow",
    "FeedbackRow",
    "MemoryScoreRow",
    "OPERunRow",
    "PolicySnapshotRow",
    "RegistryRow",
    "RewardRow",
    "StepRow",
]


class OPERunRow(Base):
    """One estimator's result for one target policy in one offline-evaluation run."""

    __tablename__ = "ope_runs"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    run_id: Mapped[str] = mapped_column(String(32), index=True)
    policy: Mapped[str] = mapped_column(String(200))
    snapshot_version: Mapped[str | None] = mapped_column(
        ForeignKey("policy_snapshots.version", ondelete="SET NULL"), index=True
    )
    estimator: Mapped[str] = mapped_column(String(40))
    value: Mapped[float] = mapped_column(Float)
    ci_low: Mapped[float] = mapped_column(Float)
    ci_high: Mapped[float] = mapped_column(Float)
    n_rounds: Mapped[int] = mapped_column(Integer)
    alpha: Mapped[float] = mapped_column(Float)
    details: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)


class MemoryScoreRow(Base):
    """One scorer's MemPO memory-quality label of a routing decision: P(gold | selected) vs
    P(gold | all). Keyed by (decision, scorer) since revision 0018: each model keeps its own."""

    __tablename__ = "memory_scores"
    # the admin's "MemPO verdict -1" filter reads the decisions graded -1 (by one scorer or any)
    # from this index alone, not a scan of every label (migration 0019)
    __table_args__ = (Index("ix_memory_scores_reward", "reward", "scorer", "decision_id"),)

    decision_id: Mapped[str] = mapped_column(ForeignKey("decisions.id", ondelete="CASCADE"), primary_key=True)
    scorer: Mapped[str] = mapped_column(String(200), primary_key=True)
    p_selected: Mapped[float] = mapped_column(Float)
    p_all: Mapped[float] = mapped_column(Float)
    difference: Mapped[float] = mapped_column(Float)
    reward: Mapped[int] = mapped_column(Integer)
    answer_tokens: Mapped[int] = mapped_column(Integer)
    scored_at: Mapped[datetime] = mapped_column(UTCDateTime())


class RevokedSessionRow(Base):
    """An admin sign-in ended by logout before its cookie expires; kept until then, then pruned."""

    __tablename__ = "admin_revoked_sessions"

    session_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    revoked_at: Mapped[datetime] = mapped_column(UTCDateTime())
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)


class DeletionRow(Base):
    """One run of ``delete_episodes``: what was asked, by whom, and how many episodes it deleted.

    ``deleted`` grows in the transaction of each chunk it counts (``progressed_at`` with it), and
    ``finished_at`` is set after the last, so a run that died half way reads as unfinished with
    exactly what it removed, and as stalled once no chunk has come for a while."""

    __tablename__ = "episode_deletions"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)
    progressed_at: Mapped[datetime] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    actor: Mapped[str] = mapped_column(String(200))
    client: Mapped[str | None] = mapped_column(String(200), nullable=True)
    named: Mapped[int] = mapped_column(Integer)
    episode_ids: Mapped[list[str]] = mapped_column(JSONType, default=list)
    user_id: Mapped[str | None] = mapped_column(String(200), nullable=True)
    created_before: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    include_unlearned: Mapped[bool] = mapped_column(Boolean)
    kept: Mapped[int] = mapped_column(Integer)
    deleted: Mapped[int] = mapped_column(Integer)
    # an erasure's forgotten memories (0 until they are forgotten); NULL for a deletion of episodes
    memories_forgotten: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # an erasure's checkpointer threads deleted (0 until then); NULL when no checkpointer was given
    threads_deleted: Mapped[int | None] = mapped_column(Integer, nullable=True)


class SuspendedTurnRow(Base):
    """A turn not yet logged: what was routed and done so far, so that any process can go on with
    it. Written when the turn is routed (``paused`` false) and again at each ``interrupt``;
    deleted in the transaction that logs its episode."""

    __tablename__ = "suspended_turns"

    turn_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    episode_id: Mapped[str] = mapped_column(String(32), unique=True)
    user_id: Mapped[str] = mapped_column(String(200), index=True)
    thread_id: Mapped[str | None] = mapped_column(String(200), nullable=True)
    suspended_at: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)
    document: Mapped[dict[str, Any]] = mapped_column(JSONType)
    # false while the turn runs: a row left false long after it was written lost its process
    paused: Mapped[bool] = mapped_column(Boolean, server_default=true())
