"""Opening the log the way an embedded default should behave."""

from __future__ import annotations

from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from memabra._errors import ConfigError, StorageContentionError
from memabra.storage._engine import resolve_url, sqlite_file
from memabra.storage._log import EpisodeLog
from memabra.storage._migrate import check_schema, current_revision, upgrade
from memabra.storage._refusals import DatabaseNotWritableError
from memabra.storage._tx import is_transient

__all__ = ["open_log"]


def open_log(url: str | None = None) -> EpisodeLog:
    """An :class:`EpisodeLog` on ``url``. A SQLite database with no memabra schema yet (a new
    file, or an in-memory ``sqlite://``, a test's database) gets it here, so the embedded default
    works as written; any other database must be migrated with ``memabra db upgrade``, and the
    error says so.

    The schema is created on the log's own engine: an in-memory database lives only as long as the
    connection its engine holds, so one created on any other engine would be gone again.

    Processes opening the same new file at once wait for each other: the first creates the schema
    under the database's write lock and the others find it there (:func:`upgrade`); threads of one
    process do the same. A file that cannot be opened (its directory is missing, say) raises
    :class:`ConfigError` naming the path."""
    if make_url(resolve_url(url)).get_backend_name() != "sqlite":
        return EpisodeLog(url)
    log = EpisodeLog(url, check=False)
    try:
        # refuses a missing directory by name before sqlite3 says only "unable to open database file"
        path = sqlite_file(log.engine)
        where = str(path) if path is not None else "in memory"
        try:
            if current_revision(log.engine) is None:
                upgrade(log.engine)
            check_schema(log.engine)
        except OperationalError as exc:
            if isinstance(exc, DatabaseNotWritableError):
                raise  # names the file, the cause and what to do (its permissions, a read-only volume)
            if is_transient(exc):
                raise StorageContentionError(
                    f"the SQLite database {where} stayed locked by another process: {exc.orig}"
                ) from None
            raise ConfigError(f"cannot open the SQLite database {where}: {exc.orig}") from None
    except BaseException:
        log.close()
        raise
    return log
