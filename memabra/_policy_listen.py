"""The push half of hot reload: LISTEN for the ``memabra_policy`` NOTIFY a promote's trigger sends
(PostgreSQL only), so that a newly active snapshot serves at once instead of at the next poll.

Behind a transaction-pooling proxy (PgBouncer's ``pool_mode = transaction``) a LISTEN is made on
whichever server connection served that one statement, which then goes back to the pool: nothing
is ever delivered. The listener sees that with a notification it sends itself when it starts,
says so once and stops; the :class:`~memabra.router.SnapshotWatcher`'s polling reloads anyway.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
import weakref
from typing import TYPE_CHECKING, Any

from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from memabra.storage._engine import pg_connection_defaults

if TYPE_CHECKING:
    from memabra._serving import PolicyRuntime

__all__ = ["LISTEN_PROBE_S", "NOTIFY_CHANNEL", "PolicyListener"]

logger = logging.getLogger("memabra")

NOTIFY_CHANNEL = "memabra_policy"
# How long the listener waits for the notification it sends itself when it starts. A server
# delivers it within milliseconds; a transaction-pooling proxy never does, as the LISTEN was made
# on a server connection that went back to the pool. Missing it on a server stalled for longer
# costs only the push: polling reloads.
LISTEN_PROBE_S = 5.0
# The longest wait between tries to listen again after the connection was lost (doubling from 1 s):
# a server down for minutes is tried twice a minute, and polling reloads meanwhile.
RELISTEN_MAX_S = 30.0


class PolicyListener:
    """LISTEN on PostgreSQL: reload as soon as a snapshot of the policy becomes active. It first
    checks that notifications reach it at all (behind a transaction-pooling PgBouncer they do
    not), and stops, saying so once, where they do not: polling still reloads."""

    def __init__(self, runtime: PolicyRuntime) -> None:
        self._runtime = weakref.ref(runtime)
        self._stop = threading.Event()
        self._reloading = threading.Lock()
        url = runtime.log.engine.url.set(drivername="postgresql")
        self._dsn = url.render_as_string(hide_password=False)
        # the log's engine has them as connect arguments, which its URL does not carry: without
        # them a LISTEN on a server that vanished would wait, unwarned, for hours
        self._socket_settings: dict[str, Any] = dict(pg_connection_defaults(url.query))
        self._policy = runtime.policy
        self._interval_s = runtime.watcher.interval_s
        # set once a connection heard its own probe: a lost connection is then worth opening again
        self._listened = False
        self._heard_here = False  # the same, on the connection now open
        self._thread = threading.Thread(target=self._run, name="memabra-listen", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop listening and wait for a reload in flight: it reads through the log's pool, which
        the caller may be about to dispose."""
        self._stop.set()
        if threading.current_thread() is not self._thread:
            with self._reloading:  # the thread itself exits at its next wake, on its own connection
                pass

    def _reload(self) -> bool:
        with self._reloading:
            runtime = self._runtime()
            if runtime is None or self._stop.is_set():
                return False
            runtime.watcher.refresh(force=True)
            return True

    def _probe(self, payload: str) -> bool:
        """Send ``payload`` on the channel from another connection (the log's pool), the way a
        promote's trigger does; ``False`` when the runtime is gone or stopping."""
        with self._reloading:
            runtime = self._runtime()
            if runtime is None or self._stop.is_set():
                return False
            with runtime.log.engine.connect() as conn:
                conn.execute(
                    text("SELECT pg_notify(:channel, :payload)"), {"channel": NOTIFY_CHANNEL, "payload": payload}
                )
                conn.commit()
            return True

    def _run(self) -> None:
        """Listen until stopped; a connection the server ends (a restart, a failover,
        ``pg_terminate_backend``) is opened again with back-off, as polling alone would otherwise
        carry every later promote for as long as the process runs."""
        import psycopg

        # a connection refused or lost, on the LISTEN connection or on the log's pool (the probe, a reload)
        lost = (psycopg.OperationalError, OperationalError)
        backoff = 0.0
        warned = False  # one WARNING per outage: the retries while it lasts are DEBUG
        while True:
            try:
                self._listen()
                return
            except lost as exc:
                if self._heard_here:  # it listened since the last loss: a new outage, from 1 s again
                    backoff, warned = 0.0, False
                backoff = min(RELISTEN_MAX_S, max(1.0, backoff * 2))
                # never listening yet (started during an outage, or a URL the listener cannot use
                # although the log's engine can: credentials in connect_args) is not a lost connection
                what = "lost its database connection" if self._listened else "cannot connect to the database"
                logger.log(
                    logging.DEBUG if warned else logging.WARNING,
                    "LISTEN %s %s (%s); trying again every %gs at most (polling reloads meanwhile)",
                    NOTIFY_CHANNEL,
                    what,
                    _first_line(exc),
                    RELISTEN_MAX_S,
                )
                warned = True
            except Exception:  # noqa: BLE001 - polling still reloads; say why the push stopped
                logger.warning(
                    "LISTEN %s stopped; relying on polling every %.0fs",
                    NOTIFY_CHANNEL,
                    self._interval_s,
                    exc_info=True,
                )
                return
            if self._stop.wait(backoff) or self._runtime() is None:
                return

    def _listen(self) -> None:
        """One LISTEN connection, from the probe until it stops or fails. Once listening again after
        a lost connection, a reload: a promote made while nobody listened sent its NOTIFY to no one."""
        import psycopg  # only where a PostgreSQL log is served

        self._heard_here = False
        with psycopg.connect(self._dsn, autocommit=True, **self._socket_settings) as conn:
            schema = conn.execute("SELECT current_schema()").fetchone()
            mine = f"{schema[0] if schema else 'public'} {self._policy} "
            conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
            # no "schema policy " prefix: no listener reloads for it
            probe = f"probe {uuid.uuid4().hex}"
            if not self._probe(probe):
                return
            if self._listened and not self._reload():
                return
            heard_by: float | None = time.monotonic() + LISTEN_PROBE_S
            while not self._stop.is_set():
                for note in conn.notifies(timeout=1.0):
                    if note.payload == probe:
                        heard_by = None
                        self._listened = self._heard_here = True
                    elif note.payload.startswith(mine) and not self._reload():
                        return
                if heard_by is not None and time.monotonic() > heard_by:
                    logger.warning(
                        "LISTEN %s gets no notifications through this database connection (a "
                        "transaction-pooling proxy such as PgBouncer?): policy %s reloads a newly active "
                        "snapshot by polling, every %.0fs",
                        NOTIFY_CHANNEL,
                        self._policy,
                        self._interval_s,
                    )
                    return
                if self._runtime() is None:  # the process stopped serving this runtime
                    return


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
