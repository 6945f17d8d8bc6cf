"""Turns not yet logged, kept in the log so that any process can go on with them: a human
approval may come hours later, through another worker or after a deploy, and a run whose process
died mid-turn may be retried from its checkpoint anywhere.

The row holds the turn as a JSON document (:mod:`memabra._turn_document` writes and reads it;
storage keeps it opaque). It is written when the turn is routed (``paused`` false: running) and
each time it pauses, read by the process that goes on with it, and deleted in the transaction that
logs the turn's episode (:func:`discard_logged`, for an episode whose metadata carries
:data:`PAUSES_KEY`), so a routed turn is either kept or logged, never both and never neither. An
operator abandoning a copy logs it only while the log still holds that copy (:func:`discard_replaced`).
A running row that stays long after it was written lost its process (:data:`RUNNING_TURN_LIMIT`).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Connection, RowMapping, delete, exists, func, literal, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from memabra._errors import InvalidRecordError
from memabra.storage._models import EpisodeRow, SuspendedTurnRow, table_of
from memabra.storage._rows import clean_text
from memabra.storage._tx import Transactions

__all__ = [
    "PAUSES_KEY",
    "RUNNING_TURN_LIMIT",
    "KeptTurnCounts",
    "SuspendedTurn",
    "TurnWentOnError",
    "discard_logged",
    "discard_replaced",
    "erase_user",
    "kept_turn_counts",
    "lost_by",
    "listing",
    "load",
    "lock_episodes",
    "save",
]


PAUSES_KEY = "pauses"
"""Episode metadata: how many times the turn paused, present on an episode whose turn was kept in
the log. Only such an episode's logging looks for a kept row to delete."""

# The advisory-lock class of the per-episode lock below (ASCII "memt"), so its keys meet no other user's.
_TURN_LOCK_CLASS = 0x6D656D74

RUNNING_TURN_LIMIT = timedelta(hours=1)
"""A turn kept running for longer lost its process: an agent server's request times out in
minutes, and a turn waiting on a person is kept as paused, not running."""


@dataclass(frozen=True, slots=True)
class SuspendedTurn:
    """A turn as the log keeps it until its episode is logged; ``document`` is the turn itself,
    in JSON. ``paused``: an interrupt paused it (else it was running when ``suspended_at`` wrote
    it, and one running since before :data:`RUNNING_TURN_LIMIT` lost its process)."""

    turn_id: str
    episode_id: str
    user_id: str
    thread_id: str | None
    suspended_at: datetime
    document: Mapping[str, Any]
    paused: bool = True

    def stale(self, now: datetime) -> bool:
        """Running since longer than :data:`RUNNING_TURN_LIMIT` before ``now``: its process died."""
        return not self.paused and now - self.suspended_at > RUNNING_TURN_LIMIT

    def state(self, now: datetime) -> str:
        """``paused`` (waiting on a person), ``lost`` (its process died mid-turn) or ``running``."""
        if self.paused:
            return "paused"
        return "lost" if self.stale(now) else "running"


class TurnWentOnError(InvalidRecordError):
    """The copy an episode was to replace is no longer the log's: a process went on with the turn
    since the copy was read (it wrote a newer one), or the copy went (its user was erased). Nothing
    was logged. ``now``: the copy the log holds instead, ``None`` where it holds none."""

    def __init__(self, read: SuspendedTurn, now: SuspendedTurn | None) -> None:
        self.turn_id = read.turn_id
        self.read = read
        self.now = now
        was = f"{'paused' if read.paused else 'running'} since {read.suspended_at.isoformat()}"
        if now is None:
            what = "its copy is no longer kept in the log (its user was erased, or its episode deleted, since)"
        else:
            what = f"now {'paused' if now.paused else 'running'} since {now.suspended_at.isoformat()}"
        super().__init__(f"turn {read.turn_id} went on since it was read ({was}): {what}; its episode was not logged")


def lock_episodes(conn: Connection, episode_ids: Sequence[str]) -> None:
    """On PostgreSQL, serialise, per episode, a copy's write with the transaction that logs the
    episode, until ``conn``'s transaction ends. Under READ COMMITTED the copy's ``WHERE NOT
    EXISTS`` reads a snapshot taken as its statement starts: a logging transaction committing
    after that saw no copy to delete (or deleted one the upsert then wrote again), and the copy
    of a logged turn stayed for ever, read as lost an hour later. Taken before either writes, the
    lock makes the later statement see the other's commit. Sorted, so two batches cannot deadlock
    on them. SQLite already runs one writer at a time."""
    if conn.dialect.name != "postgresql":
        return
    keys = sorted({zlib.crc32(clean_text(e).encode()) - 2**31 for e in episode_ids})  # the int4 the lock takes
    for key in keys:
        conn.execute(text("SELECT pg_advisory_xact_lock(:c, :k)"), {"c": _TURN_LOCK_CLASS, "k": key})


