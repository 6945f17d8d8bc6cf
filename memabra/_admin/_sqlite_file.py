"""What the admin answers while its SQLite log file cannot be used: deleted, moved, replaced, made
unreadable, or on a disk that was unmounted.

SQLite gives no error for most of these. A pooled connection keeps the file it opened, so a log
deleted or moved away is still read (and written) through it, a ghost nobody else sees, while a new
connection to the missing path would create an empty file there. So before each request the admin
looks at the path (one ``stat``): a file that is missing or unreadable is answered as an outage (503
with ``Retry-After``, as :mod:`memabra._admin._unavailable` answers an unreachable PostgreSQL), naming
the problem, with the pool's connections dropped; a file that is back, or was replaced by another
one (a restored backup), is opened afresh at the next request, without a restart. An SQLite error
that says the same from under a request (``disk I/O error``, ``unable to open database file``, a
file with no log in it) is answered the same way; a file that takes no writes (read-only, a full
volume) is answered as :func:`~memabra._admin._unavailable.not_writable_response` words it, as it
still serves reads; any other error stays a 500.

The check and the request's first query are not one step: a file that goes between them (or while
another request drops the pool) would be created empty by the next connection, and then taken for
a restored file. So every connection the log's engine opens from then on opens the file at the
watched (absolute) path read-write, never creating it (``mode=rw``): a file gone is an ``unable to
open database file`` error, answered as above.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlalchemy import event
from sqlalchemy.exc import OperationalError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from memabra._admin._metrics_page import UNUSABLE_FILE_KEY
from memabra._admin._plumbing import _AdminBase
from memabra._admin._unavailable import RETRY_AFTER_S, not_writable_response, unavailable_response
from memabra._errors import ConfigError
from memabra.storage import EpisodeLog
from memabra.storage._engine import sqlite_file

__all__ = ["SqliteFileGuard", "SqliteFileWatch", "sqlite_error_handler", "watch_sqlite_file"]

logger = logging.getLogger("memabra")

METRICS_PATH = "/metrics"

# what sqlite3 says when the file itself is the problem, not the statement: by the text it starts with
_FILE_ERRORS = {
    "disk i/o error": "it cannot be read (a disk I/O error: a disk failing or unmounted?)",
    "unable to open database file": "it cannot be opened (missing, or its permissions refuse the admin's user)",
    "no such table": "the file now at its path holds no memabra log (it was replaced by another file)",
    "file is not a database": "the file now at its path is not a SQLite database (it was replaced)",
    "database disk image is malformed": "it is damaged (database disk image is malformed)",
}
# what sqlite3 says when the file takes no writes: storage raises these as DatabaseNotWritableError;
# one met outside its listener gets that error's answer, not "cannot be used" (reads still work)
_NOT_WRITABLE = ("attempt to write a readonly database", "database or disk is full")
# the errors that mean the file was replaced only when it was: on the file the admin started on, a
# table missing is a broken deployment, a 500 like any bug
_REPLACED_ERRORS = ("no such table", "file is not a database")


class SqliteFileWatch:
    """The state of one log's SQLite file, checked before each request (see the module's text)."""

    def __init__(self, log: EpisodeLog, path: Path) -> None:
        self.log = log
        self.path = path
        self._lock = threading.Lock()
        self._identity = _identity(path)
        self._started_on = self._identity
        self._failing = False
        self.found = ""  # the last problem found, for the log line

    def problem(self) -> str | None:
        """What is wrong with the file now, in words (``None``: usable); drops the pool's connections
        when the file went away or changed, so the next connection opens the file at the path."""
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            if not self.path.parent.is_dir():
                found = f"its folder {self.path.parent.name or self.path.parent} is missing (a disk not mounted?)"
            else:
                found = "it is missing (deleted or moved)"
            return self.failed(found)
        except OSError as exc:
            return self.failed(f"it cannot be read ({exc.strerror or exc})")
        if not os.access(self.path, os.R_OK):
            return self.failed("its permissions refuse the admin's user")
        identity = (stat.st_dev, stat.st_ino)
        with self._lock:
            changed = identity != self._identity or self._failing
            self._identity, self._failing = identity, False
        if changed:
            # a file back at its path (or a different one: a restored backup): read it, not the
            # one the pooled connections still hold open
            logger.warning("admin: the SQLite log %s is back (or was replaced): reopening it", self.path)
            self.log.engine.dispose()
        return None

    @property
    def replaced(self) -> bool:
        """Whether the file at the path is another than the one the admin started on."""
        return self._identity != self._started_on

    def failed(self, found: str) -> str:
        """The message saying ``found`` (what is wrong with the file), the pool's connections dropped."""
        with self._lock:
            self._failing = True
            self.found = found
        self.log.engine.dispose()  # no connection keeps a file that went away
        return (
            f"The log's SQLite file {self.path.name} cannot be used: {found}. The admin serves again as "
            f"soon as the file is back at its path (the admin's log names it); try again in {RETRY_AFTER_S} seconds."
        )


