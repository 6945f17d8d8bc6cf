"""``memabra erase``: a user's threads, episodes and memories in one audited run, and the
checkpointer it (and the admin view) opens by URL."""

from __future__ import annotations

import contextlib
import socket
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.progress import TextColumn
from rich.text import Text
from sqlalchemy.engine import URL, make_url

from memabra._cli._common import (
    JsonOutOption,
    YesOption,
    cli_actor,
    confirm_or_stop,
    console,
    err_console,
    fail,
    run_guarded,
    transient_progress,
    write_json,
)
from memabra._cli._database import DbOption
from memabra.storage import EpisodeLog
from memabra.storage._engine import mask_password, shown_url

if TYPE_CHECKING:  # langgraph loads only for --checkpointer: the CLI starts without it
    from langgraph.checkpoint.base import BaseCheckpointSaver

__all__ = ["checkpointer_error", "checkpointer_errors", "erase", "open_checkpointer"]


def erase(
    user: Annotated[str, typer.Option("--user", help="The user to erase.", show_default=False)],
    checkpointer: Annotated[
        str | None,
        typer.Option(
            "--checkpointer",
            help="The agent's LangGraph checkpointer (sqlite:///FILE or postgresql://...): the user's "
            "conversation threads there are deleted too.",
        ),
    ] = None,
    db: DbOption = None,
    json_out: JsonOutOption = None,
    yes: YesOption = False,
) -> None:
    """Erase a user: their checkpointer threads, episodes and memories, as one audited run.

    In order: their conversation threads in the agent's checkpointer (with --checkpointer), every
    episode the log holds of them (rewards not learned yet too) and every memory of theirs with its
    history, as one run of the deletion audit trail. Policy weights keep what was learned (hashed
    features, not text). Run it again if it stops part way."""
    from memabra._erasure import erase_user

    if not user.strip():
        fail("--user is empty: name the user to erase")
    threads = " and conversation threads" if checkpointer is not None else ""
    confirm_or_stop(
        f"Erase user {user!r}: every episode, memory{threads} of theirs, for good?",
        yes=yes,
        refused="nothing was erased (--yes erases without asking)",
        only_at_a_terminal=True,
    )
    with (
        run_guarded(EpisodeLog, db) as log,
        open_checkpointer(checkpointer) as saver,
        transient_progress(TextColumn("{task.completed} episodes deleted")) as bar,
    ):
        task = bar.add_task("erase", total=None)
        try:
            result = run_guarded(
                erase_user,
                log,
                user,
                checkpointer=saver,
                actor=cli_actor(),
                client=socket.gethostname(),
                progress=lambda n: bar.update(task, completed=n),
            )
        except checkpointer_errors() as exc:
            # the threads go first: a checkpointer that fails stops the run before any episode
            # or memory is deleted; the run's audit entry stays unfinished until it is rerun
            assert checkpointer is not None
            url = make_url(checkpointer)
            fail(
                f"the checkpointer at {shown_url(url)} failed while deleting the "
                f"user's threads: {checkpointer_error(exc, url)}; no episode or memory was deleted yet, the "
                "erasure is recorded as unfinished: run the same command again to finish it"
            )
    threads = "" if result.threads is None else f", {result.threads} checkpointer thread(s) deleted"
    paused = f", {result.paused} unfinished turn(s) deleted (paused, or in flight)" if result.paused else ""
    items = f", {result.items} own skill(s)/tool(s) deleted" if result.items else ""
    console.print(
        Text(
            f"erased user {user}: {result.episodes} episode(s) deleted, {result.memories} memories "
            f"forgotten{paused}{items}{threads}"
        ),
        highlight=False,
    )
    if result.resumed:
        console.print(
            Text(
                f"this run finished {len(result.resumed)} earlier erasure(s) of {user} that stopped part way: "
                + ", ".join(result.resumed)
            ),
            highlight=False,
        )
    if result.found_nothing and not result.resumed:
        # a typo in the id erases nothing and still succeeds: say so rather than let it pass as done
        err_console.print(
            Text(
                f"warning: the log held nothing of user {user!r}: already erased, or not the id the agent "
                "logged them under (`memabra episodes list --user ID` shows a user's episodes)"
            ),
            highlight=False,
        )
    if result.shared_threads:
        console.print(
            Text(
                f"kept {len(result.shared_threads)} thread(s) that other users' episodes name too: "
                + ", ".join(result.shared_threads)
            ),
            highlight=False,
        )
    write_json(
        json_out,
        {
            "user": user,
            "episodes": result.episodes,
            "memories": result.memories,
            "threads": result.threads,
            "shared_threads": list(result.shared_threads),
            "paused_turns": result.paused,
            "items": result.items,
            "resumed": list(result.resumed),
            "audit_id": result.audit_id,
        },
    )


