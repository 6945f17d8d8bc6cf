"""``memabra status``: is every reward on its way to a learner? A health check for cron and probes."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
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
    err_console,
    error_line,
    fail,
    write_json,
    write_output,
)
from memabra._cli._database import ProbeDbOption
from memabra._cli._retention import parse_age
from memabra._cli._tables import Table
from memabra._errors import MemabraError
from memabra._health import DEFAULT_MAX_LAG, HealthProblem, format_age, health_problems
from memabra._metrics import status_metrics
from memabra._records import utcnow
from memabra.storage import EpisodeLog, LogStatus, PolicyStatus, head_revision, resolve_url
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
            "planner's estimate (shown '~'), so a check stays cheap on a log of millions of episodes.",
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
    Exits 4 when a reward waits longer than --max-lag (a learner is missing, stuck or held back),
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
    problems = health_problems(state, limit, policies=policies or None)
    _print(state, where, problems, limit)
    report.metrics(state, problems, policies or None)
    write_json(
        json_out,
        {
            "database": where,
            "healthy": not problems,
            "error": None,
            "max_lag_seconds": limit.total_seconds(),
            "problems": [{"check": p.check, "message": p.message} for p in problems],
            "status": state,
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
            "status": None,
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


def _one_line(exc: BaseException) -> str:
    # a MemabraError first: DatabaseUnavailableError is also SQLAlchemy's, and its message names the URL
    if isinstance(exc, SQLAlchemyError) and not isinstance(exc, MemabraError):
        return f"database error: {error_line(exc)}"
    return str(exc)


def _print(state: LogStatus, where: str, problems: tuple[HealthProblem, ...], limit: timedelta) -> None:
    now = state.checked_at
    head = head_revision()
    schema = "current" if state.schema_revision == head else f"head is {head}"
    lines = [
        f"database  {where} ({state.backend}, schema {state.schema_revision}, {schema})",
        f"episodes  {_episodes(state)}"
        + ("" if state.last_episode_at is None else f"; the last {_when(state.last_episode_at, now)}"),
        f"feedback  {state.open_windows:,} window(s) open, {state.overdue:,} past their end"
        + ("" if state.overdue_since is None else f"; the oldest ended {_when(state.overdue_since, now)}"),
        f"rewards   {state.unlearned:,}{'+' if state.unlearned_capped else ''} final and not learned"
        + ("" if state.unlearned_since is None else f"; the oldest final {_when(state.unlearned_since, now)}"),
    ]
    if state.paused_turns:
        lines.append(
            f"paused    {state.paused_turns:,} turn(s) waiting on an interrupt"
            + ("" if state.paused_since is None else f"; the oldest paused {_when(state.paused_since, now)}")
        )
    if state.lost_turns:
        lines.append(
            f"lost      {state.lost_turns:,} turn(s) whose process died mid-turn"
            + ("" if state.lost_since is None else f"; the oldest running since {_when(state.lost_since, now)}")
        )
    lines.append(_failed(state))
    if state.unfinished_deletions:
        oldest = state.unfinished_deletions[0]
        lines.append(
            f"deletions {len(state.unfinished_deletions)} running or stopped part way; the longest without "
            f"progress {_when(oldest.progressed_at, now)} (`memabra episodes deletions`)"
        )
    for line in lines:
        console.print(Text(line), highlight=False)
    if state.policies:
        table = Table(title="policies", title_justify="left")
        for column in ("policy", "serving", "learner checkpoint", "learned", "lease", "not learned yet"):
            table.add_column(column, justify="right" if column == "learned" else "left")
        for p in state.policies:
            cp = p.checkpoint
            table.add_row(
                Text(p.policy),
                Text(p.active_version or "(no active snapshot)"),
                Text(
                    "none"
                    if cp is None
                    else f"{cp.snapshot_version or '-'}, committed {format_age(now - cp.updated_at)} ago"
                ),
                "-" if cp is None else f"{cp.learned:,}",
                Text("free" if p.lease is None else p.lease.describe()),
                Text(_backlog(p, now)),
            )
        console.print(table)
    else:
        console.print("no policy has a snapshot or a learner checkpoint yet")
    _print_reward_window(state)
    if problems:
        for problem in problems:
            err_console.print(Text(f"✗ {problem.check}: {problem.message}"), highlight=False)
    else:
        console.print(Text(f"✓ no reward has waited longer than {format_age(limit)}"), highlight=False)


_WINDOW_COLUMNS = (
    "policy",
    "snapshot",
    "rewards",
    "mean reward",
    "sd",
    "success",
    "corrected",
    "missed",
    "tool errors",
)


def _print_reward_window(state: LogStatus) -> None:
    """Per policy and snapshot served, the rewards that became final in the window: each policy's
    active snapshot first, then the previous one (what a rollback re-activates), then the rest, the
    busiest first and, among as busy, the newest (most online updates) first."""
    if state.rewards_since is None:
        return
    window = format_age(state.checked_at - state.rewards_since)
    if not state.reward_window:
        console.print(Text(f"no reward became final in the last {window}"), highlight=False)
        return
    roles = {(p.policy, p.active_version): "active" for p in state.policies}
    roles.update({(p.policy, p.previous_version): "previous" for p in state.policies})
    order = {"active": 0, "previous": 1}
    rows = sorted(
        state.reward_window,
        key=lambda w: (
            w.policy,
            order.get(roles.get((w.policy, w.version), ""), 2),
            -w.rewards,
            -_online_updates(w.version),
            w.version,
        ),
    )
    table = Table(title=f"rewards final in the last {window}, per snapshot served", title_justify="left")
    for column in _WINDOW_COLUMNS:
        table.add_column(column, justify="left" if column in ("policy", "snapshot") else "right")
    for w in rows:
        role = roles.get((w.policy, w.version))
        table.add_row(
            Text(w.policy),
            Text(w.version + (f" ({role})" if role else "")),
            f"{w.rewards:,}",
            f"{w.mean_reward:+.3f}",
            f"{w.reward_stddev:.3f}",
            f"{w.mean_success:.2f}",
            f"{w.corrected_share:.1%}",
            f"{w.missed_share:.1%}",
            f"{w.tool_error_share:.1%}",
        )
    console.print(table)


def _online_updates(version: str) -> int:
    """The N of a version ``ROOT+N`` (0 for a root): a learner saves ``+100``, ``+200``, ... as it
    goes, and as text ``+1000`` sorts before ``+200``, so a run of equally busy snapshots (the
    demo's, 100 turns each) would read out of order."""
    _root, plus, updates = version.rpartition("+")
    return int(updates) if plus and updates.isdigit() else 0


def _episodes(state: LogStatus) -> str:
    if state.episodes_accuracy == "estimate":
        return f"~{state.episodes:,} (the planner's estimate; --exact counts them)"
    if state.episodes_accuracy == "at least":
        return f"{state.episodes:,}+ (counted up to there; --exact counts them all)"
    return f"{state.episodes:,}"


def _backlog(p: PolicyStatus, now: datetime) -> str:
    if not p.backlog:
        return "0"
    count = f"{p.backlog:,}{'+' if p.backlog_capped else ''}"
    text = f"{count}; the oldest final {format_age(now - p.backlog_since)}" if p.backlog_since else count
    return text + (f", {p.held_back:,}{'+' if p.held_back_capped else ''} held back" if p.held_back else "")


def _failed(state: LogStatus) -> str:
    """The failed turns of the window by cause, and the listing that shows them (its ``--since``:
    the window's start, as the count reads it)."""
    if state.failed_since is None:
        return "failed    not counted"
    window = format_age(state.checked_at - state.failed_since)
    total = sum(state.failed_turns.values())
    if not total:
        return f"failed    no turn in the last {window}"
    causes = ", ".join(f"{cause} {count:,}" for cause, count in state.failed_turns.items() if count)
    since = state.failed_since.strftime("%Y-%m-%dT%H:%M:%SZ")
    return (
        f"failed    {total:,} turn(s) in the last {window}: {causes} (`memabra episodes list --failed --since {since}`)"
    )


def _when(at: datetime | None, now: datetime) -> str:
    if at is None:
        return "-"
    return f"{format_age(now - at)} ago, {at.strftime('%Y-%m-%d %H:%M:%S')}"