def watch_sqlite_file(log: EpisodeLog) -> SqliteFileWatch | None:
    """The watch of ``log``'s SQLite file (``None``: PostgreSQL, or SQLite in memory)."""
    try:
        path = sqlite_file(log.engine)
    except ConfigError:
        return None  # its folder is gone already: EpisodeLog refused to open it
    if path is None:
        return None
    _never_create(log, path)
    return SqliteFileWatch(log, path)


def _never_create(log: EpisodeLog, path: Path) -> None:
    """Every connection ``log``'s engine opens from now on opens ``path`` read-write and fails
    where it is missing, rather than creating an empty database there (see the module's text)."""

    @event.listens_for(log.engine, "do_connect")
    def _existing_file_only(_dialect: Any, _record: Any, cargs: list[Any], cparams: dict[str, Any]) -> None:
        if cparams.get("uri") or not cargs:
            return  # opened by a URI of its own (not watched), or not the pysqlite call expected
        cargs[0] = f"file:{quote(str(path))}?mode=rw"
        cparams["uri"] = True


class SqliteFileGuard:
    """ASGI middleware: 503 before any route runs while the file is unusable (static files pass)."""

    def __init__(self, app: ASGIApp, admin: _AdminBase, watch: SqliteFileWatch) -> None:
        self.app = app
        self.admin = admin
        self.watch = watch

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path", "").startswith("/static/"):
            await self.app(scope, receive, send)
            return
        problem = await run_in_threadpool(self.watch.problem)
        if problem is None:
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        if scope.get("path") == METRICS_PATH and request.headers.get("authorization", "").lower().startswith("bearer "):
            # a scrape with a token (checked without reading the log) gets memabra_status_up 0, as
            # for any log it cannot read, rather than a scrape error
            await self.app({**scope, UNUSABLE_FILE_KEY: problem}, receive, send)
            return
        response = unavailable_response(
            self.admin, request, problem, f"SQLite file {self.watch.path}: {self.watch.found}"
        )
        await response(scope, receive, send)


def sqlite_error_handler(
    admin: _AdminBase, watch: SqliteFileWatch
) -> Callable[[Request, Exception], Awaitable[Response]]:
    """The handler of an SQLite error raised under a request: a file-level one is a 503 naming it,
    any other is re-raised (a 500, as before)."""

    async def handle(request: Request, exc: Exception) -> Response:
        text = str(getattr(exc, "orig", exc)).strip().lower()
        if isinstance(exc, OperationalError) and text.startswith(_NOT_WRITABLE):
            return not_writable_response(admin, request, exc)
        found = next((meaning for start, meaning in _FILE_ERRORS.items() if text.startswith(start)), None)
        if not isinstance(exc, OperationalError) or found is None:
            raise exc
        problem = await run_in_threadpool(watch.problem)
        if problem is None:
            if text.startswith(_REPLACED_ERRORS) and not watch.replaced:
                raise exc
            problem = await run_in_threadpool(watch.failed, found)
        return unavailable_response(admin, request, problem, f"SQLite file {watch.path}: {' '.join(str(exc).split())}")

    return handle


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return (stat.st_dev, stat.st_ino)
