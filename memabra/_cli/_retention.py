"""``memabra episodes delete``: a retention window, or named episodes, or one user's; ``memabra
episodes deletions``: the audit trail of these and of ``memabra erase`` (:mod:`._erase`)."""

from __future__ import annotations

import re
import socket
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Annotated

import typer
from rich.progress import TextColumn
from rich.table import Table
from rich.text import Text

from memabra._cli._common import (
    JsonOutOption,
    YesOption,
    cli_actor,
    confirm_or_stop,
    console,
    fail,
    parse_time,
    plain,
    run_guarded,
    transient_progress,
    write_json,
)
from memabra._cli._database import DbOption
from memabra.storage import DeletionEntry, EpisodeDeletion, EpisodeLog

if TYPE_CHECKING:  # langgraph loads only for --checkpointer: the CLI starts without it
    pass

__all__ = ["check_age", "episodes_delete", "episodes_deletions", "parse_age"]

_AGE = re.compile(r"(\d+)\s*([dhm])")
_AGE_UNITS = {"d": "days", "h": "hours", "m": "minutes"}


def parse_age(value: str) -> timedelta:
    """``90d``, ``12h`` or ``30m`` as a duration; anything else is a clear error."""
    match = _AGE.fullmatch(value.strip().lower())
    if match is None or int(match.group(1)) == 0:
        raise typer.BadParameter(f"expected a positive age such as 90d, 12h or 30m, got {value!r}")
    try:
        return timedelta(**{_AGE_UNITS[match.group(2)]: int(match.group(1))})
    except OverflowError:
        raise typer.BadParameter(f"{value!r} is longer than any date can reach back") from None


def check_age(value: str | None) -> str | None:
    """Typer callback of an age option: a bad value is named with its option while the command
    line is parsed (raised later, the usage error named no option)."""
    if value is not None:
        parse_age(value)
    return value


def _cutoff(before: str | None, older_than: str | None) -> datetime | None:
    if before is not None and older_than is not None:
        fail("give --before or --older-than, not both")
    if older_than is not None:
        try:
            return datetime.now(UTC) - parse_age(older_than)
        except OverflowError:
            fail(f"--older-than {older_than} reaches before the year 1")
    return parse_time(before, "--before")


def episodes_delete(
    episode_ids: Annotated[
        list[str] | None, typer.Argument(help="Episodes to delete (ids as `episodes list` prints them).")
    ] = None,
    user: Annotated[str | None, typer.Option("--user", help="Only this user's episodes (erasure).")] = None,
    before: Annotated[
        str | None, typer.Option("--before", help="ISO time: episodes created before it (UTC when no offset).")
    ] = None,
    older_than: Annotated[
        str | None,
        typer.Option("--older-than", help="Episodes older than this age: 90d, 12h, 30m.", callback=check_age),
    ] = None,
    include_unlearned: Annotated[
        bool,
        typer.Option(
            "--include-unlearned",
            help="Also delete episodes whose reward is not final or not learned yet (the learner loses them).",
        ),
    ] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Count what would be deleted; delete nothing.")] = False,
    db: DbOption = None,
    json_out: JsonOutOption = None,
    yes: YesOption = False,
) -> None:
    """Delete episodes with everything logged under them (decisions, candidates, steps, feedback,
    reward). The filters combine; at least one is required. Snapshots, OPE results, memories and
    their histories stay. Episodes a learner has not read yet are kept unless --include-unlearned."""
    cutoff = _cutoff(before, older_than)
    if not episode_ids and user is None and cutoff is None:
        fail("name episodes, or give --user, --before or --older-than; the whole log is never deleted at once")
    if not dry_run:
        confirm_or_stop(
            f"Delete {_what_goes(episode_ids, user, cutoff, include_unlearned)}, with everything logged under them?",
            yes=yes,
            refused="nothing was deleted (--dry-run counts what would go; --yes deletes without asking)",
            only_at_a_terminal=True,
        )
    with (
        run_guarded(EpisodeLog, db) as log,
        transient_progress(TextColumn("{task.completed} episodes deleted")) as bar,
    ):
        task = bar.add_task("delete", total=None)
        result = run_guarded(
            log.delete_episodes,
            episode_ids or None,
            user_id=user,
            before=cutoff,
            include_unlearned=include_unlearned,
            dry_run=dry_run,
            progress=lambda n: bar.update(task, completed=n),
            actor=cli_actor(),
            client=socket.gethostname(),
        )
        holds = [h for h in run_guarded(log.retention_holds) if h.behind] if result.kept_unlearned else []
        unfinished = _unfinished_before(log, cutoff, user) if cutoff is not None and not episode_ids else 0
    _report(result)
    if unfinished:
        assert cutoff is not None
        console.print(
            Text(
                f"  {unfinished:,} unfinished turn(s) routed before the cut-off are kept with their text (paused,"
                f" or lost with their process): `memabra episodes paused --before {cutoff.isoformat()} --abandon`"
                " logs them as failed episodes, which a later run deletes once learned"
            ),
            highlight=False,
        )
    for hold in holds:
        console.print(
            Text(
                f"  the learner of policy {hold.policy} has {hold.behind} final reward(s) left to read "
                f"(last commit {hold.updated_at.strftime('%Y-%m-%d %H:%M:%S')}); if that policy is no longer "
                f"learned: memabra policies forget-learner --policy {hold.policy}"
            ),
            highlight=False,
        )
    write_json(
        json_out,
        {
            "dry_run": result.dry_run,
            "deleted": result.deleted,
            "kept_open": result.kept_open,
            "kept_unlearned": result.kept_unlearned,
            "waiting_for": [h.policy for h in holds],
            "unfinished_turns_kept": unfinished,
            "before": None if cutoff is None else cutoff.isoformat(),
            "audit_id": result.audit_id,
        },
    )


