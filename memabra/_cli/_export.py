"""``memabra episodes export``: the log's decisions as JSON Lines, for offline evaluation elsewhere."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.progress import TextColumn
from rich.text import Text

from memabra._cli._common import (
    STDOUT,
    check_json_output,
    console,
    fail,
    open_output,
    parse_time,
    run_guarded,
    transient_progress,
)
from memabra._cli._database import DbOption
from memabra.storage import EpisodeLog

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
    db: DbOption = None,
) -> None:
    """Every logged decision, one JSON object per line, in time order: the context, every candidate
    offered with its features, each slot's full distribution, the propensity, the used candidates
    and the reward with its components (format `memabra.decision/1`)."""
    from memabra.evals.offline import export_decisions

    if user is not None and not user.strip():
        fail("--user must not be blank (leave it out to export every user's decisions)")
    start, end = parse_time(since, "--since"), parse_time(until, "--until")
    with (
        run_guarded(EpisodeLog, db) as log,
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
