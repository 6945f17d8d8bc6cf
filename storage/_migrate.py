"""Schema migrations (Alembic, shipped in the wheel) and the schema-version guard."""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from functools import lru_cache
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import OperationalError

from memabra._errors import SchemaError, StorageContentionError
from memabra.storage._engine import is_postgres, make_engine, resolve_url, shown_url
from memabra.storage._online_index import build_online_indexes
from memabra.storage._schema_compat import read_marker
from memabra.storage._sqlite import in_memory
from memabra.storage._tx import WRITE_OPTION, is_transient

logger = logging.getLogger("memabra")

_MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def alembic_config(url: str | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS))
    # '%' is Alembic's interpolation character; URL-encoded passwords contain it.
    config.set_main_option("sqlalchemy.url", resolve_url(url).replace("%", "%%"))
    return config


def _scripts() -> ScriptDirectory:
    """The migrations this memabra ships (read from the package; no database involved)."""
    return ScriptDirectory.from_config(alembic_config("sqlite://"))


@lru_cache(maxsize=1)
def head_revision() -> str:
    head = _scripts().get_current_head()
    if head is None:  # pragma: no cover - the wheel always ships migrations
        raise SchemaError("no migrations shipped with memabra")
    return head


def known_revisions() -> frozenset[str]:
    """Every schema revision this memabra ships (a database at any other one is newer)."""
    script = _scripts()
    return frozenset(rev.revision for rev in script.walk_revisions())


PG_LOCK_TIMEOUT_MS = 2_000
"""PostgreSQL: how long one statement of a migration waits for a table lock. A statement waiting
for an exclusive lock heads the table's lock queue, and every later read of that table (serving
processes polling ``policy_snapshots``) queues behind it: a bounded wait keeps a transaction left
open somewhere from stalling them all for as long as it stays open."""

PG_LOCK_ATTEMPTS = 5
"""PostgreSQL: tries of a migration (each rolled back whole when it times out) before giving up."""

_PG_LOCK_NOT_AVAILABLE = "55P03"

# How often an upgrade that finds another one holding the migration lock tries again (the first
# pause; doubled up to the second).
_MIGRATION_LOCK_RETRY_S = (0.05, 0.5)


# Alembic's command API runs a migration through module globals (the `context` proxy env.py reads,
# and `op`), so two threads migrating two databases at once ran each other's steps on the wrong
# connection, or failed with KeyError('config'), whatever the database. Taken after the database's
# own migration lock, so that a thread waiting for another process's upgrade of one database does
# not hold up this process's upgrades of others.
_ALEMBIC = threading.Lock()


class _LockBusy(Exception):
    """Another upgrade holds the migration lock: roll back and try again."""


def _run(engine: Engine, action: str, revision: str) -> None:
    """Run one Alembic command in one transaction that first takes the database's migration lock:
    processes that all find a new database (or all run ``db upgrade`` at a deploy) then queue, and
    each finds the schema where the one before left it instead of creating the same tables again.
    On PostgreSQL a statement waits at most :data:`PG_LOCK_TIMEOUT_MS` for a table lock; the whole
    transaction is then rolled back (DDL is transactional there) and tried again, up to
    :data:`PG_LOCK_ATTEMPTS` times, then :class:`StorageContentionError`: nothing was changed.
    Threads of one process run Alembic one at a time (:data:`_ALEMBIC`), so each may migrate its own
    database at once."""
    config = alembic_config(engine.url.render_as_string(hide_password=False))
    where = shown_url(engine.url)
    attempts = PG_LOCK_ATTEMPTS if is_postgres(engine) else 1
    attempt = 1
    pause, longest = _MIGRATION_LOCK_RETRY_S
    said = False
    while attempt <= attempts:
        try:
            # WRITE_OPTION makes SQLite begin with BEGIN IMMEDIATE: the write lock, waited for up to
            # the busy timeout, before Alembic reads the current revision.
            with engine.execution_options(**{WRITE_OPTION: True}).begin() as connection:
                if is_postgres(engine):
                    # tried, not waited for in the transaction: a transaction waiting holds its
                    # server connection, and behind a transaction-pooling PgBouncer the upgrade
                    # holding the lock can need one more connection than the pool has left
                    key = int(_migration_key(connection))
                    if not connection.execute(text(f"SELECT pg_try_advisory_xact_lock({key})")).scalar():
                        raise _LockBusy
                    # after the migration lock, which waits for another `db upgrade` as long as it runs
                    connection.execute(text(f"SET LOCAL lock_timeout = {int(PG_LOCK_TIMEOUT_MS)}"))
                config.attributes["connection"] = connection
                with _ALEMBIC:
                    getattr(command, action)(config, revision)
            return
        except _LockBusy:
            if not said:
                logger.info("waiting for another schema upgrade of this database to finish")
                said = True
            time.sleep(pause)
            pause = min(pause * 2, longest)
            continue
        except OperationalError as exc:
            if _lock_timed_out(exc):
                if attempt < attempts:
                    logger.warning(
                        "the schema %s of %s waited %d ms for a table lock (try %d of %d); trying again",
                        action,
                        where,
                        PG_LOCK_TIMEOUT_MS,
                        attempt,
                        attempts,
                    )
                    time.sleep(min(5.0, 0.5 * attempt))
                    attempt += 1
                    continue
                raise StorageContentionError(
                    f"the schema {action} of {where} could not lock a table it changes in {attempts} tries of "
                    f"{PG_LOCK_TIMEOUT_MS} ms: another transaction holds it (pg_locks joined to pg_stat_activity names "
                    "it); nothing was changed: end that transaction and run it again"
                ) from None
            if not is_transient(exc):
                raise
            raise StorageContentionError(
                f"the schema {action} of {where} waited too long for another process's write lock: {exc.orig}"
            ) from None


