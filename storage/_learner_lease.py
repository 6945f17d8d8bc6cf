"""The learner lease: the right to learn for one policy, held by at most one process."""

from __future__ import annotations

import hashlib
import logging
import uuid
import weakref
from datetime import timedelta

from sqlalchemy import Connection, Engine, insert, or_, text, update
from sqlalchemy.exc import IntegrityError, OperationalError

from memabra._records import utcnow
from memabra.storage._engine import is_postgres
from memabra.storage._learner_models import LearnerLeaseRow
from memabra.storage._models import table_of

__all__ = ["SQLITE_LEASE_TTL", "LearnerLease", "lease_key"]

logger = logging.getLogger("memabra")

# How long a SQLite lease outlives its last renewal: a killed holder's standby waits this long.
SQLITE_LEASE_TTL = timedelta(seconds=10)


class LearnerLease:
    """The right to learn for one policy, held by at most one process.

    PostgreSQL: a session-level advisory lock on a connection this object keeps open, keyed by the
    schema and the policy (tests share one database in many schemas); it is released when the
    holder closes it or dies. SQLite: a row in ``learner_leases`` renewed by :meth:`renew`; a dead
    holder's lease expires after :data:`SQLITE_LEASE_TTL`.
    """

    def __init__(self, engine: Engine, policy: str, *, ttl: timedelta = SQLITE_LEASE_TTL) -> None:
        self._engine = engine
        self.policy = policy
        self.ttl = ttl
        self.holder = uuid.uuid4().hex
        self._conn: Connection | None = None
        self._finalizer: weakref.finalize[[], LearnerLease] | None = None
        self._held = False

    @property
    def held(self) -> bool:
        return self._held

    def acquire(self) -> bool:
        """Take the lease if it is free (never blocks); ``True`` if this process holds it now."""
        if self._held:
            return self.renew()
        if is_postgres(self._engine):
            self._held = self._acquire_advisory()
        else:
            self._held = self._claim_row()
        return self._held

    def renew(self) -> bool:
        """Confirm (PostgreSQL) or extend (SQLite) the lease; ``False`` if it was lost."""
        if not self._held:
            return False
        try:
            if self._conn is not None:
                self._conn.execute(text("SELECT 1"))
                self._conn.commit()
            else:
                self._held = self._claim_row()
        except OperationalError:
            logger.warning("learner lease for %s lost (connection failed)", self.policy)
            self._drop_connection()
            self._held = False
        return self._held

    def release(self) -> None:
        if not self._held:
            return
        self._held = False
        if self._conn is not None:
            try:
                self._conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": self._key(self._conn)})
                self._conn.commit()
            except OperationalError:
                pass
            self._drop_connection()
            return
        try:
            with self._engine.begin() as conn:
                conn.execute(
                    update(LearnerLeaseRow)
                    .where(LearnerLeaseRow.policy == self.policy, LearnerLeaseRow.holder == self.holder)
                    .values(expires_at=utcnow() - timedelta(seconds=1))
                )
        except OperationalError:
            # The database is gone (a deleted test file, a server shut down): the lease expires anyway.
            logger.debug("releasing the learner lease of %s failed", self.policy, exc_info=True)

    def _key(self, conn: Connection) -> int:
        return lease_key(conn, self.policy)

    def _acquire_advisory(self) -> bool:
        conn = self._engine.connect()
        try:
            got = bool(conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": self._key(conn)}).scalar_one())
            conn.commit()
        except Exception:
            conn.close()
            raise
        if got:
            self._conn = conn
            # A lease dropped without release() (a session nobody closed) still closes its
            # connection, which is what frees the advisory lock.
            self._finalizer = weakref.finalize(self, conn.close)
        else:
            conn.close()
        return got

    def _drop_connection(self) -> None:
        if self._conn is not None:
            if self._finalizer is not None:
                self._finalizer.detach()
                self._finalizer = None
            try:
                self._conn.close()
            except Exception:  # noqa: BLE001 - the connection is already broken
                logger.debug("closing a broken lease connection failed", exc_info=True)
            self._conn = None

    def _claim_row(self) -> bool:
        now = utcnow()
        lease = LearnerLeaseRow
        with self._engine.begin() as conn:
            taken = conn.execute(
                update(lease)
                .where(lease.policy == self.policy, or_(lease.holder == self.holder, lease.expires_at < now))
                .values(holder=self.holder, expires_at=now + self.ttl)
            )
            if taken.rowcount == 1:
                return True
        try:
            with self._engine.begin() as conn:
                conn.execute(
                    insert(table_of(lease)),
                    [{"policy": self.policy, "holder": self.holder, "expires_at": now + self.ttl}],
                )
            return True
        except IntegrityError:
            return False


def lease_key(conn: Connection, policy: str) -> int:
    """The PostgreSQL advisory-lock key of ``policy``'s learner lease (schema and policy)."""
    schema = conn.execute(text("SELECT current_schema()")).scalar_one()
    digest = hashlib.blake2b(f"memabra-learner:{schema}:{policy}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)
