"""The bench run that wrote a ``--log-db`` log: one durable row, ``bench_runs``, in the log itself.

The row is taken when the run opens its log, before any decision is written, and says ``running``
until the run ends: ``finished`` when its logger made every decision, ``stopped`` when it stopped
cleanly before that (Ctrl-C, an error). A run killed outright (SIGKILL, out of memory) never gets
to change it, so a log whose row still says ``running`` is one whose run is still going or was
killed: either way its decisions are not one whole run's, and nothing holds a truth to check them
against. :func:`refuse_unfinished_bench_log` is what readers call before they evaluate.

The row is also the lock that keeps a log to one run: its key is fixed, so of two runs opening the
same new log at the same moment one inserts it and the other is refused before writing anything.
The table belongs to the bench, not to the episode log's migrations: it exists only in bench logs.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Literal

from sqlalchemy import Column, Connection, Engine, Integer, MetaData, String, Table, inspect, select, text, update
from sqlalchemy.exc import IntegrityError

from memabra._errors import ConfigError
from memabra._records import utcnow
from memabra.storage import Transactions
from memabra.storage._engine import shown_url

__all__ = ["BenchRun", "RunStatus", "bench_run_of", "claim_log", "end_run", "refuse_unfinished_bench_log"]

RunStatus = Literal["running", "stopped", "finished"]

_KEY = "bench"  # the one row a bench log holds: its primary key is what stops a second run
# PostgreSQL: two first CREATE TABLEs of the same new table can both pass IF NOT EXISTS and one then
# fails on the catalog's unique index; a transaction-scoped advisory lock queues them instead
_PG_LOCK_ID = 0x6D656D6162726131

_TABLE = Table(
    "bench_runs",
    MetaData(),
    Column("log", String(16), primary_key=True),
    Column("run_id", String(64), nullable=False),
    Column("logger", String(200), nullable=False),
    Column("expected", Integer, nullable=True),
    Column("written", Integer, nullable=False),
    Column("status", String(16), nullable=False),
    Column("started_at", String(40), nullable=False),
    Column("ended_at", String(40), nullable=True),
    Column("host", String(200), nullable=False),
)


@dataclass(frozen=True, slots=True)
class BenchRun:
    """What a bench log's row says about the run that wrote it (times as ISO 8601, UTC)."""

    run_id: str
    logger: str
    expected: int | None
    written: int
    status: RunStatus
    started_at: str
    ended_at: str | None
    host: str

    @property
    def finished(self) -> bool:
        return self.status == "finished"


def claim_log(engine: Engine, logger_name: str, expected: int | None) -> BenchRun:
    """Mark the log at ``engine`` as being written by a new run, or refuse (:class:`ConfigError`)
    where another run has marked it: in one write transaction, under a lock, before any decision."""
    run = BenchRun(
        run_id=f"{os.getpid()}-{utcnow().strftime('%Y%m%dT%H%M%S%f')}",
        logger=logger_name,
        expected=expected,
        written=0,
        status="running",
        started_at=utcnow().isoformat(),
        ended_at=None,
        host=socket.gethostname()[:200],
    )

    def claim(conn: Connection) -> BenchRun | None:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": _PG_LOCK_ID})
        _TABLE.create(conn, checkfirst=True)
        held = _read(conn)
        if held is None:
            conn.execute(_TABLE.insert().values(log=_KEY, **_values(run)))
        return held

    try:
        held = Transactions(engine).write_connection(claim, what="claim the bench log")
    except IntegrityError:  # the key is the backstop of the lock: a row inserted meanwhile
        held = bench_run_of(engine)
        if held is None:  # not the run row's key that was violated: not a claim another run holds
            raise
    if held is not None:
        raise ConfigError(
            f"the log at {shown_url(engine.url)} is already written by the bench run "
            f"{held.run_id} (logger {held.logger}, started {held.started_at} on {held.host}, {held.status}); "
            "a bench log holds one run's decisions, so that `memabra ope log` can be checked against that run: "
            "give each bench run a new database"
        )
    return run


def end_run(engine: Engine, run: BenchRun, written: int, status: RunStatus) -> None:
    """Record how the run ended (``finished`` or ``stopped``) and how many decisions it wrote."""

    def end(conn: Connection) -> None:
        conn.execute(
            update(_TABLE)
            .where(_TABLE.c.log == _KEY, _TABLE.c.run_id == run.run_id)
            .values(written=written, status=status, ended_at=utcnow().isoformat())
        )

    Transactions(engine).write_connection(end, what="end the bench run")


def bench_run_of(engine: Engine) -> BenchRun | None:
    """The bench run that wrote the log at ``engine``; None for a log no bench run wrote."""
    with engine.connect() as conn:
        if not inspect(conn).has_table(_TABLE.name):
            return None
        return _read(conn)


def refuse_unfinished_bench_log(engine: Engine) -> None:
    """Raise :class:`ConfigError` where the log at ``engine`` was written by a bench run that did not
    finish: its decisions cover only the rounds played before it stopped (or are still coming)."""
    run = bench_run_of(engine)
    if run is None or run.finished:
        return
    where = shown_url(engine.url)
    of = f" of the {run.expected}" if run.expected is not None else ""
    if run.status == "running":
        how = (
            f"is marked running since {run.started_at} (on {run.host}): it is still running, or it was killed "
            "(SIGKILL, out of memory) before it finished, and the log holds the decisions written before that"
        )
    else:
        how = f"stopped at {run.ended_at} after logging {run.written}{of} decisions of {run.logger}"
    raise ConfigError(
        f"{where} is the log of an unfinished bench run: the run {run.run_id} (logger {run.logger}) {how}; "
        "no report holds a truth for a partial log: run the bench again with a new --log-db"
    )


def _read(conn: Connection) -> BenchRun | None:
    row = conn.execute(select(_TABLE).where(_TABLE.c.log == _KEY)).mappings().first()
    if row is None:
        return None
    return BenchRun(
        run_id=row["run_id"],
        logger=row["logger"],
        expected=row["expected"],
        written=row["written"],
        status=row["status"],
        started_at=row["started_at"],
        ended_at=row["ended_at"],
        host=row["host"],
    )


def _values(run: BenchRun) -> dict[str, object]:
    return {
        "run_id": run.run_id,
        "logger": run.logger,
        "expected": run.expected,
        "written": run.written,
        "status": run.status,
        "started_at": run.started_at,
        "ended_at": run.ended_at,
        "host": run.host,
    }
