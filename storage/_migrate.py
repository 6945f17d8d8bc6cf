"""Schema migrations (Alembic, shipped in the wheel) and the schema-version guard."""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import OperationalError

from memabra._errors import SchemaError, StorageContentionError
from memabra.storage._engine import is_postgres, make_engine, resolve_url
from memabra.storage._online_index import build_online_indexes
from memabra.storage._tx import WRITE_OPTION, is_transient

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


def _run(engine: Engine, action: str, revision: str) -> None:
    """Run one Alembic command in one transaction that first takes the database's migration lock:
    processes that all find a new database (or all run ``db upgrade`` at a deploy) then queue, and
    each finds the schema where the one before left it instead of creating the same tables again."""
    config = alembic_config(engine.url.render_as_string(hide_password=False))
    try:
        # WRITE_OPTION makes SQLite begin with BEGIN IMMEDIATE: the write lock, waited for up to
        # the busy timeout, before Alembic reads the current revision.
        with engine.execution_options(**{WRITE_OPTION: True}).begin() as connection:
            if is_postgres(engine):
                connection.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _migration_key(connection)})
            config.attributes["connection"] = connection
            getattr(command, action)(config, revision)
    except OperationalError as exc:
        if not is_transient(exc):
            raise
        where = engine.url.render_as_string(hide_password=True)
        raise StorageContentionError(
            f"the schema {action} of {where} waited too long for another process's write lock: {exc.orig}"
        ) from None


def _migration_key(connection: Connection) -> int:
    schema = connection.execute(text("SELECT current_schema()")).scalar_one()
    digest = hashlib.blake2b(f"memabra-migrate:{schema}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def upgrade(url_or_engine: str | Engine | None = None, revision: str = "head") -> str:
    """Apply migrations up to ``revision``; returns the revision the database is now at. On
    PostgreSQL the indexes a pending migration adds to an existing table are built first, without
    blocking writes (see ``_online_index``)."""
    engine, owned = _engine_for(url_or_engine)
    try:
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


def check_schema(engine: Engine) -> None:
    """Refuse to work on a database that is not at this code's schema version."""
    current = current_revision(engine)
    head = head_revision()
    if current == head:
        return
    where = engine.url.render_as_string(hide_password=True)
    if current is None:
        raise SchemaError(f"the database {where} has no memabra schema; run `memabra db upgrade --db {where}`")
    script = _scripts()
    known = {rev.revision for rev in script.walk_revisions()}
    if current not in known:
        raise SchemaError(
            f"the database {where} is at schema revision {current}, newer than this memabra ({head}); upgrade memabra"
        )
    raise SchemaError(
        f"the database {where} is at schema revision {current}, but this memabra needs {head}; "
        f"run `memabra db upgrade --db {where}`"
    )


def _engine_for(url_or_engine: str | Engine | None) -> tuple[Engine, bool]:
    if isinstance(url_or_engine, Engine):
        return url_or_engine, False
    return make_engine(url_or_engine), True