def save(tx: Transactions, turn: SuspendedTurn, replacing: SuspendedTurn | None = None) -> bool:
    """Insert the turn, or replace its earlier copy (written when it was routed, or at an earlier
    interrupt: one per approval); nothing where its episode is already logged. Whether it wrote.
    One statement on SQLite, two on PostgreSQL (the episode's lock, :func:`lock_episodes`, first):
    every routed turn pays for it.

    ``replacing``: the copy the caller read and means to replace. Then the write is a
    compare-and-set, made only where the row still holds that copy (same ``suspended_at``, same
    ``paused``): another process may have written a newer one since the read (it resumed the run,
    recorded steps, paused it again), and a blind write would put the older steps back over it.
    Every copy's write stamps ``suspended_at`` afresh, so an unchanged stamp is an unchanged copy."""
    values = _values(turn)
    table = table_of(SuspendedTurnRow)
    # never a copy of a turn whose episode is logged (abandoned by an operator, or finished by a
    # retry elsewhere, while this process still ran it): it would stay unfinished for ever
    unlogged = ~exists().where(EpisodeRow.id == values["episode_id"])
    if replacing is not None:
        return _replace(tx, turn, replacing, values, unlogged)
    row = select(*(literal(value, table.c[name].type).label(name) for name, value in values.items())).where(unlogged)

    def write(conn: Connection) -> bool:
        lock_episodes(conn, [turn.episode_id])
        upsert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
        stmt = upsert(table).from_select(list(values), row)
        replaced = {name: stmt.excluded[name] for name in values if name != "turn_id"}
        upserted = stmt.on_conflict_do_update(index_elements=[table.c.turn_id], set_=replaced)
        # an INSERT's rowcount is kept only when asked: psycopg's reads -1 once the cursor closed,
        # and a first copy skipped for a logged episode would read as written
        return bool(conn.execute(upserted, execution_options={"preserve_rowcount": True}).rowcount)

    return tx.write_connection(write, what="suspend_turn")


def _replace(
    tx: Transactions,
    turn: SuspendedTurn,
    replacing: SuspendedTurn,
    values: dict[str, Any],
    unlogged: ColumnElement[bool],
) -> bool:
    if replacing.turn_id != turn.turn_id:
        raise InvalidRecordError(
            f"a turn's copy replaces a copy of the same turn: {turn.turn_id!r} given to replace {replacing.turn_id!r}"
        )
    if replacing.suspended_at.tzinfo is None:
        raise InvalidRecordError(
            "the replaced SuspendedTurn's suspended_at must be timezone-aware, as read from the log"
        )
    table = table_of(SuspendedTurnRow)
    turn_id = values["turn_id"]
    stmt = (
        update(table)
        .where(table.c.turn_id == turn_id, unlogged)
        .values({name: value for name, value in values.items() if name != "turn_id"})
    )

    def write(conn: Connection) -> bool:
        lock_episodes(conn, [turn.episode_id, replacing.episode_id])
        # FOR UPDATE: PostgreSQL waits for a concurrent write of the row and reads the newer row,
        # which stays as read until this commits; SQLite runs one writer at a time. Compared here,
        # as discard_replaced compares: in SQL, SQLite would compare the stored text, and a copy
        # whose stamp was written in another format (by hand, by another tool) could never be replaced
        row = conn.execute(select(table).where(table.c.turn_id == turn_id).with_for_update()).mappings().first()
        if row is None or (row["suspended_at"], row["paused"]) != (replacing.suspended_at, replacing.paused):
            return False
        return bool(conn.execute(stmt).rowcount)

    return tx.write_connection(write, what="suspend_turn")


def _values(turn: SuspendedTurn) -> dict[str, Any]:
    if turn.suspended_at.tzinfo is None:
        raise InvalidRecordError("SuspendedTurn.suspended_at must be timezone-aware")
    return {
        "turn_id": clean_text(turn.turn_id),
        "episode_id": clean_text(turn.episode_id),
        "user_id": clean_text(turn.user_id),
        "thread_id": None if turn.thread_id is None else clean_text(turn.thread_id),
        "suspended_at": turn.suspended_at,
        "document": dict(turn.document),
        "paused": turn.paused,
    }


def load(tx: Transactions, turn_id: str) -> SuspendedTurn | None:
    with tx.read() as s:
        row = s.get(SuspendedTurnRow, clean_text(turn_id))
        return None if row is None else _record(row)


