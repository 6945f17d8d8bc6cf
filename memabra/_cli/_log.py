"""``memabra episodes``, ``memabra rewards`` and ``memabra feedback``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from memabra._cli._common import (
    JsonOutOption,
    console,
    fail,
    parse_time,
    plain,
    run_guarded,
    write_json,
)
from memabra._cli._database import DbOption
from memabra._cli._episode_show import clip, print_episode
from memabra._cli._listing_output import print_in_batches, write_json_list
from memabra._cli._rewards import rewards_recompute
from memabra._cli._tables import Table
from memabra._config import load_reward_config
from memabra._episode_document import episode_document
from memabra._feedback import RewardService, same_feedback
from memabra._records import EpisodeSummary, Feedback, FeedbackKind
from memabra._retraction import post_retraction
from memabra.storage import (
    FAILURE_CAUSES,
    EpisodeFilter,
    EpisodeLog,
)

if TYPE_CHECKING:
    from memabra._memory import MemoryBackend

episodes_app = typer.Typer(
    help="Browse, export and delete logged episodes.", no_args_is_help=True, rich_markup_mode="markdown"
)
rewards_app = typer.Typer(
    help="Re-weight and finalise stored rewards.", no_args_is_help=True, rich_markup_mode="markdown"
)


EpisodeRefArgument = Annotated[
    str, typer.Argument(help="The episode's id, or its first characters (at least four) when they name one.")
]


def _open(db: str | None) -> EpisodeLog:
    return run_guarded(EpisodeLog, db)


def _cause(value: str | None) -> str | None:
    if value is not None and value not in FAILURE_CAUSES:
        raise typer.BadParameter(f"{value!r} is not a cause; use one of {', '.join(FAILURE_CAUSES)}")
    return value


@episodes_app.command("list")
def episodes_list(
    db: DbOption = None,
    user: str | None = typer.Option(None, help="Only this user's episodes."),
    thread: str | None = typer.Option(None, help="Only this conversation thread's episodes."),
    search: str | None = typer.Option(None, help="Only episodes whose query contains this text (any case)."),
    since: str | None = typer.Option(None, help="ISO time: episodes at or after."),
    until: str | None = typer.Option(None, help="ISO time: episodes before."),
    policy_version: str | None = typer.Option(None, "--policy-version", help="Only this exact policy version."),
    snapshot: str | None = typer.Option(
        None, help="Only what this saved snapshot served, its online updates included (as `policies list` counts)."
    ),
    corrected: bool | None = typer.Option(
        None,
        "--corrected/--not-corrected",
        show_default=False,
        help="Only episodes some feedback corrected (a correction, a wrong-tool verdict, a retracted memory: the reward's C), or none of them.",
    ),
    failed: bool | None = typer.Option(
        None,
        "--failed/--not-failed",
        show_default=False,
        help="Only turns logged as failed (an exception ended them, or a new message superseded them), or none of them.",
    ),
    cause: str | None = typer.Option(
        None,
        callback=_cause,
        help=f"Only failed turns of this cause: {', '.join(FAILURE_CAUSES)} (implies --failed).",
    ),
    limit: int = typer.Option(20, min=1, max=1000, help="Episodes per page."),
    cursor: str | None = typer.Option(None, help="Cursor printed under the previous page."),
    all_: bool = typer.Option(
        False,
        "--all",
        help="Every matching episode, newest first, read 1,000 at a time and written as they are read "
        "(for a script: with --json the file holds them all; nothing is counted first; --limit and "
        "--cursor do not apply).",
    ),
    json_out: JsonOutOption = None,
) -> None:
    """List episodes, newest first: a page of --limit (the database reads that page and stops), or
    every one with --all."""
    if search is not None and not search.strip():
        fail("--search must not be blank (leave it out to list every query)")
    if cause is not None and failed is False:
        raise typer.BadParameter("a cause names why a turn failed: leave out --not-failed", param_hint="--cause")
    if all_ and cursor is not None:
        fail("--all lists every episode from the newest: leave out --cursor")
    filters = EpisodeFilter(
        user_id=user,
        thread_id=thread,
        query_contains=search,
        since=parse_time(since, "--since"),
        until=parse_time(until, "--until"),
        policy_version=policy_version,
        snapshot=snapshot,
        corrected=corrected,
        failed=failed,
        failure_cause=cause,
    )
    with _open(db) as log:
        if all_:
            _list_all(log, filters, json_out)
            return
        page = run_guarded(log.list_episodes, filters, cursor=cursor, limit=limit, count=True)
    total = f"{page.total or 0:,}{'+' if page.total_capped else ''}"
    table = _episode_table(page.items, title=f"episodes ({total} match)")
    console.print(table)
    if page.next_cursor:
        console.print(f"next page: --cursor {page.next_cursor}")
    write_json(json_out, {"episodes": [_episode_json(e) for e in page.items], "next_cursor": page.next_cursor})


def _list_all(log: EpisodeLog, filters: EpisodeFilter, json_out: Path | None) -> None:
    """``episodes list --all``: tables of a batch each, or, with ``--json``, the file (the tables
    then are left out: a script asked for every row, and a person reads the file)."""
    if json_out is not None:
        n = run_guarded(
            write_json_list,
            json_out,
            (_episode_json(e) for e in log.iter_episodes(filters)),
            key="episodes",
            after={"next_cursor": None},
        )
        console.print(f"{n:,} episodes", highlight=False)
        return
    n = run_guarded(
        print_in_batches,
        log.iter_episodes(filters),
        lambda rows, first: _episode_table(rows, title="episodes (every match)" if first else None, header=first),
    )
    if not n:
        console.print(_episode_table([], title="episodes (0 match)"))
    console.print(f"{n:,} episodes", highlight=False)


def _episode_table(items: Sequence[EpisodeSummary], *, title: str | None, header: bool = True) -> Table:
    table = Table(title=title, show_header=header)
    table.add_column("id", no_wrap=True, min_width=32)
    for col in ("created", "user", "query", "policy", "reward", "corrected", "final", "failed"):
        table.add_column(col)
    for e in items:
        table.add_row(
            e.id,
            e.created_at.strftime("%Y-%m-%d %H:%M:%S"),
            plain(e.user_id),
            plain(clip(e.query, 49)),
            plain(e.policy_version or "-"),
            "-" if e.reward_total is None else f"{e.reward_total:+.3f}",
            "yes" if e.corrected else "",
            "yes" if e.finalized else "open",
            (e.failure_cause or "yes") if e.failed else "",
        )
    return table


def _episode_json(e: EpisodeSummary) -> dict[str, Any]:
    return {
        "id": e.id,
        "created": e.created_at.isoformat(),
        "user": e.user_id,
        "query": e.query,
        "policy_version": e.policy_version,
        "reward": e.reward_total,
        "corrected": e.corrected,
        "final": e.finalized,
        "failed": e.failed,
        "failure_cause": e.failure_cause,
    }


@episodes_app.command("show")
def episodes_show(
    episode_id: EpisodeRefArgument,
    db: DbOption = None,
    full: bool = typer.Option(
        False,
        "--full",
        help="Print the query, the answer and every step's arguments, result and error whole, as logged "
        "(else a long one is cut to its start and end, saying how much is left out).",
    ),
    json_out: JsonOutOption = None,
) -> None:
    """One episode: its decisions with every candidate, steps, feedback and reward. A long query,
    answer, result or error is printed cut unless `--full`; `--json` writes the whole turn as one
    document (the admin's Download JSON), each value as the log would keep it now."""
    with _open(db) as log:
        ep = run_guarded(log.get_episode, run_guarded(log.resolve_episode_id, episode_id))
        bodies = run_guarded(log.injected_bodies, ep)
        labels = run_guarded(log.all_memory_scores, [s.id for s in ep.selections]) if json_out else None
    print_episode(ep, bodies, full=full)
    write_json(json_out, episode_document(ep, bodies, labels=labels))


# How many unfinalisable episodes `rewards finalize` counts exactly before saying "more than".
_LEFT_OPEN_SHOWN = 1000


# first in `memabra rewards --help`, as before it moved out with its --json
rewards_app.command("recompute")(rewards_recompute)


@rewards_app.command("finalize")
def rewards_finalize(db: DbOption = None, json_out: JsonOutOption = None) -> None:
    """Apply the default reward to every episode whose feedback window has passed. Exits 1 when
    some could not be finalised (`--json` still says how many were and were not)."""
    with _open(db) as log:
        n = run_guarded(RewardService(log, run_guarded(load_reward_config)).finalize_due, limit=None)
        left = len(log.due_episode_ids(limit=_LEFT_OPEN_SHOWN + 1))
    console.print(f"finalised {n} episodes")
    # before the exit 1 below: a cron job reads how many were left as well as how many went
    write_json(
        json_out,
        {"finalized": n, "left_open": min(left, _LEFT_OPEN_SHOWN), "left_open_capped": left > _LEFT_OPEN_SHOWN},
    )
    if left:
        shown = f"more than {_LEFT_OPEN_SHOWN}" if left > _LEFT_OPEN_SHOWN else str(left)
        fail(f"{shown} episode(s) past their window could not be finalised; the errors above name them")


_STATUS_NOTES = {
    # A bare "late" reads as an error to someone trying `feedback` on an episode of the demo, whose
    # rewards are all final: say what it means, after the status word scripts match.
    "late": " (the episode's reward was already final or its feedback window had closed: kept for review, "
    "never applied)",
    "duplicate": " (this idempotency key was recorded already: nothing written)",
}


def feedback(
    episode_id: EpisodeRefArgument,
    payload: Annotated[
        str, typer.Argument(help='JSON object, e.g. \'{"correct": false, "correction": "my name is Ann"}\'.')
    ],
    db: DbOption = None,
    kind: FeedbackKind = typer.Option(FeedbackKind.EXPLICIT, help="explicit, implicit or programmatic."),
    source: str = typer.Option("cli", help="Who sent it."),
    key: str | None = typer.Option(
        None,
        "--idempotency-key",
        help="Posting the same key and payload twice is a no-op; the same key with another payload is refused.",
    ),
    json_out: JsonOutOption = None,
) -> None:
    """Record feedback on an episode (joins it by id; late feedback is stored but never learned).
    Its status is `stored`, `late` (kept for review, never applied) or `duplicate` (an idempotent
    retry: nothing written); each exits 0."""
    try:
        data = json.loads(payload)
    except json.JSONDecodeError as exc:
        fail(f"payload is not JSON: {exc}")
    if not isinstance(data, dict):
        fail("payload must be a JSON object")
    extra = {"idempotency_key": key} if key else {}
    with _open(db) as log:
        episode_id = run_guarded(log.resolve_episode_id, episode_id)
        fb = run_guarded(Feedback, episode_id=episode_id, kind=kind, source=source, payload=data, **extra)
        service = RewardService(log, run_guarded(load_reward_config))
        retraction = run_guarded(post_retraction, service, fb, partial(_memories, log))
        receipt = retraction.receipt
        earlier = None
        if receipt.status == "duplicate":
            stored = log.feedback_for(episode_id, include_late=True)
            earlier = next((f for f in stored if f.id == receipt.feedback_id), None)
    if earlier is not None and not same_feedback(earlier, fb):
        fail(
            f"idempotency key {key!r} already recorded other feedback on episode {episode_id} (feedback "
            f"{earlier.id}: {json.dumps(dict(earlier.payload), sort_keys=True, default=str)}); nothing was "
            "written: a retry must send the same payload, new feedback a new key"
        )
    console.print(f"feedback {receipt.feedback_id}: {receipt.status}{_STATUS_NOTES.get(receipt.status, '')}")
    retracted = fb.signals.explicit.retract_memory
    # markup off: the id is the caller's text ("[/x]" would be read as a closing tag), an error's "[SQL: ...]" too
    if receipt.retired_memory is not None:
        console.print(
            f"memory {receipt.retired_memory} retired (memabra memories restore brings it back)", markup=False
        )
    elif retracted is not None and retraction.failure is not None:
        # the id may well be current: saying it is not would leave a wrong memory recalled
        again = "this command again with the same --idempotency-key" if key else "memabra memories retire"
        console.print(
            f"memory {retracted} was not retired: retiring it failed after the feedback was stored "
            f"({retraction.failure}); run {again} to retire it",
            markup=False,
            highlight=False,
        )
    elif retracted is not None and earlier is None:
        console.print(
            f"memory {retracted} was not retired: it is not a current memory of the episode's user "
            "(unknown, or retired or superseded since); the feedback still counts as a correction",
            markup=False,
            highlight=False,
        )
    # the whole episode id, where a script gave its first characters
    write_json(
        json_out,
        {
            "feedback_id": receipt.feedback_id,
            "episode_id": episode_id,
            "status": receipt.status,
            "retired_memory": receipt.retired_memory,
        },
    )


def _memories(log: EpisodeLog) -> MemoryBackend:
    from memabra._sql_memory import SQLMemory  # it brings langchain_core: only where a memory is retracted

    return SQLMemory(log)
