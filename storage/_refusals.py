"""Writes the database refuses whatever is retried: a full disk, a read-only file or volume, a
PostgreSQL hot standby.

Such a refusal is no conflict (a retry meets it again) and no bug in the statement: it is the
operator's to fix, so it is raised as :class:`DatabaseNotWritableError`, one line naming the database
(password hidden), the driver's reason and what to do, instead of a driver error with the statement
attached. The write's transaction was rolled back: nothing of it was stored, and the same call made
again once the cause is gone stores it once.

The pool's connections are then replaced as they are next checked out. A connection keeps what
it met when it opened: a PostgreSQL connection made while the address pointed at a standby stays on
the standby after the address moves to the primary, and a SQLite file opened while it was read-only
stays read-only after it is writable again. Replacing them is what lets the next write succeed
without a restart once the cause is gone; a full disk needs no new connection, but one costs little
next to the write that failed.

A SQLite file that cannot even be opened (sqlite3 says only ``unable to open database file``: its
directory is missing or not writable for a new file, the file unreadable) is no outage but the URL's
problem: it is raised as :class:`~memabra.ConfigError` naming the whole path, the cause and what to
do. A refusal names the file by its whole path too where the URL's is relative (the default
``sqlite:///memabra.db``), and says so where it met the write a new connection makes (the switch to
WAL mode) rather than one of the caller's.
"""

from __future__ import annotations

import logging
import time
import weakref
from typing import Any

from sqlalchemy import Engine, event
from sqlalchemy.engine import URL, ExceptionContext
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.pool import SingletonThreadPool, StaticPool

from memabra.storage._engine import DatabaseUnavailableError, mask_password, shown_url
from memabra.storage._sqlite import cannot_open, in_memory, shown_path

__all__ = ["DatabaseNotWritableError", "not_writable", "watch_refusals"]

logger = logging.getLogger("memabra")

_PG_READ_ONLY = "25006"  # read_only_sql_transaction: a hot standby, or default_transaction_read_only
_PG_DISK_FULL = "53100"  # disk_full

# what a connection refused as it opened was writing: SQLite's switch to WAL mode needs the file
# and its directory writable, before any statement of the caller's ran
_OPENING = "the write each new connection makes (its switch to WAL mode)"
_FULL_ADVICE = (
    "free space on the volume that holds it (or raise the database's size limit); "
    "nothing of this write was stored, and writes succeed again by themselves once there is room"
)
_SQLITE_READ_ONLY_ADVICE = (
    "this process cannot write the file, its -wal/-shm files or their directory (their permissions, a "
    "volume mounted read-only, or a read-only URL); nothing of this write was stored: make them writable, "
    "and writes succeed again by themselves"
)
_STANDBY_ADVICE = (
    "the server takes no writes: it is a hot standby (a read replica, or the old primary after a failover) "
    "or its transactions are read-only (default_transaction_read_only); nothing of this write was stored: "
    "point the URL at the primary (a URL naming several hosts wants target_session_attrs=read-write); "
    "once it answers there, new connections are opened by themselves"
)


class DatabaseNotWritableError(DatabaseUnavailableError):
    """The database refused a write that no retry would get past: its disk is full, its SQLite file
    or volume is read-only, or the PostgreSQL server is a hot standby. The message names the
    database (password hidden), the driver's reason and what to do; the write was rolled back,
    nothing of it stored.

    A :class:`DatabaseUnavailableError`: what waits out an outage (a learner loop, a turn that logs
    a warning and goes on) waits this out too, and the next write after the cause is gone succeeds
    without a restart."""


def _advice(exc: BaseException) -> str | None:
    """What to do about ``exc`` when it is a refused write; ``None`` for any other error."""
    orig = getattr(exc, "orig", None) or exc
    state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if state == _PG_READ_ONLY:
        return _STANDBY_ADVICE
    if state == _PG_DISK_FULL:
        return "the server's disk is full: " + _FULL_ADVICE
    if type(orig).__name__ != "OperationalError" or state is not None:
        return None
    text = str(orig).lower()
    if "database or disk is full" in text:
        return _FULL_ADVICE
    if "readonly database" in text or "read-only database" in text:
        return _SQLITE_READ_ONLY_ADVICE
    return None


