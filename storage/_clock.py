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
    Zero where the two differ by less than :data:`SKEW_IGNORED`."""
    offset = database_now(bind) - utcnow()
    return offset if abs(offset) >= SKEW_IGNORED else timedelta(0)


def _sqlite_clock() -> datetime:
    return datetime.now(UTC)