@contextlib.contextmanager
def open_checkpointer(url: str | None) -> Iterator[BaseCheckpointSaver[str] | None]:
    """The checkpointer at ``url``: SQLite (the file must exist: a new one holds no thread) or
    PostgreSQL, from the ``checkpoints`` extra; ``None`` when no URL is given."""
    if url is None:
        yield None
        return
    try:
        parsed = make_url(url)
    except Exception:  # noqa: BLE001 - any unparseable value gets the same message
        fail(f"--checkpointer takes sqlite:///FILE or postgresql://..., got {mask_password(url)!r}")
    backend = parsed.get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        fail(f"--checkpointer takes sqlite:///FILE or postgresql://..., got {mask_password(url)!r}")
    try:
        from langgraph.checkpoint.postgres import PostgresSaver
        from langgraph.checkpoint.sqlite import SqliteSaver
    except ImportError:
        fail("--checkpointer needs the checkpoints extra: pip install 'memabra[checkpoints]'")
    shown = shown_url(parsed)
    if backend == "sqlite":
        path = Path(parsed.database or "")
        if not path.is_file():
            fail(f"--checkpointer: no checkpointer database at {path}")
        with contextlib.ExitStack() as stack:
            try:
                saver = stack.enter_context(SqliteSaver.from_conn_string(str(path)))
                saver.conn.execute("SELECT count(*) FROM sqlite_master").fetchall()  # a SQLite file at all?
            except sqlite3.Error as exc:
                fail(f"--checkpointer: cannot open the checkpointer at {shown}: {checkpointer_error(exc, parsed)}")
            yield saver
    else:
        import psycopg  # the checkpoints extra's PostgresSaver brings it
        from psycopg.rows import dict_row

        conninfo = parsed.set(drivername="postgresql").render_as_string(hide_password=False)
        with contextlib.ExitStack() as stack:
            try:
                # as PostgresSaver.from_conn_string connects, but never preparing: its
                # prepare_threshold=0 fails through a transaction-pooling PgBouncer, as memabra's
                # own engines would (storage's PG_PREPARE_THRESHOLD)
                conn = stack.enter_context(
                    psycopg.Connection.connect(conninfo, autocommit=True, prepare_threshold=None, row_factory=dict_row)
                )
            except psycopg.Error as exc:
                fail(
                    f"--checkpointer: cannot connect to the checkpointer at {shown}: {checkpointer_error(exc, parsed)}"
                )
            yield PostgresSaver(conn)


def checkpointer_error(exc: BaseException, url: URL) -> str:
    """The first line of a checkpointer driver's error, with the URL's password (should the driver
    repeat it) hidden."""
    lines = str(exc).strip().splitlines()
    reason = lines[0] if lines else type(exc).__name__
    if url.password:
        reason = reason.replace(str(url.password), "***")
    return reason


def checkpointer_errors() -> tuple[type[Exception], ...]:
    """The errors a checkpointer's own driver raises (SQLAlchemy wraps those of memabra's log, so
    a bare driver error came from the checkpointer)."""
    errors: list[type[Exception]] = [sqlite3.Error]
    with contextlib.suppress(ImportError):
        import psycopg

        errors.append(psycopg.Error)
    return tuple(errors)
