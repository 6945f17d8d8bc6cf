"""Transactions of the episode log: reads, and writes that survive contention.

A write runs a function inside one transaction and is retried, from the start, when the database
answers with a transient conflict: a PostgreSQL deadlock (``40P01``) or serialisation failure
(``40001``), or SQLite's ``database is locked`` after its busy timeout. The retries are bounded;
when they run out the caller gets :class:`~memabra._errors.StorageContentionError`, never a raw
driver error. A write function must therefore only touch the database and its own locals.

On SQLite a write transaction starts with ``BEGIN IMMEDIATE``: it takes the write lock up front,
waiting up to the busy timeout for it, instead of failing on the read-to-write lock upgrade that a
deferred ``BEGIN`` meets when another process wrote in between. Reads stay deferred, so in WAL mode
they never wait on writers.

A write whose PostgreSQL connection is lost before its ``COMMIT`` is sent (the server restarted,
``pg_terminate_backend``, a proxy closed it) is retried the same way on a new connection: the
server rolled that transaction back. One lost while committing may or may not have committed, so it
is not retried: the caller gets :class:`~memabra.storage.DatabaseUnavailableError` saying so, as it
does when no new connection can be opened.

A write the database refuses whatever is retried (a full disk, a read-only SQLite file, a PostgreSQL
hot standby) is tried once more on a new connection, then raised as
:class:`~memabra.storage.DatabaseNotWritableError` saying what to do (see ``_refusals``). A statement
PostgreSQL cancels (``statement_timeout``, ``lock_timeout``) is not retried: it is raised as
:class:`~memabra.storage.DatabaseTimeoutError`, which says whether the write may have committed
(see ``_timeouts``).

A call made of several write transactions (feedback stored, then the memory it retracts retired;
an admin form's change, then its audit) runs inside :func:`one_call`: where a later transaction
cannot even open its connection, the error's ``may_have_written`` is false for that transaction
alone, and the call's earlier commits stand. Inside ``one_call`` it is set true once a write of the
call committed, so that nobody is told "not saved" and sends again what is stored.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine
from sqlalchemy.orm import Session

from memabra._errors import StorageContentionError
from memabra.storage._engine import DatabaseUnavailableError, unreachable
from memabra.storage._refusals import not_writable, watch_refusals
from memabra.storage._timeouts import timed_out, watch_timeouts

__all__ = ["WRITE_OPTION", "Transactions", "is_duplicate_key", "is_transient", "one_call"]

logger = logging.getLogger("memabra")

T = TypeVar("T")

WRITE_OPTION = "memabra_write"
"""Execution option marking a write transaction (``BEGIN IMMEDIATE`` on SQLite)."""

# Attempts before a conflicting write gives up: a deadlock victim or a locked SQLite file
# normally succeeds on the second try; eight covers bursts without hiding a stuck database.
MAX_ATTEMPTS = 8
# First back-off; doubled per attempt with full jitter, so colliding writers spread out.
BASE_BACKOFF_S = 0.02
_PG_RETRYABLE = frozenset({"40001", "40P01"})  # serialization_failure, deadlock_detected

# the write transactions committed so far by the call one_call marks (None outside one)
_COMMITTED: ContextVar[list[int] | None] = ContextVar("memabra_committed", default=None)


@contextmanager
def one_call() -> Iterator[None]:
    """Marks one call of several write transactions (see the module's docstring): a
    :class:`~memabra.storage.DatabaseUnavailableError` leaving it says ``may_have_written`` once
    one of them committed. Nested, the outermost counts. Context variables carry it to the worker
    threads of ``asyncio.to_thread``, Starlette's ``run_in_threadpool`` and ``run_whole``."""
    if _COMMITTED.get() is not None:
        yield
        return
    committed = [0]
    token = _COMMITTED.set(committed)
    try:
        yield
    except DatabaseUnavailableError as exc:
        if committed[0]:
            exc.may_have_written = True  # an earlier transaction of the call is stored
        raise
    finally:
        _COMMITTED.reset(token)


def _count_commit() -> None:
    committed = _COMMITTED.get()
    if committed is not None:
        committed[0] += 1


def is_transient(exc: BaseException) -> bool:
    """Whether a driver error is a conflict that a retry of the whole transaction resolves."""
    orig = getattr(exc, "orig", None) or exc
    state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if state in _PG_RETRYABLE:
        return True
    text = str(orig).lower()
    # "database table is locked": a shared-cache in-memory database's table lock, which SQLite
    # answers at once, never waiting the busy timeout (another engine of the process writing it)
    busy = ("database is locked", "database is busy", "database table is locked")
    return type(orig).__name__ == "OperationalError" and any(words in text for words in busy)


class Transactions:
    """Read sessions and retried write transactions over one engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        watch_refusals(engine)  # an engine not made by make_engine too
        watch_timeouts(engine)
        self._writer = engine.execution_options(**{WRITE_OPTION: True})

    @property
    def is_postgres(self) -> bool:
        return self.engine.dialect.name == "postgresql"

    @contextmanager
    def read(self) -> Iterator[Session]:
        """A session for reading (its transaction is rolled back or committed with nothing to do)."""
        with Session(self.engine, expire_on_commit=False) as session, session.begin():
            yield session

    def write(self, work: Callable[[Session], T], *, what: str = "write") -> T:
        """Run ``work`` in one write transaction, retried on transient conflicts."""

        def attempt(committing: list[bool]) -> T:
            with Session(self._writer, expire_on_commit=False) as session, session.begin():
                result = work(session)
                session.flush()
                committing.append(True)
            return result

        return self._retrying(attempt, what)

    def write_connection(self, work: Callable[[Connection], T], *, what: str = "write") -> T:
        """Like :meth:`write`, on a Core connection (bulk inserts, COPY)."""

        def attempt(committing: list[bool]) -> T:
            with self._writer.begin() as connection:
                result = work(connection)
                committing.append(True)
            return result

        return self._retrying(attempt, what)

    def _retrying(self, attempt: Callable[[list[bool]], T], what: str) -> T:
        last: BaseException | None = None
        for n in range(MAX_ATTEMPTS):
            committing: list[bool] = []  # set once the work ran and COMMIT is on its way
            try:
                result = attempt(committing)
            except Exception as exc:  # SQLAlchemy-wrapped or, from a raw COPY cursor, the driver's own
                lost = bool(getattr(exc, "connection_invalidated", False))
                if lost and committing:
                    # first, whatever the driver said as the connection went: the COMMIT may have
                    # landed, and no retry may make the write twice
                    raise unreachable(
                        self.engine, exc, f"finish the {what} on", "; it may or may not have committed"
                    ) from exc
                cancelled = timed_out(self.engine.url, exc, what, committing=bool(committing))
                if cancelled is not None:
                    raise cancelled from exc  # a retry waits the operator's bound again
                refused = not_writable(self.engine, exc, what)
                if refused is not None:
                    if n > 0:
                        raise refused from exc  # a full disk or a standby: more retries would meet it again
                    # once more, on a connection opened now: one opened before the cause went away
                    # (on the standby, on the file while it was read-only) refuses what a new one takes;
                    # the database answered, so the transaction was rolled back, COMMIT or not
                    last = refused
                    continue
                if lost:
                    pass  # the server rolled the transaction back with the connection: run it again
                elif not is_transient(exc):
                    raise
                last = exc
                delay = random.uniform(0, BASE_BACKOFF_S * 2**n)
                logger.info(
                    "%s met a transient conflict (attempt %d of %d), retrying in %.3fs: %s",
                    what,
                    n + 1,
                    MAX_ATTEMPTS,
                    delay,
                    _short(exc),
                )
                time.sleep(delay)
                continue
            _count_commit()
            return result
        raise StorageContentionError(
            f"{what} kept conflicting with other writers after {MAX_ATTEMPTS} attempts ({_short(last)}); "
            "on SQLite this is the point to move to PostgreSQL"
        ) from last


def is_duplicate_key(exc: BaseException) -> bool:
    """Whether a driver error is a primary-key or unique violation."""
    orig = getattr(exc, "orig", None) or exc
    if getattr(orig, "sqlstate", None) == "23505":
        return True
    return type(orig).__name__ == "IntegrityError" and "UNIQUE constraint failed" in str(orig)


def _short(exc: Any) -> str:
    orig = getattr(exc, "orig", None) or exc
    return str(orig).splitlines()[0] if str(orig) else type(orig).__name__
