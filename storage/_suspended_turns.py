"""Turns paused by a LangGraph ``interrupt``, kept in the log so that any process can go on with
them: a human approval may come hours later, through another worker or after a deploy.

The row holds the turn as a JSON document (:mod:`memabra._turn_document` writes and reads it;
storage keeps it opaque). It is written each time the turn pauses, read by the process that
resumes it, and deleted in the transaction that logs the turn's episode (:func:`discard_logged`,
for an episode whose metadata counts its pauses), so a turn is either suspended or logged, never
both and never neither.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, delete, select
from sqlalchemy.orm import Session

from memabra._errors import InvalidRecordError
from memabra.storage._models import SuspendedTurnRow, table_of
from memabra.storage._rows import clean_text
from memabra.storage._tx import Transactions

__all__ = ["PAUSES_KEY", "SuspendedTurn", "discard_logged", "erase_user", "listing", "load", "save"]


PAUSES_KEY = "pauses"
"""Episode metadata: how many times the turn paused. Only such an episode's logging looks for a
suspended row to delete."""


@dataclass(frozen=True, slots=True)
class SuspendedTurn:
    """A paused turn as the log keeps it; ``document`` is the turn itself, in JSON."""

    turn_id: str
    episode_id: str
    user_id: str
    thread_id: str | None
    suspended_at: datetime
    document: Mapping[str, Any]


def save(tx: Transactions, turn: SuspendedTurn) -> None:
    """Insert the paused turn, or replace it where it paused before (an interrupt per approval)."""
    if turn.suspended_at.tzinfo is None:
        raise InvalidRecordError("SuspendedTurn.suspended_at must be timezone-aware")
    row = SuspendedTurnRow(
        turn_id=clean_text(turn.turn_id),
        episode_id=clean_text(turn.episode_id),
        user_id=clean_text(turn.user_id),
        thread_id=None if turn.thread_id is None else clean_text(turn.thread_id),
        suspended_at=turn.suspended_at,
        document=dict(turn.document),
    )

    def write(s: Session) -> None:
        s.merge(row)

    tx.write(write, what="suspend_turn")


def load(tx: Transactions, turn_id: str) -> SuspendedTurn | None:
    with tx.read() as s:
        row = s.get(SuspendedTurnRow, clean_text(turn_id))
        return None if row is None else _record(row)


def listing(tx: Transactions, before: datetime | None, limit: int) -> list[SuspendedTurn]:
    """Paused turns, the oldest pause first (``before``: only those paused before it)."""
    stmt = select(SuspendedTurnRow).order_by(SuspendedTurnRow.suspended_at, SuspendedTurnRow.turn_id).limit(limit)
    if before is not None:
        stmt = stmt.where(SuspendedTurnRow.suspended_at < before)
    with tx.read() as s:
        return [_record(r) for r in s.scalars(stmt)]


def _record(row: SuspendedTurnRow) -> SuspendedTurn:
    return SuspendedTurn(row.turn_id, row.episode_id, row.user_id, row.thread_id, row.suspended_at, row.document)


def discard_logged(conn: Connection, episode_ids: Sequence[str]) -> None:
    """Inside the transaction that logs these episodes: their turns are no longer suspended."""
    table = table_of(SuspendedTurnRow)
    conn.execute(delete(table).where(table.c.episode_id.in_([clean_text(e) for e in episode_ids])))


def erase_user(s: Session, user_id: str) -> int:
    """Delete the user's paused turns (their text is the user's); returns how many."""
    result = s.execute(delete(SuspendedTurnRow).where(SuspendedTurnRow.user_id == clean_text(user_id)))
    return int(getattr(result, "rowcount", 0) or 0)
