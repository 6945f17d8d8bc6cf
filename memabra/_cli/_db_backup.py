"""``memabra db backup`` and ``memabra db restore``: a consistent copy of a live SQLite log, and
putting one back (PostgreSQL: pg_dump and pg_restore)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from memabra._cli._common import (
    JsonOutOption,
    check_output_path,
    confirm_or_stop,
    console,
    run_guarded,
    write_json,
)
from memabra._cli._database import CreateDbOption, DbOption
from memabra.storage._engine import shown_url


def db_backup(
    out: Annotated[
        Path,
        typer.Option("--out", help="The backup file to write (a SQLite database).", callback=check_output_path),
    ],
    db: DbOption = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace --out when it already exists.")] = False,
    json_out: JsonOutOption = None,
) -> None:
    """Copy a SQLite log to `--out`, consistent as of one instant, while agents keep serving and
    writing (a plain `cp` of a WAL-mode file misses what sits in its `-wal` file). For PostgreSQL
    it says to use `pg_dump` and exits 1."""
    from memabra.storage._backup import backup_sqlite

    result = run_guarded(backup_sqlite, db, out, overwrite=overwrite)
    revision = result.revision or "no schema"
    console.print(
        f"wrote {escape(str(result.path))}: {result.size_bytes} bytes, {result.episodes} episodes, "
        f"schema revision {escape(revision)}"
    )
    write_json(
        json_out,
        {
            "path": str(result.path),
            "size_bytes": result.size_bytes,
            "episodes": result.episodes,
            "revision": result.revision,
        },
    )


def db_restore(
    backup: Annotated[Path, typer.Option("--from", help="The backup file `memabra db backup` wrote.")],
    db: CreateDbOption = None,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask: everything the log holds now is replaced.")] = False,
    json_out: JsonOutOption = None,
) -> None:
    """Replace the whole SQLite log with a backup, in one transaction (processes that have it open
    see the restored log at their next read; never `cp` a backup over a log that has a `-wal` file
    beside it). Everything logged since the backup is gone, so it asks first (`--yes` in scripts).
    Restart the agents and the learner afterwards (docs/production.md, "Backups and restores").
    `--json`: the restored file, its episodes and schema revision, and whether it needs `db upgrade`."""

    from memabra.storage import head_revision, known_revisions, resolve_url
    from memabra.storage._backup import PG_RESTORE_HINT, restore_sqlite, sqlite_path

    url = run_guarded(resolve_url, db)
    target = run_guarded(sqlite_path, url, hint=PG_RESTORE_HINT)
    where = shown_url(url)
    if target.exists():
        confirm_or_stop(
            f"Replace everything in {where} with {backup}? What was logged since the backup is lost",
            yes=yes,
            refused="nothing was changed (pass --yes to restore without asking)",
        )
    result = run_guarded(restore_sqlite, backup, url)
    # a backup an older memabra took: every process refuses the log until it is upgraded
    older = result.revision != head_revision() and result.revision in known_revisions()
    then = f"run `memabra db upgrade --db {where}`, then restart" if older else "restart"
    console.print(
        f"restored {escape(where)} from {escape(str(backup))}: {result.episodes} episodes, schema revision "
        f"{escape(result.revision or 'no schema')}; {escape(then)} every agent and the learner now"
    )
    write_json(
        json_out,
        {
            "database": where,
            "path": str(result.path),
            "backup": str(backup),
            "size_bytes": result.size_bytes,
            "episodes": result.episodes,
            "revision": result.revision,
            "upgrade_needed": older,
        },
    )