def _what_goes(
    episode_ids: list[str] | None, user: str | None, cutoff: datetime | None, include_unlearned: bool
) -> str:
    """The episodes a delete's filters name, in words, for the question asked before it runs."""
    what = f"{len(episode_ids)} named episode(s)" if episode_ids else "the episodes"
    if user is not None:
        what += f" of user {user!r}"
    if cutoff is not None:
        what += f" created before {cutoff:%Y-%m-%d %H:%M:%S} UTC"
    return what + (" (unlearned ones too)" if include_unlearned else "")


def _unfinished_before(log: EpisodeLog, cutoff: datetime, user: str | None) -> int:
    """Kept turns older than a retention cut-off: not episodes, so no retention run deletes them,
    and dropping one would lose a decision no learner has read."""
    kept = run_guarded(log.suspended_turns, before=cutoff, limit=_UNFINISHED_COUNTED)
    return sum(user is None or k.user_id == user for k in kept)


# counting further would read every kept turn's document; a log with more has a bigger problem
_UNFINISHED_COUNTED = 10_000


def episodes_deletions(
    user: Annotated[str | None, typer.Option("--user", help="Only deletions asked for this user.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Deletion runs per page.")] = 20,
    cursor: Annotated[str | None, typer.Option(help="Cursor printed under the previous page.")] = None,
    db: DbOption = None,
    json_out: JsonOutOption = None,
) -> None:
    """The audit trail of episode deletions, newest first: who deleted what, when, from where, and
    how many episodes went (from this command, the admin view and the library)."""
    with run_guarded(EpisodeLog, db) as log:
        entries = run_guarded(log.deletion_history, limit=limit, after=cursor, user_id=user)
    table = Table(title="episode deletions")
    for col in ("started", "by", "from", "asked for", "deleted", "memories", "kept", "state"):
        table.add_column(col)
    for e in entries:
        table.add_row(
            e.started_at.strftime("%Y-%m-%d %H:%M:%S"),
            plain(e.actor),
            plain(e.client or "-"),
            plain(e.describe()),
            str(e.deleted),
            "-" if e.memories_forgotten is None else str(e.memories_forgotten),
            str(e.kept),
            "finished" if e.finished else "unfinished",
        )
    console.print(table)
    if len(entries) == limit:
        console.print(f"next page: --cursor {entries[-1].id}")
    write_json(json_out, [_entry_json(e) for e in entries])


def _entry_json(e: DeletionEntry) -> dict[str, object]:
    return {
        "id": e.id,
        "started_at": e.started_at.isoformat(),
        "finished_at": None if e.finished_at is None else e.finished_at.isoformat(),
        "by": e.actor,
        "client": e.client,
        "named": e.named,
        "episode_ids": list(e.episode_ids),
        "user_id": e.user_id,
        "created_before": None if e.created_before is None else e.created_before.isoformat(),
        "include_unlearned": e.include_unlearned,
        "kept": e.kept,
        "deleted": e.deleted,
        "memories_forgotten": e.memories_forgotten,
        "threads_deleted": e.threads_deleted,
    }


def _report(result: EpisodeDeletion) -> None:
    verb = "would delete" if result.dry_run else "deleted"
    console.print(Text(f"{verb} {result.deleted} episode(s)"), highlight=False)
    if result.kept:
        console.print(
            Text(
                f"kept {result.kept} whose reward a learner has not read yet "
                f"({result.kept_open} not final, {result.kept_unlearned} final but not read by every learner); "
                "run again once they are learned, or pass --include-unlearned"
            ),
            highlight=False,
        )
