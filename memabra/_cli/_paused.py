"""``memabra episodes paused``: turns an interrupt paused that nobody has resumed, and giving up on
them (each is logged as a failed episode, so its routing decision stays in the log)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from memabra._cli._common import JsonOutOption, console, parse_time, plain, run_guarded, write_json
from memabra._cli._database import DbOption
from memabra._config import load_reward_config
from memabra._feedback import RewardService
from memabra._paused_turns import abandon_paused_turn
from memabra.storage import EpisodeLog

__all__ = ["episodes_paused"]


def episodes_paused(
    db: DbOption = None,
    before: Annotated[str | None, typer.Option(help="ISO time: only turns paused before it.")] = None,
    abandon: Annotated[
        bool,
        typer.Option(
            "--abandon",
            help="Log each listed turn as a failed episode (accepted: false), with its routing decision and steps.",
        ),
    ] = False,
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="At most this many, the oldest pause first.")] = 100,
    json_out: JsonOutOption = None,
) -> None:
    """Turns an interrupt paused that nobody has resumed, the oldest pause first."""
    with run_guarded(EpisodeLog, db) as log:
        turns = run_guarded(log.suspended_turns, before=parse_time(before, "--before"), limit=limit)
        logged: dict[str, str] = {}
        if abandon:
            rewards = RewardService(log, load_reward_config())
            for kept in turns:
                logged[kept.turn_id] = run_guarded(abandon_paused_turn, rewards, kept)
    table = Table(title=f"paused turns ({len(turns)}{'+' if len(turns) == limit else ''})")
    for column in ("turn", "paused", "user", "thread", "query", "steps", *(("logged as",) if abandon else ())):
        table.add_column(column, no_wrap=column in ("turn", "logged as"))
    for kept in turns:
        table.add_row(
            kept.turn_id,
            kept.suspended_at.strftime("%Y-%m-%d %H:%M:%S"),
            plain(kept.user_id),
            plain(kept.thread_id or "-"),
            plain(str(kept.document.get("query", ""))[:49]),
            str(len(kept.document.get("steps", ()))),
            *((logged[kept.turn_id],) if abandon else ()),
        )
    console.print(table)
    if turns and not abandon:
        console.print("--abandon logs them as failed episodes; a run resumed later starts a new turn")
    write_json(
        json_out,
        {
            "paused": [
                {
                    "turn_id": kept.turn_id,
                    "episode_id": kept.episode_id,
                    "user": kept.user_id,
                    "thread": kept.thread_id,
                    "paused_at": kept.suspended_at.isoformat(),
                    "query": kept.document.get("query"),
                    "logged_as": logged.get(kept.turn_id),
                }
                for kept in turns
            ]
        },
    )
