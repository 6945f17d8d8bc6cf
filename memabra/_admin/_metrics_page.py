"""``GET /metrics``: the log's status as Prometheus metrics, for a scrape (the text
``memabra status --prometheus`` writes; :mod:`memabra._metrics`).

It needs a credential like every admin page: a bearer token of either role (what a scrape
config's ``authorization`` sends; a reviewer may read it) or a signed-in session. Without one it
answers 401 in plain text, never a sign-in redirect a scraper would follow. It runs the status
read the policies page runs (:meth:`EpisodeLog.status <memabra.storage.EpisodeLog.status>`, a
handful of indexed aggregates) and the ``writes`` check ``memabra status`` runs
(:mod:`memabra._write_check`: one statement or pragma and a few ``stat`` calls, nothing written),
one at a time per worker: scrapes that arrive together (two Prometheus replicas) share one read
rather than queue several on the database. A database that
cannot be read answers 200 with ``memabra_status_up 0``, as an exporter does, so the alert on it
fires rather than a scrape error.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Awaitable, Callable

from sqlalchemy.exc import SQLAlchemyError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from memabra._admin._plumbing import _AdminBase, _HttpError
from memabra._admin._policy import ActiveSnapshotPolicy
from memabra._errors import MemabraError
from memabra._health import health_problems
from memabra._metrics import CONTENT_TYPE, status_metrics
from memabra._records import utcnow
from memabra._write_check import write_problems, write_state

__all__ = ["SHARED_READ_S", "UNUSABLE_FILE_KEY", "metrics_endpoint"]

logger = logging.getLogger("memabra")

UNUSABLE_FILE_KEY = "memabra.unusable_file"
"""The request scope's key under which the SQLite guard passes a bearer scrape what is wrong with
the log's file (:mod:`memabra._admin._sqlite_file`)."""

SHARED_READ_S = 1.0
"""A scrape that finds a read finished this recently answers with its text: concurrent scrapes
share one read, while any scrape interval (seconds at the least) still gets a fresh one."""


def metrics_endpoint(admin: _AdminBase) -> Callable[[Request], Awaitable[Response]]:
    """The ``/metrics`` endpoint over ``admin``'s log, with its credential checks."""
    reader = _MetricsReader(admin)

    async def metrics(request: Request) -> Response:
        try:
            auth = await admin._authenticate(request)
        except _HttpError as exc:  # a wrong bearer token (401, throttled) or a locked-out client (429)
            return _plain(exc.status, exc.message, exc.headers)
        if not auth.ok:
            return _plain(401, "Metrics need a credential: an admin bearer token (either role).")
        # the log's SQLite file is unusable (memabra._admin._sqlite_file): read nothing, say "down"
        down = request.scope.get(UNUSABLE_FILE_KEY)
        return Response(
            reader.down(str(down)) if down else await run_in_threadpool(reader.read),
            media_type=CONTENT_TYPE,
            headers={"cache-control": "no-store"},
        )

    return metrics


class _MetricsReader:
    """One status read at a time, its text kept for :data:`SHARED_READ_S`."""

    def __init__(self, admin: _AdminBase) -> None:
        self.admin = admin
        self.lock = threading.Lock()
        self.text = ""
        self.read_at: float | None = None

    def read(self) -> str:
        with self.lock:
            if self.read_at is not None and time.monotonic() - self.read_at < SHARED_READ_S:
                return self.text
            self.text = self._read()
            self.read_at = time.monotonic()
            return self.text

    def _read(self) -> str:
        started = time.perf_counter()
        # the policy in service, as the policies page checks it: a policy served once keeps its
        # checkpoint, and that learner stays behind for good
        current = self.admin.current_policy
        policy = current.policy if isinstance(current, ActiveSnapshotPolicy) else None
        served = None if policy is None else [policy]
        try:
            state = self.admin.log.status()
            # the writes check too, as memabra status runs it: one more statement (PostgreSQL) or a
            # pragma and a few stats (SQLite), nothing written
            writes = write_state(self.admin.log.engine)
        except (MemabraError, SQLAlchemyError) as exc:
            return self.down(str(exc), started)
        duration = _since(started)
        problems = health_problems(state, self.admin.max_lag, policies=served) + write_problems(writes)
        return status_metrics(
            state,
            problems=problems,
            writes_checked=True,
            max_lag=self.admin.max_lag,
            duration_s=duration,
            checked_at=state.checked_at,
            checked_policies=served,
        )

    def down(self, problem: str, started: float | None = None) -> str:
        """The text of a scrape that could not read the log (``memabra_status_up 0``)."""
        logger.warning("admin /metrics: could not read the log's status: %s", problem)
        current = self.admin.current_policy
        policy = current.policy if isinstance(current, ActiveSnapshotPolicy) else None
        return status_metrics(
            None,
            max_lag=self.admin.max_lag,
            duration_s=0.0 if started is None else _since(started),
            checked_at=utcnow(),
            checked_policies=None if policy is None else [policy],
        )


def _since(started: float) -> float:
    return round(time.perf_counter() - started, 6)


def _plain(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    headers = dict(headers or {})
    if status == 401:
        headers.setdefault("www-authenticate", 'Bearer realm="memabra admin"')
    return PlainTextResponse(message + "\n", status_code=status, headers={"cache-control": "no-store", **headers})
