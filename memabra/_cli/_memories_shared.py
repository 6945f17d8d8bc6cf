"""What every ``memabra memories`` command shares: the options naming a user and who changes a
memory, the store opened on the log, a memory named by its id or the start of it, and the table
memories are drawn in. Split from :mod:`memabra._cli._memories` (the commands).
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Annotated

import typer
from rich.text import Text

from memabra._cli._common import JsonOutOption, fail, run_guarded
from memabra._cli._tables import Table

if TYPE_CHECKING:
    # the memory backend brings the write path's LangChain parts and the router: imported when a
    # command opens it, so `memabra --help` and the other commands do not pay for them
    from memabra._memory_records import MemoryRecord
    from memabra._sql_memory import SQLMemory
    from memabra.router import CachingEncoder

__all__ = [
    "ByOption",
    "JsonOption",
    "UserOption",
    "audited",
    "memory_id_of",
    "memory_table",
    "open_memories",
    "shown_time",
]

UserOption = Annotated[str, typer.Option("--user", help="Whose memories (memories are always scoped by user).")]
JsonOption = JsonOutOption
ByOption = Annotated[
    str | None,
    typer.Option("--by", help="Who makes the change (a name or ticket), kept with the reason in its history."),
]


def audited(reason: str, by: str | None) -> str:
    """The history's reason with who made the change: the CLI has no sign-in to name them, and a
    reviewer reading "retired by hand" could not tell which of the team did it. One that does not
    fit the history is refused before anything is written, rather than cut (and its "by" with it)."""
    from memabra._memory_write import audit_reason  # the write path: imported by the command that writes

    return run_guarded(audit_reason, f"{reason} (by {by.strip()})" if by and by.strip() else reason)


@contextmanager
def open_memories(db: str | None, *, semantic: bool = False) -> Iterator[SQLMemory]:
    from memabra._sql_memory import SQLMemory
    from memabra.router import default_encoder
    from memabra.storage import EmbeddingTable, EpisodeLog

    log: EpisodeLog = run_guarded(EpisodeLog, db)
    try:
        # the deployment's model (MEMABRA_EMBEDDING_MODEL), as the agent's recall scores with; a
        # setting naming no model is a one-line error, not a traceback
        encoder: CachingEncoder | None = run_guarded(default_encoder) if semantic else None
        if encoder is not None:
            encoder.attach(EmbeddingTable(log.engine))
        yield SQLMemory(log, encoder=encoder)
    finally:
        log.close()


_MIN_ID_START = 4
"""Shortest start of a memory id (after ``mem:``) that names a memory, as for episode ids."""
_MATCHES_SHOWN = 5
_ID_SCHEME = "mem:"


def memory_id_of(memory: SQLMemory, user: str, ref: str) -> str:
    """The id of the memory of ``user`` that ``ref`` names: its whole id, or the start of exactly
    one of the user's memory ids (from ``_MIN_ID_START`` characters after ``mem:``, which may be
    left out), as ``memabra memories list`` prints them. Anything else is a one-line error."""
    ids = [r.id for r in run_guarded(memory.list, user, include_retired=True)]
    if ref in ids:
        return ref
    listing = f"see `memabra memories list --user {shlex.quote(user)}`"
    if len(ref.removeprefix(_ID_SCHEME)) < _MIN_ID_START:
        fail(
            f"user {user!r} has no memory {ref!r}; give the whole id, or its start from "
            f"{_MIN_ID_START} characters after {_ID_SCHEME!r} on ({listing})"
        )
    matches = sorted(i for i in ids if i.startswith(ref) or i.startswith(_ID_SCHEME + ref))
    if not matches:
        fail(f"user {user!r} has no memory {ref!r} or one whose id starts with it ({listing})")
    if len(matches) > 1:
        shown = ", ".join(matches[:_MATCHES_SHOWN])
        more = f" and {len(matches) - _MATCHES_SHOWN} more" if len(matches) > _MATCHES_SHOWN else ""
        fail(f"{ref!r} is the start of several memory ids of user {user!r} ({shown}{more}); give more of it")
    return matches[0]


def shown_time(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M") if value is not None else "never"


def memory_table(records: list[MemoryRecord], scores: list[float] | None = None, *, header: bool = True) -> Table:
    table = Table(show_lines=False, show_header=header)
    for column in ("id", "text", "status", "created", "last used", *(("score",) if scores is not None else ())):
        table.add_column(column, overflow="fold")
    for i, r in enumerate(records):
        row = [r.id, r.text, r.status.value, shown_time(r.created_at), shown_time(r.last_used_at)]
        if scores is not None:
            row.append(f"{scores[i]:+.2f}")
        table.add_row(*(Text(cell) for cell in row))  # user text is never read as markup
    return table
