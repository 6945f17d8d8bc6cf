"""Decisions in the order their rewards became final: what an incremental export reads.

An export by decision time cannot be incremental: a reward becomes final days after its decision
(the feedback window), so a window already exported keeps gaining final decisions. This reader
follows the learner's commit order instead (``rewards.commit_seq``, see
:mod:`memabra.storage._learner`), with the same two rules that make the learner's reads exactly
once: rewards are read in ``(commit_seq, episode_id)`` order after a :class:`ReadPosition`, and on
PostgreSQL only below the oldest transaction still running (the horizon ``_PG_HORIZON`` that
``LearnerStore.read_final`` and the status check use), so a reward that commits late can never land
behind a position already handed out. On SQLite the trigger numbers rewards while the writer holds
the lock, so the numbers already follow commit order.

A final reward's ``commit_seq`` never changes: a final reward is never replaced, and a re-total
(``memabra rewards recompute``) rewrites its total in place. So a re-totalled reward is not read
again after the position that covered it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, or_, select, text
from sqlalchemy.orm import Session

from memabra._records_offline import LoggedDecision
from memabra.storage import _convert as cv
from memabra.storage._episodes import assemble_selections
from memabra.storage._learner_commit import ReadPosition
from memabra.storage._models import DecisionRow, EpisodeRow, RewardRow
from memabra.storage._rows import clean_text
from memabra.storage._status import _PG_HORIZON
from memabra.storage._tx import Transactions

__all__ = ["FINAL_PAGE", "FinalEpisode", "database_tag", "iter_final_episodes", "position_problem"]

FINAL_PAGE = 200
"""Final rewards read per round trip, each with its episode's decisions and their candidates: the
streamed export's ``DECISION_CHUNK`` (one decision an episode is the common case)."""


@dataclass(frozen=True, slots=True)
class FinalEpisode:
    """An episode whose reward is final, at its place in the commit order, with its decisions in
    the order they were made (none when they were deleted meanwhile)."""

    position: ReadPosition
    decisions: tuple[LoggedDecision, ...]


def iter_final_episodes(
    tx: Transactions, after: ReadPosition, *, inclusive: bool = False, user_id: str | None = None
) -> Iterator[FinalEpisode]:
    """Every episode whose reward is final, after ``after`` (at or after it with ``inclusive``) in
    commit order, ``user_id``'s only when given; a page of :data:`FINAL_PAGE` at a time, so memory
    holds one page however long the log is. On PostgreSQL a reward whose transaction is not older
    than every transaction still running is left for a later read (it may precede one that is)."""
    r = RewardRow
    position = after
    include = inclusive
    while True:
        at_or_after = r.episode_id >= position.episode_id if include else r.episode_id > position.episode_id
        conds: list[Any] = [
            r.final.is_(True),
            r.commit_seq.is_not(None),
            or_(r.commit_seq > position.seq, and_(r.commit_seq == position.seq, at_or_after)),
        ]
        if tx.is_postgres:
            conds.append(r.commit_seq < select(_PG_HORIZON).scalar_subquery())
        stmt = select(r)
        if user_id is not None:
            stmt = stmt.join(EpisodeRow, EpisodeRow.id == r.episode_id)
            conds.append(EpisodeRow.user_id == clean_text(user_id))
        stmt = stmt.where(*conds).order_by(r.commit_seq, r.episode_id).limit(FINAL_PAGE)
        with tx.read() as s:
            page = _page(s, s.scalars(stmt).all())
        if not page:
            return
        yield from page
        position, include = page[-1].position, False


def _page(s: Session, rewards: Any) -> list[FinalEpisode]:
    if not rewards:
        return []
    ids = [row.episode_id for row in rewards]
    decisions = s.scalars(
        select(DecisionRow).where(DecisionRow.episode_id.in_(ids)).order_by(DecisionRow.seq, DecisionRow.id)
    ).all()
    selections = assemble_selections(s, decisions)
    used = {
        eid: frozenset(u)
        for eid, u in s.execute(select(EpisodeRow.id, EpisodeRow.used_ids).where(EpisodeRow.id.in_(ids)))
        if u is not None
    }
    out = []
    for row in rewards:
        reward = cv.reward_from_row(row)
        out.append(
            FinalEpisode(
                ReadPosition(int(row.commit_seq), row.episode_id),
                tuple(
                    LoggedDecision(sel, reward, used.get(row.episode_id), True, row.episode_id, row.computed_at)
                    for sel in selections.get(row.episode_id, ())
                ),
            )
        )
    return out


def database_tag(tx: Transactions) -> str:
    """A short tag naming the database a position belongs to: on PostgreSQL its oid, name and the
    schema (a restore into a new database gets a new oid, and its transaction ids, which number the
    commit order, start again); on SQLite only the backend, which keeps no identity of its own."""
    if not tx.is_postgres:
        return "sqlite"
    with tx.read() as s:
        oid, name, schema = s.execute(
            text("SELECT oid::text, datname, current_schema() FROM pg_database WHERE datname = current_database()")
        ).one()
    return "pg-" + hashlib.sha256(f"{oid}\x00{name}\x00{schema}".encode()).hexdigest()[:12]


def position_problem(tx: Transactions, position: ReadPosition) -> str | None:
    """Why ``position`` cannot be a place to read on from in this database's commit order
    (``None``: it can be): its episode is here at another place, or the position is past every
    reward made final here (another database). On SQLite, also when its episode is no longer here:
    SQLite keeps no identity of its own, so a deleted episode cannot be told from another log's
    cursor, and before revision 0015 its trigger gave deleted rewards' numbers again (a cursor made
    then may sit past rewards numbered since). On PostgreSQL the numbers are transaction ids, never
    given twice, and the database tag names the database: a deleted episode proves nothing."""
    r = RewardRow
    with tx.read() as s:
        row = s.get(r, position.episode_id)
        if row is not None:
            if not row.final or row.commit_seq != position.seq:
                return f"episode {position.episode_id} is at another place in this database's commit order"
            return None
        if not tx.is_postgres:
            return (
                f"its episode {position.episode_id} is no longer in this log (deleted or erased since, or the "
                "cursor is another database's, which SQLite cannot tell apart)"
            )
        ahead = text("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint")
        if position.seq >= int(s.scalar(ahead) or 0):
            return "it is past every reward this database has made final (another database's cursor?)"
    return None
