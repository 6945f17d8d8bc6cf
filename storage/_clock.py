"""The log's one clock: the database's, for every decision that weighs a time one host wrote against
"now" on another.

Agent workers, the learner and the admin share one PostgreSQL log, and their wall clocks differ by
seconds to minutes (NTP drift) or jump (an NTP step, a VM resumed). A feedback window written from
one host's clock and judged by another's closes early or late by their difference: feedback a user
gave in time is refused as late, or a window is closed before it ends and what comes after it is
lost to the reward. So the deadline is put on the database's clock when an episode is written
(:func:`host_offset`), and feedback, the windows' closing and the deletion audit trail read the
database's clock (:func:`database_now`). On SQLite, a file on one host, the database's clock is
that host's. Durations (latency, commit intervals, retries) use a monotonic clock, never these.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import Connection, text
from sqlalchemy.orm import Session

from memabra._records import utcnow

__all__ = ["SKEW_IGNORED", "database_now", "host_offset"]

# A host clock this close to the database's is taken as right: one round trip to the server can
# take about this long, so a smaller difference is measurement noise, not a skewed clock.
SKEW_IGNORED = timedelta(seconds=1)


def database_now(bind: Connection | Session) -> datetime:
    """The database's time now (UTC, timezone-aware): PostgreSQL's ``clock_timestamp()``; on
    SQLite the one host's clock."""
    dialect = (bind.get_bind() if isinstance(bind, Session) else bind).dialect
    if dialect.name != "postgresql":
        return _sqlite_clock()
    now: datetime = bind.execute(text("SELECT clock_timestamp()")).scalar_one()
    return now.astimezone(UTC)  # a timestamptz: psycopg gives it aware


def host_offset(bind: Connection | Session) -> timedelta:
    """How far the database's clock is ahead of this host's (:func:`memabra._records.utcnow`, what
    records are stamped with): add it to a time stamped here to put it on the database's clock.
    Zero where the two differ by less than :data:`SKEW_IGNORED` plus half the round trip.

    The database's time is read at some instant of the round trip, not at its end: the host's
    clock is read on both sides and the database's is compared with their midpoint. Read only
    after the reply, a stall between the two (a busy server's reply, a thread waiting for the GIL
    in a loaded agent server) read as the host running that much ahead, and moved the deadline
    that much earlier; within half the round trip, a difference is not told from such a stall."""
    before = utcnow()
    at_database = database_now(bind)
    after = utcnow()
    half_trip = (after - before) / 2
    offset = at_database - (before + half_trip)
    return offset if abs(offset) >= SKEW_IGNORED + abs(half_trip) else timedelta(0)


def _sqlite_clock() -> datetime:
    return datetime.now(UTC)