def not_writable(engine: Engine, exc: BaseException, what: str = "a write") -> DatabaseNotWritableError | None:
    """``exc`` as a :class:`DatabaseNotWritableError` naming ``what`` was refused (``None`` when it
    is no refused write), with ``engine``'s pooled connections set to be replaced."""
    orig = getattr(exc, "orig", None) or exc
    if _advice(orig) is None:
        return None
    if not isinstance(exc, DatabaseNotWritableError):  # else the engine's listener renewed the pool
        _renew(_FENCES.get(engine), orig)
    return _refused(engine.url, orig, what)


def _refused(url: URL, orig: BaseException, what: str) -> DatabaseNotWritableError:
    lines = str(orig).strip().splitlines()
    reason = mask_password(lines[0]) if lines else type(orig).__name__
    where = shown_url(url) + shown_path(url)
    message = f"the database {where} refused {what}: {reason}; {_advice(orig)}"
    return DatabaseNotWritableError(message, orig, may_have_written=False)  # rolled back


def _renew(fence: _Fence | None, orig: BaseException) -> None:
    if fence is not None:
        fence.renew()
    logger.info("the database refused a write (%s); its pooled connections are replaced as they are next used", orig)


class _Fence:
    """Connections opened before the last refused write are replaced at their next checkout.
    Holds no reference to the engine: SQLAlchemy keeps listeners on dialects it caches."""

    def __init__(self) -> None:
        self.raised_at = float("-inf")
        # a file that cannot be opened once the log has opened it is an outage (deleted, moved, a
        # disk unmounted), not a configuration to fix: left to the caller as the driver's error
        self.opened = False

    def renew(self) -> None:
        self.raised_at = time.monotonic()

    def on_connect(self, _dbapi_connection: Any, record: Any) -> None:
        record.info["memabra_opened"] = time.monotonic()
        self.opened = True

    def on_checkout(self, _dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        if record.info.get("memabra_opened", float("-inf")) < self.raised_at:
            # the pool closes it and opens another in its place
            raise DisconnectionError("opened before the database refused a write")


_FENCES: weakref.WeakKeyDictionary[Engine, _Fence] = weakref.WeakKeyDictionary()


def watch_refusals(engine: Engine) -> None:
    """Raise refused writes on ``engine`` as :class:`DatabaseNotWritableError`, and replace its
    pooled connections after one. Called by :func:`~memabra.storage.make_engine`."""
    if engine in _FENCES:
        return
    fence = _FENCES[engine] = _Fence()
    if not _in_memory(engine):
        event.listen(engine, "connect", fence.on_connect)
        event.listen(engine, "checkout", fence.on_checkout)
    url = engine.url

    @event.listens_for(engine, "handle_error")
    def _on_error(context: ExceptionContext) -> BaseException | None:
        orig = context.original_exception
        # a lost connection stays the lost connection it is (make_engine names it): lost during a
        # COMMIT, the write may have landed, and only that error keeps the retry from doubling it
        if context.is_pre_ping or context.is_disconnect:
            return None
        opening = context.connection is None  # a new connection's own settings: its switch to WAL
        if opening and url.get_backend_name() == "sqlite" and not fence.opened:
            unopened = cannot_open(url, orig)
            if unopened is not None:
                return unopened
        if _advice(orig) is None:
            return None
        _renew(fence, orig)
        return _refused(url, orig, _OPENING if opening else "a write")


def _in_memory(engine: Engine) -> bool:
    """Whether ``engine``'s SQLite database lives only in its connections: closing them (to replace
    them) deletes it, the schema and every row. The pools SQLAlchemy gives such a URL hold one
    connection (StaticPool, SingletonThreadPool); a shared-cache URI (``file:x?mode=memory``) on any
    pool lives until its last connection closes, which replacing it one at a time can be."""
    return isinstance(engine.pool, (StaticPool, SingletonThreadPool)) or in_memory(engine.url)
