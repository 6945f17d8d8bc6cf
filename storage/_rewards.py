"""Feedback and rewards: stored, and applied in the same transaction.

Storage decides nothing here: what a reward is comes from the caller's ``score`` function (the
reward service's rules), what counts as a correction from the typed feedback record. What storage
guarantees is atomicity: feedback and the reward recomputed from it commit together, so a process
killed in between leaves neither, and a retry with the same idempotency key is applied then.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime

from sqlalchemy import bindparam, delete, insert, select, tuple_, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from memabra._errors import FeedbackError, UnknownEpisodeError
from memabra._records import Episode, Feedback, FeedbackReceipt, LearningItem, RewardBreakdown, utcnow
from memabra.storage import _convert as cv
from memabra.storage._clock import database_now
from memabra.storage._episodes import load_episode, load_selections
from memabra.storage._from_rows import missed_by_episode
from memabra.storage._models import (
    DecisionCandidateRow,
    DecisionRow,
    EpisodeRow,
    FeedbackRow,
    RegistryRow,
    RewardRow,
    table_of,
)
from memabra.storage._rows import clean_text, prepare
from memabra.storage._tx import Transactions

__all__ = [
    "Scorer",
    "add_feedback",
    "claim_learning",
    "due_episode_ids",
    "feedback_for",
    "get_reward",
    "put_reward",
    "rescore",
    "set_used",
]

Scorer = Callable[[Episode], RewardBreakdown]
"""The reward's rules: an episode (with all its stored feedback) to its reward breakdown."""


def add_feedback(
    tx: Transactions, feedback: Feedback, score: Scorer | None = None, *, final: bool = False
) -> FeedbackReceipt:
    """Store feedback and, when ``score`` is given and the window is open, the reward it yields,
    in one transaction. ``duplicate``: the idempotency key was seen (nothing written); ``late``:
    the reward was already final or the episode's feedback window had closed (stored for review,
    never applied; with ``score``, a reward still open is made final with what it had); else
    ``stored``."""
    row_values = prepare(table_of(FeedbackRow), [cv.feedback_values(feedback, late=False)])[0]

    def work(s: Session) -> FeedbackReceipt:
        episode = s.get(EpisodeRow, row_values["episode_id"], with_for_update=True)
        if episode is None:
            raise UnknownEpisodeError(f"feedback names no known episode: {feedback.episode_id!r}")
        if feedback.decision_id is not None:
            decision = s.get(DecisionRow, row_values["decision_id"])
            if decision is None or decision.episode_id != episode.id:
                raise FeedbackError(
                    f"feedback names decision {feedback.decision_id!r}, "
                    f"which is not part of episode {feedback.episode_id!r}"
                )
        # The window is the stored deadline, not whether a finalise pass happened to run yet:
        # otherwise what is learned would depend on when the pass last ran. Judged by the
        # database's clock, the deadline's (storage/_clock.py): this host's may be minutes apart.
        now = database_now(s)
        late = episode.finalized_at is not None or now > episode.feedback_due_at
        # One statement for the common case (a new key): the insert skips a row whose key (or id)
        # is already stored, and a concurrent post of the same key waits for the first to commit.
        table = table_of(FeedbackRow)
        upsert = pg_insert(table) if s.get_bind().dialect.name == "postgresql" else sqlite_insert(table)
        stmt = upsert.values({**row_values, "late": late}).on_conflict_do_nothing().returning(table.c.id)
        if s.execute(stmt).first() is None:
            key = row_values["idempotency_key"]
            existing = s.scalar(select(FeedbackRow).where(FeedbackRow.idempotency_key == key))
            if existing is not None and existing.episode_id != episode.id:
                raise FeedbackError(
                    f"idempotency key {feedback.idempotency_key!r} was already used for episode {existing.episode_id!r}"
                )
            return FeedbackReceipt(existing.id if existing is not None else feedback.id, "duplicate")
        if late:
            if score is not None and episode.finalized_at is None:
                s.flush()
                _store_reward(s, episode, score(_scored_view(s, episode.id)), final=True, at=now)
            return FeedbackReceipt(feedback.id, "late")
        if feedback.signals.corrects:
            episode.corrected = True
        used = feedback.signals.implicit.used_ids
        if used is not None:
            _set_used(s, episode, list(used))
        if score is not None:
            s.flush()
            _store_reward(s, episode, score(_scored_view(s, episode.id)), final=final, at=now)
        return FeedbackReceipt(feedback.id, "stored")

    return tx.write(work, what="add_feedback")