def listing(
    tx: Transactions, before: datetime | None, limit: int, lost_at: datetime | None = None
) -> list[SuspendedTurn]:
    """Kept turns, paused or running, the oldest copy first (``before``: only those written before
    it; ``lost_at``: only the running ones lost by then, so no paused turn ahead takes their place
    in ``limit``)."""
    stmt = select(SuspendedTurnRow).order_by(SuspendedTurnRow.suspended_at, SuspendedTurnRow.turn_id).limit(limit)
    if before is not None:
        stmt = stmt.where(SuspendedTurnRow.suspended_at < before)
    if lost_at is not None:
        stmt = stmt.where(*lost_by(lost_at))
    with tx.read() as s:
        return [_record(r) for r in s.scalars(stmt)]


def _record(row: SuspendedTurnRow) -> SuspendedTurn:
    return SuspendedTurn(
        row.turn_id, row.episode_id, row.user_id, row.thread_id, row.suspended_at, row.document, row.paused
    )


def discard_logged(conn: Connection, episode_ids: Sequence[str]) -> None:
    """Inside the transaction that logs these episodes: their turns are no longer suspended."""
    table = table_of(SuspendedTurnRow)
    conn.execute(delete(table).where(table.c.episode_id.in_([clean_text(e) for e in episode_ids])))


def discard_replaced(conn: Connection, turns: Sequence[SuspendedTurn]) -> None:
    """Inside the transaction that logs these turns' episodes, after their :func:`lock_episodes`:
    delete each copy only where the log still holds it as read (same ``suspended_at`` and
    ``paused``, as :func:`save`'s ``replacing`` compares), else raise :class:`TurnWentOnError`
    and the transaction logs nothing. An operator abandons the copy it listed: a retry that went on
    with the turn since wrote a newer one, and the run it belongs to is not failed, nor its copy
    to be deleted under it."""
    table = table_of(SuspendedTurnRow)
    for turn in turns:
        turn_id = clean_text(turn.turn_id)
        # FOR UPDATE: PostgreSQL waits for a concurrent write of the row and reads the newer row,
        # which stays as read until this commits; SQLite runs one writer at a time. Compared here,
        # not in the DELETE's WHERE: SQLite compares the stored text, so a stamp written in another
        # format (by hand, by another tool) would never match and the turn could never be abandoned
        row = conn.execute(select(table).where(table.c.turn_id == turn_id).with_for_update()).mappings().first()
        now = None if row is None else _record_of(row)
        read = (clean_text(turn.episode_id), turn.suspended_at, turn.paused)
        if now is None or (now.episode_id, now.suspended_at, now.paused) != read:
            raise TurnWentOnError(turn, now)
        conn.execute(delete(table).where(table.c.turn_id == turn_id))


def _record_of(row: RowMapping) -> SuspendedTurn:
    return SuspendedTurn(
        row["turn_id"],
        row["episode_id"],
        row["user_id"],
        row["thread_id"],
        row["suspended_at"],
        row["document"],
        row["paused"],
    )


def erase_user(s: Session, user_id: str) -> int:
    """Delete the user's kept turns (their text is the user's); returns how many."""
    result = s.execute(delete(SuspendedTurnRow).where(SuspendedTurnRow.user_id == clean_text(user_id)))
    return int(getattr(result, "rowcount", 0) or 0)


@dataclass(frozen=True, slots=True)
class KeptTurnCounts:
    """The unfinished turns' header: ``paused`` turns waiting on a person (``paused_since``: the
    oldest pause) and ``lost`` ones, running past ``RUNNING_TURN_LIMIT`` (``lost_since``: the
    oldest), as :class:`~memabra.storage.LogStatus` counts them."""

    paused: int
    paused_since: datetime | None
    lost: int
    lost_since: datetime | None


def kept_turn_counts(s: Session, now: datetime) -> KeptTurnCounts:
    """How many turns are paused and how many lost at ``now``, each with its oldest: the two
    aggregates of the log's status the unfinished turns page shows, read alone (the whole status
    counts every episode, for a header)."""
    if now.tzinfo is None:
        raise InvalidRecordError(f"now must be timezone-aware, got the naive datetime {now.isoformat()}")
    t = SuspendedTurnRow
    kept = select(func.count(), func.min(t.suspended_at))
    paused, paused_since = s.execute(kept.where(t.paused.is_(True))).one()
    lost, lost_since = s.execute(kept.where(*lost_by(now))).one()
    return KeptTurnCounts(int(paused), paused_since, int(lost), lost_since)


def lost_by(at: datetime) -> list[Any]:
    """A running turn kept past RUNNING_TURN_LIMIT at ``at``: its process died mid-turn."""
    t = SuspendedTurnRow
    return [t.paused.is_(False), t.suspended_at < at - RUNNING_TURN_LIMIT]
