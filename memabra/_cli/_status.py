"""``memabra status``: is every reward on its way to a learner? A health check for cron and probes."""

from __future__ import annotations

import dataclasses
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.text import Text
from sqlalchemy.exc import SQLAlchemyError

from memabra._cli._common import (
    STDOUT,
    JsonOutOption,
    check_json_output,
    console,
    error_line,
    fail,
    write_json,
    write_output,
)
from memabra._cli._database import ProbeDbOption
from memabra._cli._retention import parse_age
from memabra._cli._status_encoder import ENCODER_CHECK, read_encoder
from memabra._cli._status_view import print_status
from memabra._errors import MemabraError
from memabra._health import DEFAULT_MAX_LAG, HealthProblem, format_age, health_problems, stored_vectors
from memabra._metrics import status_metrics
from memabra._records import utcnow
from memabra._write_check import write_problems, write_state, write_warnings
from memabra.storage import EpisodeLog, LogStatus, resolve_url
from memabra.storage._engine import shown_url

__all__ = ["DEFAULT_TIMEOUT_S", "UNHEALTHY_EXIT", "status"]

UNHEALTHY_EXIT = 4
"""Exit status when a check fails: distinct from 1 (the command could not run) and 2 (usage), so a
probe tells "the log is behind" from "the check is broken"."""


DEFAULT_TIMEOUT_S = 30.0
"""How long ``memabra status`` waits for the database before it gives up: well under a probe's
period, well over what the check's reads take on a log of millions of episodes."""


def _check_age(value: str) -> str:
    parse_age(value)  # names the option on a bad value, while the command line is parsed
    return value


def status(
    db: ProbeDbOption = None,
    max_lag: Annotated[
        str,
        typer.Option(
            "--max-lag",
            help="How long a closed feedback window may stay open, or a final reward stay unlearned, "
            "before the check fails: 30m, 2h, 1d.",
            callback=_check_age,
        ),
    ] = format_age(DEFAULT_MAX_LAG),
    policies: Annotated[
        list[str] | None,
        typer.Option(
            "--policy",
            help="Check only this policy's learner (repeatable): a log that once served another policy keeps "
            "its checkpoint, and that learner is behind for good.",
        ),
    ] = None,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            min=0.0,
            help="Give up (exit 1) when the database has not answered within this many seconds "
            "(a hung server, a dropped link); 0 waits for ever.",
        ),
    ] = DEFAULT_TIMEOUT_S,
    exact: Annotated[
        bool,
        typer.Option(
            "--exact",
            help="Count every episode and every reward waiting for a learner. By default the counts that grow "
            "with the log stop at a cap (shown '10,000+') and, on PostgreSQL, a large episode count is the "
            "planner's estimate (shown '~'), so a check stays cheap on a log of millions of episodes; the "
            "encoder's vector key is read too (a named model folder's key hashes its files).",
        ),
    ] = False,
    json_out: JsonOutOption = None,
    prometheus_out: Annotated[
        Path | None,
        typer.Option(
            "--prometheus",
            help="Also write the status as Prometheus metrics here, for node_exporter's textfile collector "
            "(written atomically; '-': to standard output, the tables to stderr). memabra_status_up is 0 "
            "when the check could not run.",
            show_default=False,
            callback=check_json_output,
        ),
    ] = None,
) -> None:
    """Where the log stands: episodes, feedback windows open and overdue, and per policy the
    serving snapshot, the learner's checkpoint and lease, and the final rewards not learned yet;
    per snapshot served, what the rewards that became final in the last hour came to.
    Also whether the database takes writes (a hot standby, read-only transactions, a SQLite file
    or folder its writers cannot write, its volume nearly full; under 1 GiB free is a warning only),
    the vectors stored per encoder key, and the encoder this environment names
    (MEMABRA_EMBEDDING_MODEL or the config file's [embeddings] model) with its key; a setting
    naming no usable model fails the check.
    Exits 4 when a reward waits longer than --max-lag (a learner is missing, stuck or held back)
    or the database cannot take writes,
    1 when the check could not run (--json then holds "healthy": false and the "error",
    --prometheus memabra_status_up 0)."""
    if json_out == STDOUT and prometheus_out == STDOUT:
        raise typer.BadParameter("--json - and --prometheus - would both write to standard output; name a file for one")
    limit = parse_age(max_lag)
    where = _where(db)
    report = _Report(json_out, prometheus_out, limit, time.perf_counter())
    try:
        with _deadline(timeout), EpisodeLog(db) as log:
            where = shown_url(log.engine.url)
            state = log.status(exact=exact)
            writes = write_state(log.engine)
            vectors = stored_vectors(log.engine, exact=exact)
    except (MemabraError, SQLAlchemyError, _NoAnswer) as exc:
        _cannot_check(report, where, _one_line(exc))
    report.read_done()
    if policies:
        known = {p.policy for p in state.policies}
        unknown = [p for p in policies if p not in known]
        if unknown:
            _cannot_check(
                report,
                where,
                f"--policy {unknown[0]!r}: the log has no snapshot or learner checkpoint of it"
                f" (it has: {', '.join(sorted(known)) or 'none'})",
            )
    encoder = read_encoder(key=exact)
    problems = health_problems(state, limit, policies=policies or None) + write_problems(writes)
    if encoder.error is not None:
        # the agent refuses to start on this setting: a check that passed would hide it
        problems += (HealthProblem(ENCODER_CHECK, encoder.error),)
    warnings = write_warnings(writes)
    print_status(state, where, problems, limit, writes, vectors, warnings, encoder)
    report.metrics(state, problems, policies or None)
    write_json(
        json_out,
        {
            "database": where,
            "healthy": not problems,
            "error": None,
            "max_lag_seconds": limit.total_seconds(),
            "problems": [{"check": p.check, "message": p.message} for p in problems],
            "warnings": [{"check": w.check, "message": w.message} for w in warnings],
            "status": state,
            "writes": {
                **_fields(writes),
                "writable": writes.writable,
                "disk_low": writes.disk_low,
                "disk_critical": writes.disk_critical,
            },
            "embeddings": [_fields(v) for v in vectors],
            "encoder": _fields(encoder),
        },
    )
    if problems:
        raise typer.Exit(UNHEALTHY_EXIT)


