"""Indexes a migration adds to a table that may already be large, built before the migration on
PostgreSQL with ``CREATE INDEX CONCURRENTLY``.

The schema upgrade runs in one transaction under the migration lock, and ``CONCURRENTLY`` cannot
run in a transaction: built there, a plain ``CREATE INDEX`` holds a SHARE lock on the table for the
whole build, and every serving process's writes to it wait that long. A migration that names such
an index in ``ONLINE_INDEXES`` gets it built here first, outside the transaction, while writes go
on; the migration itself then finds it and builds nothing. A concurrent build that died part way
leaves an invalid index behind: it is dropped and built again. SQLite has one writer at a time and
builds in the migration as before.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from alembic.runtime.migration import MigrationContext
from alembic.script import Script, ScriptDirectory
from alembic.script.revision import RevisionError
from sqlalchemy import Connection, Engine, inspect, text

__all__ = ["OnlineIndex", "build_online_indexes", "has_index"]

_log = logging.getLogger("memabra")

# How often a deploy job that finds another upgrade holding the migration lock tries again (the
# first pause; doubled up to the second).
_LOCK_RETRY_S = (0.05, 0.5)


@dataclass(frozen=True, slots=True)
class OnlineIndex:
    """An index a migration declares (``ONLINE_INDEXES = (OnlineIndex(...),)``) and creates itself
    only when :func:`has_index` says it is not there yet."""

    name: str
    table: str
    columns: tuple[str, ...]


def has_index(connection: Connection, table: str, name: str) -> bool:
    """Whether ``table`` already has an index called ``name`` (a migration's guard)."""
    return any(ix["name"] == name for ix in inspect(connection).get_indexes(table))


def build_online_indexes(
    engine: Engine, script: ScriptDirectory, lock_key: Callable[[Connection], int], target: str
) -> list[str]:
    """Build, concurrently, the online indexes of every migration between the database's revision
    and ``target`` whose table exists; returns the names built. Only on PostgreSQL; the caller
    runs the migrations afterwards."""
    built: list[str] = []
    # the lock is held by a transaction of its own (READ COMMITTED: no snapshot between
    # statements) on a second connection, not by the session that builds: the builds cannot run in
    # a transaction, and a transaction-pooling PgBouncer gives each statement outside one whichever
    # server connection is free, so a session-level lock could be taken on one server connection
    # and never released on another
    with (
        engine.connect().execution_options(isolation_level="READ COMMITTED") as holder,
        engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection,
    ):
        # the deploy jobs that queue for the migration queue here too: one builds, the rest find it
        _lock(holder, lock_key(holder))
        try:
            current = MigrationContext.configure(connection).get_current_revision()
            if current is None:  # a new database: the migrations create the tables with their indexes
                return built
            tables = set(inspect(connection).get_table_names())
            for index in _pending(script, current, target):
                if index.table in tables and _build(connection, index):
                    built.append(index.name)
        finally:
            holder.rollback()  # ends the lock's transaction, and with it the lock
    return built


def _lock(holder: Connection, key: int) -> None:
    """Take the migration lock in ``holder``'s transaction, left open (it holds the lock), waiting
    for it between short tries rather than in one blocking ``pg_advisory_xact_lock``: a statement
    blocked on the lock holds its snapshot for as long as it waits, and the holder's ``CREATE INDEX
    CONCURRENTLY`` waits for every older snapshot to end before it finishes, so two upgrades started
    together deadlocked and one of them failed. Between tries the transaction is rolled back: this
    connection holds no snapshot then; and the holder's transaction, idle in READ COMMITTED, holds
    none (``CONCURRENTLY`` does not wait for it)."""
    pause, longest = _LOCK_RETRY_S
    said = False
    # the key written into the statement: one run with parameters keeps its snapshot until the next
    while not holder.execute(text(f"SELECT pg_try_advisory_xact_lock({int(key)})")).scalar():
        holder.rollback()
        if not said:
            _log.info("waiting for another schema upgrade of this database to finish")
            said = True
        time.sleep(pause)
        pause = min(pause * 2, longest)


def _pending(script: ScriptDirectory, current: str, target: str) -> Iterator[OnlineIndex]:
    try:
        revisions: Sequence[Script | None] = list(script.iterate_revisions(target, current))
    except RevisionError:  # a revision this memabra does not know: the migration names the problem
        return
    for revision in reversed(revisions):  # oldest first, the order the migrations run in
        if revision is not None:
            yield from getattr(revision.module, "ONLINE_INDEXES", ())


def _build(connection: Connection, index: OnlineIndex) -> bool:
    valid = connection.execute(
        text("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(:name)"), {"name": index.name}
    ).scalar()
    if valid:
        return False
    quoted = connection.dialect.identifier_preparer.quote
    if valid is not None:
        _log.warning("index %s was left invalid by a build that stopped part way; building it again", index.name)
        connection.execute(text(f"DROP INDEX CONCURRENTLY IF EXISTS {quoted(index.name)}"))
    columns = ", ".join(quoted(c) for c in index.columns)
    _log.info("building index %s on %s concurrently; writes to it go on meanwhile", index.name, index.table)
    connection.execute(text(f"CREATE INDEX CONCURRENTLY {quoted(index.name)} ON {quoted(index.table)} ({columns})"))
    return True
