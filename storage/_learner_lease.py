"""The learner lease: the right to learn for one policy, held by at most one process."""

from __future__ import annotations

import hashlib
import logging
import uuid
import weakref
from datetime import timedelta

from sqlalchemy import Connection, Engine, TextClause, insert, or_, text, update
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

from memabra._records import utcnow
from memabra.storage._engine import is_postgres
from memabra.storage._learner_models import LearnerLeaseRow
from memabra.storage._models import table_of

__all__ = ["SQLITE_LEASE_TTL", "LearnerLease", "lease_key"]

logger = logging.getLogger("memabra")


def _try_xact_lock(key: int) -> TextClause:
    # the key written into the statement, not bound: a statement run with parameters leaves its
    # snapshot (the server's backend_xmin) in place until the next statement, which an idle lease
    # transaction would hold for as long as it is held, holding back vacuum on every table
    return text(f"SELECT pg_try_advisory_xact_lock({int(key)})")


def _holder_name(policy: str) -> str:
    """The lease transaction's application_name: printable ASCII without quotes (written into the
    statement, as :func:`_try_xact_lock` writes its key), within PostgreSQL's 63 bytes."""
    safe = "".join(c if c.isascii() and c.isprintable() and c not in "'\\" else "?" for c in policy)
    return f"memabra learner {safe}"[:63]


# How long a SQLite lease outlives its last renewal: a killed holder's standby waits this long.
SQLITE_LEASE_TTL = timedelta(seconds=10)


class LearnerLease:
    """The right to learn for one policy, held by at most one process.

    PostgreSQL: a transaction-level advisory lock, keyed by the schema and the policy (tests share
    one database in many schemas), in a transaction this object keeps open on a connection of its
    own; it is released when the holder ends the transaction, closes the connection or dies. Not a
    session-level lock: a transaction-pooling PgBouncer hands a session's server connection to
    other clients between transactions, and they would find the lock theirs (two learners "holding"
    it) or unlock it; an open transaction keeps its server connection for exactly as long as the
    lease is held. The transaction is READ COMMITTED and idle between renewals, so it holds no
    snapshot (``backend_xmin`` is null: vacuum is not held back) and no row or table lock. A
    server's ``idle_in_transaction_session_timeout`` shorter than the time between renewals ends
    it: the next :meth:`renew` finds the connection gone and returns ``False``. SQLite: a row in ``learner_leases`` renewed by :meth:`renew`; a dead
    holder's lease expires after :data:`SQLITE_LEASE_TTL`.
    """

    def __init__(self, engine: Engine, policy: str, *, ttl: timedelta = SQLITE_LEASE_TTL) -> None:
        self._engine = engine
        self.policy = policy
        self.ttl = ttl
        self.holder = uuid.uuid4().hex
        self._conn: Connection | None = None
        self._lock_key = 0
        self._tried_key: int | None = None  # the key the last try on PostgreSQL asked for
        self._finalizer: weakref.finalize[[], LearnerLease] | None = None
        self._held = False

    @property
    def held(self) -> bool:
        return self._held

    def keeps_out(self, other: LearnerLease) -> bool:
        """Whether this lease, held, is the one ``other`` last failed to take: the same policy and,
        on PostgreSQL, the same lock (schema and policy: two logs on one URL may set two
        search_paths). Whether both are on one database is the caller's to judge."""
        if not self._held or other.policy != self.policy:
            return False
        return self._conn is None or other._tried_key == self._lock_key

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
                # in the lease's own transaction, which already holds the lock: true unless that
                # transaction is no longer the one this connection runs
                self._held = bool(self._conn.execute(_try_xact_lock(self._lock_key)).scalar_one())
                if not self._held:
                    self._drop_connection()
            else:
                self._held = self._claim_row()
        except DBAPIError as exc:
            # the server or a pooler ended the session (a restart, idle_in_transaction_session_timeout,
            # pg_terminate_backend): the lock went with it, and another learner may hold it now
            logger.warning("learner lease for %s lost (%s)", self.policy, _first_line(exc))
            self._drop_connection()
            self._held = False
        return self._held

    def release(self) -> None:
        if not self._held:
            return
        self._held = False
        if self._conn is not None:
            try:
                self._conn.rollback()  # ends the transaction, and with it the lock
            except DBAPIError:
                logger.debug("ending the learner lease transaction of %s failed", self.policy, exc_info=True)
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
        # READ COMMITTED whatever the engine's default: a statement's snapshot ends with it, so the
        # transaction left open holds none
        conn = self._engine.connect().execution_options(isolation_level="READ COMMITTED")
        try:
            key = self._tried_key = self._key(conn)
            got = bool(conn.execute(_try_xact_lock(key)).scalar_one())
            if not got:
                conn.rollback()
        except Exception:
            conn.close()
            raise
        if got:
            # the transaction stays open: it is what holds the lock. Named in pg_stat_activity for
            # as long as it is (a pooler's server connection otherwise shows its last client's name)
            conn.execute(text(f"SET LOCAL application_name = '{_holder_name(self.policy)}'"))
            self._conn = conn
            self._lock_key = key
            # A lease dropped without release() (a session nobody closed) still closes its
            # connection, which rolls the transaction back and frees the lock.
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


def _first_line(exc: BaseException) -> str:
    text_ = str(getattr(exc, "orig", None) or exc).strip()
    return text_.splitlines()[0] if text_ else type(exc).__name__