class _NoAnswer(Exception):
    pass


class _Report:
    """Where ``--json`` and ``--prometheus`` go, and when the check started (its duration is a metric)."""

    def __init__(self, json_out: Path | None, prometheus_out: Path | None, limit: timedelta, started: float) -> None:
        self.json_out = json_out
        self.prometheus_out = prometheus_out
        self.limit = limit
        self.started = started
        self.duration_s: float | None = None

    def read_done(self) -> None:
        """The status read (connect included) ended: what ``memabra_status_duration_seconds`` measures."""
        self.duration_s = time.perf_counter() - self.started

    def metrics(
        self, state: LogStatus | None, problems: tuple[HealthProblem, ...] = (), policies: list[str] | None = None
    ) -> None:
        """Write ``--prometheus``'s file (temporary file and rename: the collector never reads half of one)."""
        if self.prometheus_out is None:
            return
        text = status_metrics(
            state,
            problems=problems,
            writes_checked=True,
            encoder_checked=True,
            max_lag=self.limit,
            duration_s=round(self.duration_s if self.duration_s is not None else time.perf_counter() - self.started, 6),
            checked_at=state.checked_at if state is not None else utcnow(),
            checked_policies=policies,
        )
        write_output(self.prometheus_out, text)
        if self.prometheus_out != STDOUT:
            console.print(Text(f"wrote {self.prometheus_out}"), highlight=False)


@contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Raise :class:`_NoAnswer` in this (the main) thread after ``seconds``: a connect or a read
    that hangs ends there, whatever the driver's own timeouts. Off when 0 or outside the main thread."""
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return

    def _expired(_signum: int, _frame: Any) -> None:
        raise _NoAnswer(f"no answer within {seconds:g} s from the database (--timeout)")

    previous = signal.signal(signal.SIGALRM, _expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _cannot_check(report: _Report, where: str, message: str) -> NoReturn:
    """Exit 1 with ``message``, first replacing ``--json``'s and ``--prometheus``' files: a scraper
    must not read an earlier run's ``healthy: true`` (or ``memabra_status_up 1``) when this one
    could not check."""
    write_json(
        report.json_out,
        {
            "database": where,
            "healthy": False,
            "error": message,
            "max_lag_seconds": report.limit.total_seconds(),
            "problems": [],
            "warnings": [],
            "status": None,
            "writes": None,
            "embeddings": None,
            "encoder": None,
        },
    )
    report.metrics(None)
    fail(message)


def _where(db: str | None) -> str:
    """The database the check reads, password hidden, for a report written before it is open."""
    try:
        return shown_url(resolve_url(db))
    except Exception:  # a malformed URL: opening it names the problem
        return "?"


def _fields(record: Any) -> dict[str, Any]:
    """A slotted dataclass's fields by name, for ``--json``."""
    return {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}


def _one_line(exc: BaseException) -> str:
    # a MemabraError first: DatabaseUnavailableError is also SQLAlchemy's, and its message names the URL
    if isinstance(exc, SQLAlchemyError) and not isinstance(exc, MemabraError):
        return f"database error: {error_line(exc)}"
    return str(exc)
