"""``memabra episodes paused``: turns the log keeps unfinished (paused by an interrupt and not
resumed, or routed by a process that died before logging them), and giving up on them (each is
logged as a failed episode, so its routing decision stays in the log)."""

from __future__ import annotations

import socket
from typing import Annotated

import typer

from memabra._cli._common import JsonOutOption, cli_actor, console, parse_time, plain, run_guarded, write_json
from memabra._cli._database import DbOption
from memabra._cli._tables import Table
from memabra._config import load_reward_config
from memabra._errors import InvalidRecordError, UnknownEpisodeError
from memabra._feedback import RewardService
from memabra._health import format_age
from memabra._paused_turns import abandon_paused_turn
from memabra.storage import RUNNING_TURN_LIMIT, EpisodeLog, SuspendedTurn, TurnWentOnError

__all__ = ["episodes_paused"]

_LIMIT = format_age(RUNNING_TURN_LIMIT)


def episodes_paused(
    db: DbOption = None,
    before: Annotated[str | None, typer.Option(help="ISO time: only turns kept (paused, or routed) before it.")] = None,
    lost: Annotated[
        bool,
        typer.Option(
            "--lost",
            help=f"Only turns whose process died mid-turn (running for over {_LIMIT}), not those waiting on a person.",
        ),
    ] = False,
    abandon: Annotated[
        bool,
        typer.Option(
            "--abandon",
            help="Log each listed paused or lost turn as a failed episode (accepted: false), with its routing "
            "decision and steps; turns still running are left alone.",
        ),
    ] = False,
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="At most this many, the oldest first.")] = 100,
    json_out: JsonOutOption = None,
) -> None:
    """Turns the log keeps unfinished, the oldest first: paused by an interrupt and not resumed,
    running, or lost (routed over an hour ago by a process that died before logging them)."""
    with run_guarded(EpisodeLog, db) as log:
        # lost by the database's clock, as the status counts them: this host's may be minutes apart
        now = run_guarded(log.database_now)
        turns = run_guarded(
            log.suspended_turns, before=parse_time(before, "--before"), limit=limit, lost_at=now if lost else None
        )
        logged: dict[str, str] = {}
        went_on: dict[str, TurnWentOnError] = {}
        if abandon:
            rewards = RewardService(log, run_guarded(load_reward_config))
            for kept in turns:
                if kept.state(now) != "running":
                    outcome = run_guarded(_abandon, log, rewards, kept)
                    if isinstance(outcome, TurnWentOnError):
                        went_on[kept.turn_id] = outcome
                    else:
                        logged[kept.turn_id] = outcome
    full = "+" if len(turns) == limit else ""
    table = Table(title=f"{'lost' if lost else 'unfinished'} turns ({len(turns)}{full})")
    for column in ("turn", "state", "since", "user", "thread", "query", "steps", *(("logged as",) if abandon else ())):
        table.add_column(column, no_wrap=column in ("turn", "logged as"))
    for kept in turns:
        table.add_row(
            kept.turn_id,
            kept.state(now),
            kept.suspended_at.strftime("%Y-%m-%d %H:%M:%S"),
            plain(kept.user_id),
            plain(kept.thread_id or "-"),
            plain(str(kept.document.get("query", ""))[:49]),
            str(len(kept.document.get("steps", ()))),
            *((logged.get(kept.turn_id) or _not_logged(kept.turn_id, went_on),) if abandon else ()),
        )
    console.print(table)
    for refused in went_on.values():
        # a retry picked the turn up after the listing: it is no longer lost, so nothing failed
        console.print(plain(f"skipped, not abandoned: {refused}"))
    if turns and not abandon:
        console.print(
            "--abandon logs the paused and lost ones as failed episodes; a run resumed later starts a new turn"
        )
    write_json(
        json_out,
        {
            "paused": [
                {
                    "turn_id": kept.turn_id,
                    "episode_id": kept.episode_id,
                    "user": kept.user_id,
                    "thread": kept.thread_id,
                    "state": kept.state(now),
                    "since": kept.suspended_at.isoformat(),
                    "paused_at": kept.suspended_at.isoformat() if kept.paused else None,
                    "query": kept.document.get("query"),
                    "logged_as": logged.get(kept.turn_id),
                    "skipped": _skipped(kept.turn_id, went_on) if abandon and kept.turn_id not in logged else None,
                }
                for kept in turns
            ]
        },
    )


def _skipped(turn_id: str, went_on: dict[str, TurnWentOnError]) -> str:
    """Why an abandon left the turn alone, as the JSON says it (``skipped``)."""
    return "went on since listed" if turn_id in went_on else "running"


def _not_logged(turn_id: str, went_on: dict[str, TurnWentOnError]) -> str:
    return "- (went on since listed, skipped)" if turn_id in went_on else "- (running)"


def _abandon(log: EpisodeLog, rewards: RewardService, kept: SuspendedTurn) -> str | TurnWentOnError:
    """Log ``kept`` as failed; where its episode was logged since it was listed (by another host
    running this command, or by a retry of its run that finished), that episode is the one. Where
    a process went on with the turn since (a retry wrote a newer copy), nothing is logged and the
    refusal is returned: the turn is skipped, not an error of the batch."""
    try:
        return abandon_paused_turn(rewards, kept, actor=cli_actor(), client=socket.gethostname())
    except TurnWentOnError as refused:
        return refused
    except InvalidRecordError as refused:
        try:
            return log.resolve_episode_id(kept.episode_id)
        except UnknownEpisodeError:
            raise refused from None
