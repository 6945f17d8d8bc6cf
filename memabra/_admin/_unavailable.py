"""What the admin answers while its database cannot be reached: a connection refused or timed out,
or one the server ended under a request (a restart, a failover, ``pg_terminate_backend``), which
storage raises as :class:`~memabra.storage.DatabaseUnavailableError`.

That is an outage, not a bug: the answer is 503 with ``Retry-After`` (a load balancer, a scraper, a
script or a person retries, and the next request opens a fresh connection; no restart is needed),
as the page, JSON or text the request asked for, logged as one WARNING line rather than a
traceback. The answer never carries the error's text: it names the database's host, user and name,
which the log line keeps for the operator while a page may reach a session that was logged out.
Every other exception stays a 500.

A database that answers but refuses writes (:class:`~memabra.storage.DatabaseNotWritableError`: a
SQLite file read-only to the admin's user or on a full volume, a PostgreSQL hot standby or full
disk) gets the same 503, worded for what it is: pages that only read are still served, and a
"connection refused or lost" would send the on-call person to the network. Its answer says what
refuses, the driver's reason (the first line of the driver's error: a sentence from SQLite or the
server, never the URL) and what to do; retrying is right there too, as the next write after the
cause is gone succeeds without a restart. A refusal is the database's answer, not a lost connection:
the write's transaction was rolled back, so a change is said to be unsaved, not "may or may not have
been recorded" (which sends a person to check for a change that cannot be there). So is a
change whose connection could not even be opened (``may_have_written`` false: refused, timed out,
an unknown host): nothing of it reached the database, and only a connection lost while its
statements or their commit were in flight leaves it "may or may not have been recorded".

A statement PostgreSQL cancelled (:class:`~memabra.storage.DatabaseTimeoutError`: it ran past
``statement_timeout`` or waited past ``lock_timeout`` for a lock another transaction held) is no
bug either: the same 503, titled "Database timed out", saying which bound fired. A change cancelled
before its ``COMMIT`` was rolled back and may be sent again; one cancelled during it
(``outcome_unknown``) may or may not have been recorded, and the answer says to check first.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from memabra._admin._plumbing import _AdminBase, _raw_path, _safe_next
from memabra._errors import ConfigError
from memabra.storage import DatabaseTimeoutError
from memabra.storage._engine import mask_password, sqlite_file
from memabra.storage._timeouts import TIMEOUT_CAUSES

__all__ = [
    "RETRY_AFTER_S",
    "not_writable_handler",
    "not_writable_message",
    "not_writable_response",
    "timeout_handler",
    "timeout_message",
    "unavailable_handler",
    "unavailable_response",
]

logger = logging.getLogger("memabra")

RETRY_AFTER_S = 5
"""Seconds a client is told to wait: a PostgreSQL restart or a managed server's failover is back in
seconds (the feedback endpoint tells its clients the same), and a retry sooner only adds load."""

_MESSAGE = f"The database is unavailable (a connection was refused or lost). Try again in {RETRY_AFTER_S} seconds."
_WRITE_NOTE = " If you were saving a change, it may or may not have been recorded: check before repeating it."
_UNREACHED = f"The database is unavailable (no connection to it could be opened). Try again in {RETRY_AFTER_S} seconds."
_UNREACHED_NOTE = " Your change was not saved (it never reached the database): send it again once it is back."
_REFUSED_NOTE = " Your change was not saved (the database rolled it back): send it again once this is fixed."
_METRICS_PATH = "/metrics"
_LOGIN_PATH = "/login"
_OUTAGE = ("Database unavailable", "the database is unavailable")

_PG_READ_ONLY = "25006"  # read_only_sql_transaction: a hot standby, or default_transaction_read_only
_PG_DISK_FULL = "53100"  # disk_full
_REASON_MAX = 300  # a driver's first line past this is a statement or a path, not the reason
_AGAIN = "the admin saves changes again by itself once it is done, with no restart"


def unavailable_handler(admin: _AdminBase) -> Callable[[Request, Exception], Awaitable[Response]]:
    """The app's handler of :class:`~memabra.storage.DatabaseUnavailableError` (its own pages'
    look from ``admin``'s templates)."""

    async def unavailable(request: Request, exc: Exception) -> Response:
        # storage names the URL with its password hidden; masked again in case a driver's reason
        # quoted a connection string
        reason = mask_password(" ".join(str(exc).split()))
        if getattr(exc, "may_have_written", True):
            return unavailable_response(admin, request, _MESSAGE, reason)
        # no connection could be opened: nothing of the request's write reached the database
        return unavailable_response(admin, request, _UNREACHED, reason, write_note=_UNREACHED_NOTE)

    return unavailable


def not_writable_handler(admin: _AdminBase) -> Callable[[Request, Exception], Awaitable[Response]]:
    """The app's handler of :class:`~memabra.storage.DatabaseNotWritableError`: the outage's 503,
    saying what refuses the write, the driver's reason and what to do."""

    async def not_writable(request: Request, exc: Exception) -> Response:
        return not_writable_response(admin, request, exc)

    return not_writable


def not_writable_response(admin: _AdminBase, request: Request, exc: BaseException) -> Response:
    """The 503 for ``request`` whose write ``exc`` was refused (see :func:`not_writable_message`)."""
    return unavailable_response(
        admin,
        request,
        not_writable_message(admin, exc),
        mask_password(" ".join(str(exc).split())),
        outage=("Database not writable", "the database refused a write"),
        write_note=_REFUSED_NOTE,
    )