def rescore(tx: Transactions, episode_id: str, score: Scorer, *, final: bool) -> bool:
    """Recompute an episode's reward from what is stored, in one transaction; False when it was
    already final (nothing changes)."""

    def work(s: Session) -> bool:
        episode = s.get(EpisodeRow, clean_text(episode_id), with_for_update=True)
        if episode is None:
            raise UnknownEpisodeError(f"no episode with id {episode_id!r}")
        existing = s.get(RewardRow, episode.id)
        if existing is not None and existing.final:
            return False
        return _store_reward(s, episode, score(_scored_view(s, episode.id)), final=final, at=utcnow())

    return tx.write(work, what="rescore")


def _scored_view(s: Session, episode_id: str) -> Episode:
    """The episode as its reward sees it: late feedback is kept for review but never scored (an
    episode can hold some before it is finalised, when feedback arrived after its deadline)."""
    episode = load_episode(s, episode_id)
    if not any(f.late for f in episode.feedback):
        return episode
    return replace(episode, feedback=tuple(f for f in episode.feedback if not f.late))


def put_reward(tx: Transactions, episode_id: str, reward: RewardBreakdown, *, final: bool, at: datetime | None) -> bool:
    """Store (or replace) an episode's reward; a final one is never replaced (returns False)."""
    when = at or utcnow()

    def work(s: Session) -> bool:
        episode = s.get(EpisodeRow, clean_text(episode_id), with_for_update=True)
        if episode is None:
            raise UnknownEpisodeError(f"no episode with id {episode_id!r}")
        return _store_reward(s, episode, reward, final=final, at=when)

    return tx.write(work, what="put_reward")


def _store_reward(s: Session, episode: EpisodeRow, reward: RewardBreakdown, *, final: bool, at: datetime) -> bool:
    existing = s.get(RewardRow, episode.id)
    if existing is not None and existing.final:
        return False
    values = prepare(table_of(RewardRow), [cv.reward_values(episode.id, reward, final=final, at=at)])[0]
    if existing is not None:
        s.execute(delete(RewardRow).where(RewardRow.episode_id == episode.id))
    s.execute(insert(table_of(RewardRow)), [values])
    episode.reward_total = values["total"]
    if final:
        episode.finalized_at = at
    return True


def set_used(tx: Transactions, episode_id: str, used_ids: Iterable[str]) -> None:
    """Record which chosen candidates the agent actually used (their local outcome)."""
    ids = [clean_text(str(u)) for u in used_ids]

    def work(s: Session) -> None:
        episode = s.get(EpisodeRow, clean_text(episode_id), with_for_update=True)
        if episode is None:
            raise UnknownEpisodeError(f"no episode with id {episode_id!r}")
        _set_used(s, episode, ids)

    tx.write(work, what="set_used")


def _set_used(s: Session, episode: EpisodeRow, used_ids: list[str]) -> None:
    previous = set(episode.used_ids or [])
    merged = previous | {clean_text(u) for u in used_ids}
    episode.used_ids = sorted(merged)
    decision_ids = select(DecisionRow.id).where(DecisionRow.episode_id == episode.id)
    table = table_of(DecisionCandidateRow)
    chosen = table.c.decision_id.in_(decision_ids) & table.c.chosen.is_(True)
    s.execute(update(table).where(chosen).values(used=table.c.candidate_id.in_(sorted(merged)) if merged else False))
    newly = merged - previous
    if not newly:
        return
    rows = s.execute(
        select(table.c.kind, table.c.candidate_id, table.c.metadata).where(
            chosen, table.c.candidate_id.in_(sorted(newly))
        )
    ).all()
    # Sorted like every registry counter update, so concurrent writers lock rows in one order.
    params = sorted(
        (
            {"b_kind": r.kind, "b_owner": str((r.metadata or {}).get("owner", episode.user_id)), "b_id": r.candidate_id}
            for r in rows
        ),
        key=lambda p: (p["b_kind"], p["b_owner"], p["b_id"]),
    )
    if params:
        registry = table_of(RegistryRow)
        s.execute(
            update(registry)
            .where(
                registry.c.kind == bindparam("b_kind"),
                registry.c.owner == bindparam("b_owner"),
                registry.c.id == bindparam("b_id"),
            )
            .values(times_used=registry.c.times_used + 1),
            params,
        )


