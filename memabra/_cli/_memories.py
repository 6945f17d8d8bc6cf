"""``memabra memories list|search|add|import|update|retire|restore|forget|history``: one user's
memories."""

from __future__ import annotations

import shlex
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.text import Text

from memabra._cli._common import YesOption, confirm_or_stop, console, fail, run_guarded, write_json
from memabra._cli._database import DbOption
from memabra._cli._memories_shared import (
    ByOption,
    JsonOption,
    UserOption,
    audited,
    memory_id_of,
    memory_table,
    open_memories,
    shown_time,
)
from memabra._cli._tables import Table

if TYPE_CHECKING:
    # the memory backend brings the write path's LangChain parts and the router: imported when a
    # command opens it, so `memabra --help` and the other commands do not pay for them
    from memabra._memory_records import MemoryChange

memories_app = typer.Typer(
    help="List, search, add, import, update, retire, restore and forget a user's memories.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)

LIST_LIMIT = 100
"""How many memories ``memabra memories list`` shows unless told (``--limit``, ``--all``): a user
can hold 100,000, and drawing a table that long took 45 s of a terminal to read none of it."""


@memories_app.command("list")
def list_memories(
    user: UserOption,
    db: DbOption = None,
    active: Annotated[bool, typer.Option("--active", help="Only memories that can be recalled.")] = False,
    limit: Annotated[
        int, typer.Option("--limit", min=1, help="Show this many (the newest); a line says how many more.")
    ] = LIST_LIMIT,
    cursor: Annotated[
        str | None, typer.Option("--cursor", help="Cursor printed under the previous page: the next, older page.")
    ] = None,
    all_: Annotated[
        bool,
        typer.Option("--all", help="Show every memory, however many (read a batch at a time; --limit does not apply)."),
    ] = False,
    json_out: JsonOption = None,
) -> None:
    """The user's memories, newest first: id, text, status (active / retired), created, last used;
    a page of --limit in the table (read alone: a page never reads the user's other memories),
    every one in --json (written as it is read, never held whole)."""
    from memabra._cli._listing_output import print_in_batches, write_json_list
    from memabra.storage._memory_listing import count_memory_records, iter_memory_records, memory_record_page

    if all_ and cursor is not None:
        fail("--all lists every memory from the newest: leave out --cursor")
    with open_memories(db) as memory:
        engine = memory.log.engine
        if json_out is not None:
            run_guarded(
                write_json_list,
                json_out,
                (asdict(r) for r in iter_memory_records(engine, user, include_retired=not active)),
            )
        if all_:
            records = iter_memory_records(engine, user, include_retired=not active)
            n = run_guarded(print_in_batches, records, lambda rows, first: memory_table(rows, header=first))
            if not n:
                console.print(memory_table([]))
            console.print(f"{n:,} {'memory' if n == 1 else 'memories'}", markup=False, highlight=False)
            return
        page = run_guarded(memory_record_page, engine, user, include_retired=not active, cursor=cursor, limit=limit)
        total, capped = (
            (len(page.items), False)
            if cursor is None and page.next_cursor is None
            else run_guarded(count_memory_records, engine, user, include_retired=not active)
        )
    console.print(memory_table(list(page.items)))
    shown = len(page.items)
    noun = "memory" if total == 1 and not capped else "memories"
    of = f"{total:,}{'+' if capped else ''}"
    if cursor is None and page.next_cursor is None:
        console.print(f"{total:,} {noun}")
        return
    if cursor is None:
        more = f"{total - shown:,}{'+' if capped else ''}"
        console.print(
            f"{shown:,} of {of} {noun} shown; {more} more: --limit N or --all"
            + (" (--json holds them all)" if json_out is not None else ""),
            markup=False,
            highlight=False,
        )
    else:
        console.print(
            f"{shown:,} of {of} {noun} shown (an older page)"
            # --json does not follow --cursor: a script paging with both would get every memory each time
            + (" (--json holds them all, from the newest)" if json_out is not None else ""),
            markup=False,
            highlight=False,
        )
    if page.next_cursor is not None:
        console.print(f"next page: --cursor {page.next_cursor}", markup=False, highlight=False)


@memories_app.command("search")
def search_memories(
    query: Annotated[str, typer.Argument(help="What to look for.")],
    user: UserOption,
    db: DbOption = None,
    limit: Annotated[int, typer.Option(help="How many to show.")] = 10,
    json_out: JsonOption = None,
) -> None:
    """The user's active memories best first, by the router's own recall."""
    if limit < 1:
        fail(f"--limit must be at least 1, got {limit}")
    with open_memories(db, semantic=True) as memory:
        hits = run_guarded(memory.search, user, query, limit=limit)
        write_json(json_out, [{**asdict(h.memory), "score": h.score} for h in hits])
        console.print(memory_table([h.memory for h in hits], [h.score for h in hits]))


@memories_app.command("add")
def add_memory(
    text: Annotated[str, typer.Argument(help="The fact, e.g. 'I live in Lyon'.")],
    user: UserOption,
    db: DbOption = None,
    json_out: JsonOption = None,
) -> None:
    """Remember one fact (a restatement refreshes; a new value of a subject retires the old one).

    The text is stored as given: a sentence joining several facts ("I live in Lyon and my dog is
    called Rex") is one memory here, where the agent's write path stores one per fact; add them
    one by one, or import a file of facts (`memabra memories import`)."""
    with open_memories(db) as memory:
        active = {r.id: r.text for r in run_guarded(memory.list, user, include_retired=False)}
        item = run_guarded(memory.remember, user, text, source="cli")
        record = run_guarded(memory.get, user, item.id)
        still = {r.id for r in run_guarded(memory.list, user, include_retired=False)}
        write_json(json_out, asdict(record))
        console.print(f"remembered {record.id}: {record.text}", markup=False, highlight=False)
        for mid, old in active.items():  # what the new fact superseded: the write path says so
            if mid not in still and mid != record.id:
                console.print(f"  retired {mid} (superseded by {record.id}): {old}", markup=False, highlight=False)


@memories_app.command("import")
def import_memories(
    file: Annotated[
        Path, typer.Argument(help="One fact per line, or JSON lines with 'text' (or mem0's 'memory') and 'user_id'.")
    ],
    user: Annotated[
        str | None, typer.Option("--user", help="The user of lines that name none (JSON lines may carry 'user_id').")
    ] = None,
    db: DbOption = None,
    json_out: JsonOption = None,
) -> None:
    """Remember every fact in FILE, user by user, each in a few short transactions (restatements of stored facts,
    retired ones too, are skipped: run the same import again after it was interrupted and it
    finishes the job, adding nothing twice). Every line is checked before anything is written; the
    file is then read again a chunk at a time, never held whole."""
    from memabra._cli._memories_import import check_file, import_checked

    checked = check_file(file, user)
    with open_memories(db) as memory:
        import_checked(memory, checked, json_out)


@memories_app.command("update")
def update_memory(
    memory_id: Annotated[str, typer.Argument(help="The memory's id, or its start (see `memabra memories list`).")],
    text: Annotated[str, typer.Argument(help="Its new text.")],
    user: UserOption,
    db: DbOption = None,
    replace: Annotated[
        bool,
        typer.Option("--replace", help="Retire the current memories the new text contradicts, in the same step."),
    ] = False,
    keep_both: Annotated[
        bool,
        typer.Option("--keep-both", help="Keep the current memories it contradicts (they are about other things)."),
    ] = False,
    reason: Annotated[str, typer.Option("--reason", help="Why, kept in its history.")] = "updated by hand",
    by: ByOption = None,
    json_out: JsonOption = None,
) -> None:
    """Replace an active memory's text; the old one stays in its history (a retired memory is
    refused: restore it first). Refused while another current memory states another value of the
    new text's subject (two current cities), unless --replace retires that one or --keep-both
    keeps it."""
    from memabra._memory_write import edit_memory

    with open_memories(db) as memory:
        done = run_guarded(
            edit_memory,
            memory,
            user,
            memory_id_of(memory, user, memory_id),
            text,
            replace=replace,
            keep_both=keep_both,
            reason=audited(reason, by),
        )
        write_json(json_out, {**asdict(done.memory), "retired": list(done.retired), "trimmed": list(done.trimmed)})
        console.print(f"updated {done.memory.id}: {done.memory.text}", markup=False, highlight=False)
        for mid in done.retired:
            console.print(f"  retired {mid} (superseded by {done.memory.id})", markup=False, highlight=False)
        for mid in done.trimmed:
            console.print(f"  cut the contradicted fact out of {mid}", markup=False, highlight=False)


@memories_app.command("retire")
def retire_memory(
    memory_id: Annotated[str, typer.Argument(help="The memory's id, or its start.")],
    user: UserOption,
    db: DbOption = None,
    reason: Annotated[str, typer.Option("--reason", help="Why, kept in its history.")] = "retired by hand",
    by: ByOption = None,
    json_out: JsonOption = None,
) -> None:
    """Stop recalling a memory without deleting it: it keeps its text and history, and
    `memabra memories restore` brings it back."""
    with open_memories(db) as memory:
        record = run_guarded(memory.retire, user, memory_id_of(memory, user, memory_id), reason=audited(reason, by))
        write_json(json_out, asdict(record))
        console.print(f"retired {record.id}: {record.text}", markup=False, highlight=False)


@memories_app.command("restore")
def restore_memory_command(
    memory_id: Annotated[str, typer.Argument(help="The retired memory's id, or its start.")],
    user: UserOption,
    db: DbOption = None,
    replace: Annotated[
        bool,
        typer.Option("--replace", help="Retire the current memories it contradicts, in the same step."),
    ] = False,
    keep_both: Annotated[
        bool,
        typer.Option("--keep-both", help="Keep the current memories it contradicts (the supersession was wrong)."),
    ] = False,
    reason: Annotated[str, typer.Option("--reason", help="Why, kept in its history.")] = "restored by hand",
    by: ByOption = None,
    json_out: JsonOption = None,
) -> None:
    """Recall a retired memory again. Refused while a current memory states another value of its
    subject (two current cities), unless --replace retires that one or --keep-both keeps it (the
    two were about different things)."""
    from memabra._memory_restore import restore_memory

    with open_memories(db) as memory:
        done = run_guarded(
            restore_memory,
            memory,
            user,
            memory_id_of(memory, user, memory_id),
            replace=replace,
            keep_both=keep_both,
            reason=audited(reason, by),
        )
        write_json(json_out, {**asdict(done.memory), "retired": list(done.retired), "trimmed": list(done.trimmed)})
        console.print(f"restored {done.memory.id}: {done.memory.text}", markup=False, highlight=False)
        for mid in done.retired:
            console.print(f"  retired {mid} (superseded by {done.memory.id})", markup=False, highlight=False)
        for mid in done.trimmed:
            console.print(f"  cut the contradicted fact out of {mid}", markup=False, highlight=False)


@memories_app.command("forget")
def forget_memory(
    user: UserOption,
    memory_id: Annotated[str | None, typer.Argument(help="The memory's id, or its start.", show_default=False)] = None,
    all_: Annotated[bool, typer.Option("--all", help="Forget every memory of the user.")] = False,
    db: DbOption = None,
    json_out: JsonOption = None,
    yes: YesOption = False,
) -> None:
    """Delete one memory (or all with --all) with its history; the log keeps ids, not text."""
    if (memory_id is None) == (not all_):
        fail("give a memory id or --all (not both)")
    if all_:
        confirm_or_stop(
            f"Forget every memory of user {user!r} with its history, for good?",
            yes=yes,
            refused="nothing was forgotten (--yes forgets without asking)",
            only_at_a_terminal=True,
        )
    with open_memories(db) as memory:
        if all_:
            n = run_guarded(memory.forget_all, user)
        else:
            assert memory_id is not None
            run_guarded(memory.forget, user, memory_id_of(memory, user, memory_id))
            n = 1
        write_json(json_out, {"forgotten": n})
        console.print(f"forgot {n} {'memory' if n == 1 else 'memories'} of {user}", markup=False, highlight=False)
        if all_:
            console.print(
                f"the episode log still holds {user}'s conversations; to erase them too: "
                f"memabra episodes delete --user {shlex.quote(user)} --include-unlearned "
                f"(or both at once, audited: memabra erase --user {shlex.quote(user)})",
                markup=False,
                highlight=False,
            )


@memories_app.command("history")
def memory_history(
    memory_id: Annotated[str, typer.Argument(help="The memory's id, or its start.")],
    user: UserOption,
    db: DbOption = None,
    json_out: JsonOption = None,
) -> None:
    """What changed in a memory, when, and from which episode."""
    with open_memories(db) as memory:
        changes: list[MemoryChange] = run_guarded(memory.history, user, memory_id_of(memory, user, memory_id))
        write_json(json_out, [asdict(c) for c in changes])
        table = Table()
        for column in ("when", "action", "old text", "new text", "episode", "reason"):
            table.add_column(column, overflow="fold")
        for c in changes:
            cells = (shown_time(c.at), c.action.value, c.old_text or "", c.new_text or "", c.episode_id or "", c.reason)
            table.add_row(*(Text(cell) for cell in cells))
        console.print(table)
