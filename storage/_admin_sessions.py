"""Server-side revocation of admin sessions, shared by every process that serves the admin view.

The admin's session cookie is signed, not stored, so logging out has to be remembered somewhere
every worker reads: this table holds the id of each session ended before its cookie expired,
until that expiry (after which the signature check refuses the cookie anyway and the row is
pruned).
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import delete, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from memabra._errors import InvalidRecordError
from memabra.storage._engine import is_postgres
from memabra.storage._log import EpisodeLog
from memabra.storage._models import RevokedSessionRow

__all__ = ["RevokedSessions"]

# Session ids are the admin's own random tokens (22 characters); anything longer is not one.
_MAX_SESSION_ID = 64


class RevokedSessions:
    """Which admin sessions were ended by logout, in the episode log's database."""

    def __init__(self, log: EpisodeLog) -> None:
        self._engine = log.engine

    def revoke(self, session_id: str, expires_at: datetime, *, now: datetime | None = None) -> None:
        """Remember ``session_id`` as ended until ``expires_at``; prunes rows already expired."""
        _check_id(session_id)
        if expires_at.tzinfo is None:
            raise InvalidRecordError("expires_at must be timezone-aware")
        at = now or datetime.now(UTC)
        values = {"session_id": session_id, "revoked_at": at, "expires_at": expires_at}
        insert = pg_insert if is_postgres(self._engine) else sqlite_insert
        statement = insert(RevokedSessionRow).values(**values).on_conflict_do_nothing(index_elements=["session_id"])
        with Session(self._engine) as s, s.begin():
            s.execute(delete(RevokedSessionRow).where(RevokedSessionRow.expires_at <= at))
            s.execute(statement)

    def is_revoked(self, session_id: str) -> bool:
        _check_id(session_id)
        with Session(self._engine) as s:
            found = s.execute(select(RevokedSessionRow.session_id).where(RevokedSessionRow.session_id == session_id))
            return found.first() is not None


def _check_id(session_id: str) -> None:
    if not isinstance(session_id, str) or not session_id or len(session_id) > _MAX_SESSION_ID:
        raise InvalidRecordError(f"an admin session id is a text of 1 to {_MAX_SESSION_ID} characters")
