"""Opening the log the way an embedded default should behave."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError

from memabra._errors import ConfigError, StorageContentionError
from memabra.storage._engine import make_engine, sqlite_file
from memabra.storage._log import EpisodeLog
from memabra.storage._migrate import current_revision, upgrade
from memabra.storage._tx import is_transient

__all__ = ["open_log"]


def open_log(url: str | None = None) -> EpisodeLog:
    """An :class:`EpisodeLog` on ``url``. A SQLite database with no memabra schema yet (a new
    file) gets it here, so the embedded default works as written; any other database must be
    migrated with ``memabra db upgrade``, and the error says so.

    Processes opening the same new file at once wait for each other: the first creates the schema
    under the database's write lock and the others find it there (:func:`upgrade`). A file that
    cannot be opened (its directory is missing, say) raises :class:`ConfigError` naming the path."""
    engine = make_engine(url)
    try:
        if engine.dialect.name == "sqlite":
            path = _sqlite_path(engine)
            try:
                if current_revision(engine) is None:
                    upgrade(engine)
            except OperationalError as exc:
                raise _open_error(exc, path) from None
    finally:
        engine.dispose()
    return EpisodeLog(url)


def _sqlite_path(engine: Engine) -> Path | None:
    """The SQLite file ``engine`` opens (``None`` in memory); refused at once when its directory
    is missing, which sqlite3 reports only as ``unable to open database file``."""
    return sqlite_file(engine)


def _open_error(exc: OperationalError, path: Path | None) -> Exception:
    where = str(path) if path is not None else "in memory"
    if is_transient(exc):
        return StorageContentionError(f"the SQLite database {where} stayed locked by another process: {exc.orig}")
    return ConfigError(f"cannot open the SQLite database {where}: {exc.orig}")