def not_writable_message(admin: _AdminBase, exc: BaseException) -> str:
    """What a client is told of a refused write ``exc``: what refuses, why, what to do."""
    orig = getattr(exc, "orig", None) or exc
    lines = str(orig).strip().splitlines()
    reason = mask_password(" ".join(lines[0].split()))[:_REASON_MAX] if lines else type(orig).__name__
    what, todo = _refusal(admin, orig, reason)
    return (
        f'The database refuses writes: {what}. It said: "{reason}". To fix it: {todo}. Pages that only '
        f"read are still served; try again in {RETRY_AFTER_S} seconds once it is fixed."
    )


def _refusal(admin: _AdminBase, orig: BaseException, reason: str) -> tuple[str, str]:
    """What refuses and what to do, by the driver's SQLSTATE (PostgreSQL) or message (SQLite)."""
    state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if state == _PG_READ_ONLY:
        return (
            "the PostgreSQL server takes no writes: it is a hot standby (a read replica, or the old primary "
            "after a failover) or its transactions are read-only (default_transaction_read_only)",
            "point the admin's database URL at the primary (a URL naming several hosts wants "
            f"target_session_attrs=read-write); {_AGAIN}",
        )
    if state == _PG_DISK_FULL:
        return "the PostgreSQL server's disk is full", f"free space on the server's volume; {_AGAIN}"
    try:
        path = sqlite_file(admin.log.engine)
    except ConfigError:  # its folder is gone: the file guard answers that before any route runs
        path = None
    file = f"the SQLite file {path.name}" if path is not None else "the SQLite database"
    text = reason.lower()
    if "disk is full" in text:
        return (
            f"the volume that holds {file} is full (or the file reached its size limit, max_page_count)",
            f"free space on it; {_AGAIN}",
        )
    if "readonly database" in text or "read-only database" in text:
        return (
            f"{file} is read-only to the admin's user (the file's permissions, its -wal/-shm files' or its "
            "folder's, a volume mounted read-only, or a read-only URL)",
            f"make them writable to the user the admin runs as; {_AGAIN}",
        )
    return "the database takes no writes", f"see the admin's log, which names the database; {_AGAIN}"


def timeout_handler(admin: _AdminBase) -> Callable[[Request, Exception], Awaitable[Response]]:
    """The app's handler of :class:`~memabra.storage.DatabaseTimeoutError`: the outage's 503,
    saying which bound cancelled the statement and whether a change may have been recorded."""

    async def timed_out(request: Request, exc: Exception) -> Response:
        message, write_note = timeout_message(exc)
        return unavailable_response(
            admin,
            request,
            message,
            mask_password(" ".join(str(exc).split())),
            outage=("Database timed out", "the database cancelled a statement"),
            write_note=write_note,
        )

    return timed_out


_TIMEOUTS = TIMEOUT_CAUSES


def timeout_message(exc: BaseException) -> tuple[str, str]:
    """What a client is told of a cancelled statement ``exc`` (a
    :class:`~memabra.storage.DatabaseTimeoutError`), and what is added when it was saving a change.
    Never the error's text: it names the database."""
    what = exc.cause if isinstance(exc, DatabaseTimeoutError) else "a statement was cancelled (pg_cancel_backend)"
    message = (
        f"The database cancelled the request's work: {what}. Try again in {RETRY_AFTER_S} seconds; if it "
        "keeps happening, the admin's log names the database and what to do."
    )
    if getattr(exc, "outcome_unknown", False):
        note = (
            " The cancel reached the commit of your change, so it may or may not have been recorded: "
            "check before repeating it."
        )
    else:
        note = " The statement's transaction was rolled back (nothing of it recorded): send the change again."
    return message, note


def unavailable_response(
    admin: _AdminBase,
    request: Request,
    message: str,
    reason: str,
    *,
    outage: tuple[str, str] = _OUTAGE,
    write_note: str = _WRITE_NOTE,
) -> Response:
    """The 503 for ``request`` while the database cannot be reached: ``message`` for the client
    (never a URL or a password), ``reason`` for the WARNING line only; ``outage``: the page's
    title and what the WARNING line says happened; ``write_note``: added for a request that
    changes something (whether the change may have been recorded)."""
    title, happened = outage
    logger.warning("admin: %s %s answered 503, %s: %s", request.method, request.url.path, happened, reason)
    headers = {"retry-after": str(RETRY_AFTER_S), "cache-control": "no-store"}
    # a sign-in writes nothing: sent again, it is as safe as a page read again
    reading = request.method in ("GET", "HEAD") or request.url.path == _LOGIN_PATH
    message = message if reading else message + write_note
    if request.url.path == _METRICS_PATH:
        return PlainTextResponse(message + "\n", status_code=503, headers=headers)
    if _wants_json(request):
        return JSONResponse({"detail": message, "retry_after_s": RETRY_AFTER_S}, status_code=503, headers=headers)
    # the same URL again (a sign-in: its form again)
    target = _safe_next(_raw_path(request) + (f"?{request.url.query}" if request.url.query else ""))
    back = (target, "Try again") if reading else ("/episodes", "Back to the episodes")
    # Signed out as far as the page shows: who is signed in is itself a database read (a
    # logged-out session is refused), so the page offers neither the navigation nor a sign-in.
    return admin._render(
        "error.html",
        503,
        headers=headers,
        title=title,
        message=message,
        back_url=back[0],
        back_label=back[1],
        offer_sign_in=False,
    )


def _wants_json(request: Request) -> bool:
    """A JSON endpoint's request (``?format=json``), or a client that asks for JSON and not HTML."""
    if request.query_params.get("format") == "json":
        return True
    accept = request.headers.get("accept", "")
    return "application/json" in accept and "text/html" not in accept