def _lock_timed_out(exc: OperationalError) -> bool:
    orig = getattr(exc, "orig", None)
    return getattr(orig, "sqlstate", None) == _PG_LOCK_NOT_AVAILABLE


def _migration_key(connection: Connection) -> int:
    schema = connection.execute(text("SELECT current_schema()")).scalar_one()
    digest = hashlib.blake2b(f"memabra-migrate:{schema}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def upgrade(url_or_engine: str | Engine | None = None, revision: str = "head") -> str:
    """Apply migrations up to ``revision``; returns the revision the database is now at. On
    PostgreSQL the indexes a pending migration adds to an existing table are built first, without
    blocking writes (see ``_online_index``). A database a newer memabra migrated is left as it is
    when ``revision`` is the head and :func:`check_schema` accepts it (with its warning), and its
    revision is returned; :class:`SchemaError` when it does not."""
    engine, owned = _engine_for(url_or_engine)
    try:
        current = current_revision(engine)
        if revision in ("head", "heads") and current is not None and current not in known_revisions():
            # a newer memabra upgraded it (an old image's deploy job or init container run mid-roll):
            # nothing of this memabra's is left to apply; refused when this code cannot run on it
            check_schema(engine)
            return current
        if is_postgres(engine):
            build_online_indexes(engine, _scripts(), _migration_key, revision)
        _run(engine, "upgrade", revision)
        return current_revision(engine) or "base"
    finally:
        if owned:
            engine.dispose()


def downgrade(url_or_engine: str | Engine | None, revision: str) -> str:
    engine, owned = _engine_for(url_or_engine)
    try:
        _run(engine, "downgrade", revision)
        return current_revision(engine) or "base"
    finally:
        if owned:
            engine.dispose()


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def compatible_from(engine: Engine) -> str | None:
    """The oldest memabra schema head whose code may run on the database (``None``: the database
    records none, as one upgraded by a memabra from before the record, or one with no schema)."""
    with engine.connect() as connection:
        return read_marker(connection)


def check_schema(engine: Engine) -> None:
    """Refuse to work on a database this code's schema cannot run on: one with no schema, one
    older than this code's head, or one newer whose compatibility marker (``_schema_compat``) says
    a revision past this code's head broke older code. A newer one that still accepts this code's
    head is opened with a warning; one without the marker (upgraded by a memabra before it had one)
    is refused."""
    current = current_revision(engine)
    head = head_revision()
    if current == head:
        return
    where = shown_url(engine.url)
    if current is None:
        if in_memory(engine.url):
            # sqlite:// lives in its engine's one connection; a shared-cache URI in this process's
            # engines that name it: no `memabra db upgrade` (another process) reaches either
            raise SchemaError(
                f"the in-memory SQLite database {where} has no memabra schema, and it exists only in this process "
                "(no `memabra db upgrade` can reach it): open it with memabra.storage.open_log, which creates "
                "the schema on the log's own engine"
            )
        raise SchemaError(f"the database {where} has no memabra schema; run `memabra db upgrade --db {where}`")
    known = known_revisions()
    if current in known:
        raise SchemaError(
            f"the database {where} is at schema revision {current}, but this memabra needs {head}; "
            f"run `memabra db upgrade --db {where}`"
        )
    with engine.connect() as connection:
        oldest_compatible = read_marker(connection)
    newer = f"the database {where} is at schema revision {current}, newer than this memabra ({head})"
    if oldest_compatible is None:
        raise SchemaError(f"{newer}; upgrade memabra")
    if oldest_compatible not in known:
        raise SchemaError(
            f"{newer}, and its revision {oldest_compatible} changed the schema in a way code older than it "
            "cannot run on; upgrade memabra"
        )
    logger.warning(
        "the database %s is at schema revision %s, newer than this memabra (%s), which it still accepts "
        "(code at %s or later may run on it); upgrade memabra to the version that migrated it",
        where,
        current,
        head,
        oldest_compatible,
    )


def _engine_for(url_or_engine: str | Engine | None) -> tuple[Engine, bool]:
    if isinstance(url_or_engine, Engine):
        return url_or_engine, False
    return make_engine(url_or_engine), True
