"""SQLite's side of the engine: the file a URL opens (its path shown whole where the URL's is
relative), databases that live only in memory, each connection's settings (busy timeout, WAL,
foreign keys, a Unicode ``lower()``), and a file that cannot be opened, named with what to do.

In memory are ``sqlite://`` (``sqlite:///:memory:``) and a URI naming ``mode=memory`` (or
``file::memory:``), such as ``sqlite:///file:NAME?mode=memory&cache=shared&uri=true``: the
database is gone when its last connection closes. Their engines hold one connection for their
lifetime (a ``StaticPool``), so the database lives as long as the engine, whichever thread uses it,
and what one ``Session`` writes the next reads. A shared-cache URI's name is shared by every engine
of the process that opens it: each keeps the database alive while it is open. SQLAlchemy's own pool
for a ``mode=memory`` URI (a ``SingletonThreadPool``) opened a connection per thread and, past five
threads, closed another thread's connection under it, which crashed the process.

That one connection is lent to one thread at a time (:class:`OneConnectionPool`): from its checkout
to its return (a ``Session``'s transaction, a ``with engine.begin()``) no other thread's statements
run on it. Lent to several threads at once, their transactions mixed on it: a ``BEGIN`` met another
thread's open transaction ("cannot start a transaction within a transaction"), one thread's
``COMMIT`` or ``ROLLBACK`` ended another's writes half done, and sqlite3 could crash the process. A
thread that already holds it (a connection opened inside its own between the outer one's
transactions; inside one, sqlite3 refuses the nested ``BEGIN``) gets it again without waiting, and
the loan ends at the outer one's return; another waits up to the busy timeout, then gets
``database is locked``, which a write retries.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, event
from sqlalchemy.engine import URL
from sqlalchemy.pool import ConnectionPoolEntry, StaticPool

from memabra._errors import ConfigError

__all__ = [
    "OneConnectionPool",
    "cannot_open",
    "configure_sqlite",
    "in_memory",
    "shown_path",
    "sqlite_file",
    "unwritable_folder",
]

# the first pause between tries of the WAL switch a writer blocks (doubling to half a second)
_WAL_RETRY_S = 0.01
_UNWRITABLE_FOLDER = (
    "this process cannot create it there: the directory {folder} is not writable (a read-only working "
    "directory or file system? sqlite:///memabra.db, the default, is a path in the working directory); "
    "point the database URL ($MEMABRA_DATABASE_URL, or the url given) at a path on a writable volume"
)


def in_memory(url: URL) -> bool:
    """Whether the SQLite database ``url`` opens lives only in its connections."""
    if url.get_backend_name() != "sqlite":
        return False
    database = url.database or ""
    if database in ("", ":memory:") or database.startswith("file::memory:"):
        return True
    return url.query.get("mode") == "memory" or "mode=memory" in database


class OneConnectionPool(StaticPool):
    """A :class:`~sqlalchemy.pool.StaticPool` (one connection for the engine's life) that lends its
    connection to one thread at a time (see the module's docstring)."""

    # how long a thread waits for another's transaction on the one connection (make_engine sets
    # the engine's SQLite busy timeout)
    wait_s: float = 30.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lent = threading.Lock()
        self._holder: int | None = None  # the thread the connection is lent to
        # the holder's checkouts that a nested one of the same thread superseded, still open
        self._outer: list[Any] = []

    def recreate(self) -> OneConnectionPool:
        pool = super().recreate()
        assert isinstance(pool, OneConnectionPool)
        pool.wait_s = self.wait_s
        return pool

    def _do_get(self) -> ConnectionPoolEntry:
        me = threading.get_ident()
        if self._holder == me:
            # nested in this thread's own checkout: it holds the connection. SQLAlchemy hands the
            # one record to the nested checkout and forgets the outer one, so its record would go
            # back (and the loan end) at the nested one's return, with the outer one still open
            record = super()._do_get()
            outer = getattr(record, "fairy_ref", None)
            if outer is not None:
                self._outer.append(outer)
            return record
        if not self._lent.acquire(timeout=self.wait_s):
            raise sqlite3.OperationalError(
                f"database is locked (another thread held the in-memory database's one connection for {self.wait_s:g}s)"
            )
        self._holder = me
        try:
            return super()._do_get()
        except BaseException:
            self._release()
            raise

    def _do_return_conn(self, record: ConnectionPoolEntry) -> None:
        # SQLAlchemy returns the one record at the first return of the checkouts that shared it
        # (a later one's is a "double checkin" it skips), possibly from another thread (a session
        # collected as garbage). A nested checkout returned while its thread's outer one is still
        # open: the record goes back to the outer one, whose own return ends the loan (lent on
        # from here, another thread's transaction would run under the outer one, and its return's
        # rollback would undo that transaction's writes)
        while self._outer:
            outer = self._outer.pop()
            fairy = outer()
            if fairy is not None and fairy.dbapi_connection is not None:
                record.fairy_ref = outer  # type: ignore[attr-defined]
                return
        super()._do_return_conn(record)
        self._release()

    def _release(self) -> None:
        if self._lent.locked():
            self._holder = None
            self._outer.clear()
            self._lent.release()


def _path_of(url: URL) -> Path | None:
    """The file a SQLite ``url`` names as a path (``None`` in memory, or a ``file:`` URI)."""
    database = url.database
    if url.get_backend_name() != "sqlite" or not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database).expanduser().absolute()


def shown_path(url: URL) -> str:
    """`` (PATH)`` when a SQLite ``url`` names its file by a relative path (the default
    ``sqlite:///memabra.db``): which file that is depends on the working directory, which a
    message must then say; ``""`` otherwise."""
    database = url.database or ""
    path = _path_of(url)
    return "" if path is None or Path(database).is_absolute() else f" ({path})"


def sqlite_file(engine: Engine) -> Path | None:
    """The SQLite file ``engine`` opens (``None`` in memory, or not SQLite); refused with a
    :class:`ConfigError` naming the path when its directory is missing (which sqlite3 reports only
    as ``unable to open database file``) or it is a directory."""
    path = _path_of(engine.url)
    if path is None:
        return None
    if not path.parent.is_dir():
        raise ConfigError(
            f"cannot open the SQLite database {path}: the directory {path.parent} does not exist (create it first)"
        )
    if path.is_dir():
        raise ConfigError(f"cannot open the SQLite database {path}: it is a directory")
    return path


def configure_sqlite(engine: Engine, *, wal: bool, busy_timeout_s: float) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # pysqlite's own transaction handling defers BEGIN; take control so that
        # SAVEPOINTs and the one-transaction-per-episode rule hold.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
        if wal:
            _switch_to_wal(cursor, busy_timeout_s)
            cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()
        # SQLite's own lower() folds ASCII only: a search for "москве" or "münchen" would miss
        # "Москве" and "MÜNCHEN" (PostgreSQL's folds by the database's locale)
        dbapi_connection.create_function("lower", 1, _unicode_lower, deterministic=True)

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        # Writes take the lock up front (waiting up to the busy timeout) rather than failing on
        # the read-to-write upgrade; reads stay deferred and, in WAL mode, never wait.
        immediate = connection.get_execution_options().get("memabra_write", False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def _unicode_lower(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


def _switch_to_wal(cursor: Any, busy_timeout_s: float) -> None:
    """``PRAGMA journal_mode=WAL``, retried: on a new file that another process is writing (its
    schema being created), SQLite refuses the switch at once instead of calling the busy handler
    (it would deadlock waiting on a reader), so the wait the busy timeout promises is done here."""
    deadline = time.monotonic() + busy_timeout_s
    pause = _WAL_RETRY_S
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(pause)
            pause = min(pause * 2, 0.5)


def unwritable_folder(path: Path) -> str | None:
    """Why a new SQLite file cannot be made at ``path`` (its directory not writable), or ``None``."""
    if path.exists() or os.access(path.parent, os.W_OK | os.X_OK):
        return None
    return _UNWRITABLE_FOLDER.format(folder=path.parent)


def cannot_open(url: URL, orig: BaseException) -> ConfigError | None:
    """SQLite's ``unable to open database file`` (all it says of a missing directory, a directory
    it may not write, a file it may not read) as a :class:`ConfigError` naming the file's whole
    path, the cause and what to do; ``None`` for any other error."""
    if type(orig).__name__ != "OperationalError" or "unable to open database file" not in str(orig).lower():
        return None
    path = _path_of(url)
    if path is None:  # a file: URI, whose path and mode the URL spells out
        return ConfigError(f"cannot open the SQLite database {url.database}: {orig}; check the URI's path and mode")
    folder = path.parent
    if not folder.is_dir():
        why = f"the directory {folder} does not exist (create it first)"
    elif path.is_dir():
        why = "it is a directory"
    elif not path.exists():
        why = f"it does not exist, and {unwritable_folder(path) or 'SQLite could not create it'}"
    elif not os.access(path, os.R_OK):
        why = "this process may not read it (the file's permissions): give its user read and write access"
    else:
        why = f"{orig} (the file's or its directory's permissions, or a file that is no SQLite database)"
    return ConfigError(f"cannot open the SQLite database {path}: {why}")
