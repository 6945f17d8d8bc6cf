"""``memabra episodes export``: the log's decisions as JSON Lines, for offline evaluation elsewhere."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.progress import TextColumn
from rich.text import Text

from memabra._cli._common import (
    STDOUT,
    check_json_output,
    check_output_path,
    console,
    err_console,
    fail,
    open_output,
    parse_time,
    run_guarded,
    transient_progress,
    write_output,
)
from memabra._cli._database import DbOption
from memabra.storage import EpisodeLog

if TYPE_CHECKING:
    from memabra.evals.offline._export import ExportCursor

__all__ = ["episodes_export"]


def episodes_export(
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            help="JSON Lines file to write ('-': standard output, notes to stderr).",
            callback=check_json_output,
            show_default=False,
        ),
    ],
    since: Annotated[str | None, typer.Option("--since", help="ISO time: decisions at or after.")] = None,
    until: Annotated[str | None, typer.Option("--until", help="ISO time: decisions before.")] = None,
    user: Annotated[
        str | None, typer.Option("--user", help="Only this user's decisions (what the log holds about them).")
    ] = None,
    final_only: Annotated[bool, typer.Option("--final-only", help="Only decisions whose reward is final.")] = False,
    after: Annotated[
        str | None,
        typer.Option(
            "--after",
            help="Incremental: the decisions whose reward became final after this cursor (what the last "
            "run reported; 'start' the first time), in that order. Needs --final-only.",
        ),
    ] = None,
    cursor_out: Annotated[
        Path | None,
        typer.Option(
            "--cursor-out",
            help="With --after: write the cursor the next run takes to this file, once --out is written.",
            callback=check_output_path,
            show_default=False,
        ),
    ] = None,
    db: DbOption = None,
) -> None:
    """Every logged decision, one JSON object per line, in time order: the context, every candidate
    offered with its features, each slot's full distribution, the propensity, the used candidates
    and the reward with its components (format `memabra.decision/1`). With --final-only --after
    CURSOR, only those whose reward became final since the run that reported CURSOR, in the order
    they became final, each once over a chain of runs (a nightly load); the new cursor goes to
    stderr, --cursor-out and each line's `cursor`."""
    from memabra.evals.offline._export import check_cursor, parse_cursor

    if user is not None and not user.strip():
        fail("--user must not be blank (leave it out to export every user's decisions)")
    start, end = parse_time(since, "--since"), parse_time(until, "--until")
    if cursor_out is not None and after is None:
        fail("--cursor-out needs --after (give --after start on the first run)")
    if after is not None:
        if not final_only:
            fail("--after exports decisions as their reward becomes final: add --final-only")
        if start is not None or end is not None:
            # the cursor moves past every final reward read: decisions the window left out would never come
            fail("--after cannot be combined with --since/--until (the cursor would skip what the window leaves out)")
        if cursor_out is not None and out != STDOUT and cursor_out.resolve() == out.resolve():
            fail("--cursor-out must not be the --out file")
    cursor = run_guarded(parse_cursor, after) if after is not None else None
    with run_guarded(EpisodeLog, db) as log:
        if cursor is not None:
            # checked before the output is opened: a cursor refused leaves every file as it was
            cursor = run_guarded(check_cursor, log, cursor, user_id=user)
            _export_after(log, out, cursor, cursor_out, user)
            return
        _export_by_time(log, out, start, end, user, final_only)


def _export_after(log: EpisodeLog, out: Path, cursor: ExportCursor, cursor_out: Path | None, user: str | None) -> None:
    from memabra.evals.offline._export import export_final_decisions

    with (
        transient_progress(TextColumn("{task.completed} decisions exported")) as bar,
        open_output(out) as stream,
    ):
        task = bar.add_task("export", total=None)
        done = run_guarded(
            export_final_decisions,
            log,
            stream,
            after=cursor,
            user_id=user,
            progress=lambda n: bar.update(task, completed=n),
        )
    # written only once --out is in place: a failure before leaves the previous cursor, and the
    # next run exports again what this one wrote (each line's cursor says where it stands)
    if cursor_out is not None:
        write_output(cursor_out, f"{done.cursor}\n")
    where = "standard output" if out == STDOUT else str(out)
    console.print(Text(f"exported {done.written} decision(s) to {where}"), highlight=False)
    err_console.print(Text(f"cursor {done.cursor}"), highlight=False, soft_wrap=True)


def _export_by_time(
    log: EpisodeLog,
    out: Path,
    start: datetime | None,
    end: datetime | None,
    user: str | None,
    final_only: bool,
) -> None:
    from memabra.evals.offline import export_decisions

    with (
        transient_progress(TextColumn("{task.completed} decisions exported")) as bar,
        open_output(out) as stream,
    ):
        task = bar.add_task("export", total=None)
        written = run_guarded(
            export_decisions,
            log,
            stream,
            since=start,
            until=end,
            user_id=user,
            final_only=final_only,
            progress=lambda n: bar.update(task, completed=n),
        )
    where = "standard output" if out == STDOUT else str(out)
    console.print(Text(f"exported {written} decision(s) to {where}"), highlight=False)
