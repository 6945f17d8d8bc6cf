"""What the admin answers while its database cannot be reached: a connection refused or timed out,
or one the server ended under a request (a restart, a failover, ``pg_terminate_backend``), which
storage raises as :class:`~memabra.storage.DatabaseUnavailableError`.

That is an outage, not a bug: the answer is 503 with ``Retry-After`` (a load balancer, a scraper, a
script or a person retries, and the next request opens a fresh connection; no restart is needed),
as the page, JSON or text the request asked for, logged as one WARNING line rather than a
traceback. The answer never carries the error's text: it names the database's host, user and name,
which the log line keeps for the operator while a page may reach a session that was logged out.
Every other exception stays a 500.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from memabra._admin._plumbing import _AdminBase, _raw_path, _safe_next
from memabra.storage._engine import mask_password

__all__ = ["RETRY_AFTER_S", "unavailable_handler", "unavailable_response"]

logger = logging.getLogger("memabra")

RETRY_AFTER_S = 5
"""Seconds a client is told to wait: a PostgreSQL restart or a managed server's failover is back in
seconds (the feedback endpoint tells its clients the same), and a retry sooner only adds load."""

_MESSAGE = f"The database is unavailable (a connection was refused or lost). Try again in {RETRY_AFTER_S} seconds."
_WRITE_NOTE = " If you were saving a change, it may or may not have been recorded: check before repeating it."
_METRICS_PATH = "/metrics"
_LOGIN_PATH = "/login"


def unavailable_handler(admin: _AdminBase) -> Callable[[Request, Exception], Awaitable[Response]]:
    """The app's handler of :class:`~memabra.storage.DatabaseUnavailableError` (its own pages'
    look from ``admin``'s templates)."""

    async def unavailable(request: Request, exc: Exception) -> Response:
        # storage names the URL with its password hidden; masked again in case a driver's reason
        # quoted a connection string
        return unavailable_response(admin, request, _MESSAGE, mask_password(" ".join(str(exc).split())))

    return unavailable


def unavailable_response(admin: _AdminBase, request: Request, message: str, reason: str) -> Response:
    """The 503 for ``request`` while the database cannot be reached: ``message`` for the client
    (never a URL or a password), ``reason`` for the WARNING line only."""
    logger.warning(
        "admin: %s %s answered 503, the database is unavailable: %s", request.method, request.url.path, reason
    )
    headers = {"retry-after": str(RETRY_AFTER_S), "cache-control": "no-store"}
    # a sign-in writes nothing: sent again, it is as safe as a page read again
    reading = request.method in ("GET", "HEAD") or request.url.path == _LOGIN_PATH
    message = message if reading else message + _WRITE_NOTE
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
        title="Database unavailable",
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