def feedback_for(tx: Transactions, episode_id: str, *, include_late: bool) -> tuple[Feedback, ...]:
    with tx.read() as s:
        stmt = select(FeedbackRow).where(FeedbackRow.episode_id == clean_text(episode_id))
        if not include_late:
            stmt = stmt.where(FeedbackRow.late.is_(False))
        return tuple(cv.feedback_from_row(r) for r in s.scalars(stmt.order_by(FeedbackRow.received_at)))


def get_reward(tx: Transactions, episode_id: str) -> RewardBreakdown | None:
    with tx.read() as s:
        row = s.get(RewardRow, clean_text(episode_id))
        return cv.reward_from_row(row) if row is not None else None


def due_episode_ids(tx: Transactions, now: datetime | None, limit: int, after: str | None = None) -> list[str]:
    """Open episodes whose feedback window has passed at ``now`` (``None``: the database's clock, the
    deadlines', never this host's), in order of (window end, id); ``after``: only those past that
    episode in this order (keyset paging, so a caller can step over episodes it could not close
    instead of reading them again)."""
    with tx.read() as s:
        at = now if now is not None else database_now(s)
        stmt = select(EpisodeRow.id).where(EpisodeRow.finalized_at.is_(None), EpisodeRow.feedback_due_at <= at)
        if after is not None:
            cursor = s.execute(
                select(EpisodeRow.feedback_due_at, EpisodeRow.id).where(EpisodeRow.id == clean_text(after))
            ).one_or_none()
            if cursor is not None:
                stmt = stmt.where(tuple_(EpisodeRow.feedback_due_at, EpisodeRow.id) > tuple_(*cursor))
        stmt = stmt.order_by(EpisodeRow.feedback_due_at, EpisodeRow.id).limit(limit)
        return list(s.scalars(stmt))


def claim_learning(tx: Transactions, limit: int, now: datetime) -> list[LearningItem]:
    """Final rewards not yet learned from, marked learned in the same transaction (SKIP LOCKED on
    PostgreSQL, so several workers never claim the same reward)."""

    def work(s: Session) -> list[LearningItem]:
        stmt = (
            select(RewardRow)
            .where(RewardRow.final.is_(True), RewardRow.learned_at.is_(None))
            .order_by(RewardRow.computed_at)
            .limit(limit)
        )
        if tx.is_postgres:
            stmt = stmt.with_for_update(skip_locked=True)
        rewards = s.scalars(stmt).all()
        if not rewards:
            return []
        ids = [r.episode_id for r in rewards]
        selections = load_selections(s, ids)
        outcomes: dict[str, dict[str, float]] = defaultdict(dict)
        rows = s.execute(
            select(DecisionRow.episode_id, DecisionCandidateRow.candidate_id, DecisionCandidateRow.used)
            .join(DecisionRow, DecisionRow.id == DecisionCandidateRow.decision_id)
            .where(DecisionRow.episode_id.in_(ids), DecisionCandidateRow.used.is_not(None))
        ).all()
        for episode_id, candidate_id, used in rows:
            outcomes[episode_id][candidate_id] = 1.0 if used else 0.0
        feedback = s.scalars(select(FeedbackRow).where(FeedbackRow.episode_id.in_(ids)))
        missed = missed_by_episode(feedback, selections)
        s.execute(update(RewardRow).where(RewardRow.episode_id.in_(ids)).values(learned_at=now))
        return [
            LearningItem(
                r.episode_id,
                tuple(selections.get(r.episode_id, ())),
                cv.reward_from_row(r),
                outcomes[r.episode_id],
                missed.get(r.episode_id, ()),
            )
            for r in rewards
        ]

    return tx.write(work, what="claim_learning")
