"""``memabra db``: upgrade, downgrade and show the log's schema revision."""

from __future__ import annotations

import logging
from typing import Annotated

import typer
from rich.markup import escape

from memabra._cli._common import (
    JsonOutOption,
    configure_logging,
    confirm_or_stop,
    console,
    run_guarded,
    write_json,
)
from memabra._cli._database import CreateDbOption, DbOption, migrate, sqlite_file
from memabra._cli._db_backup import db_backup, db_restore
from memabra.storage import (
    compatible_from,
    current_revision,
    downgrade,
    head_revision,
    make_engine,
    resolve_url,
    upgrade,
)
from memabra.storage._engine import shown_url

db_app = typer.Typer(help="Schema migrations and backups.", no_args_is_help=True, rich_markup_mode="markdown")
db_app.command("backup")(db_backup)
db_app.command("restore")(db_restore)


@db_app.command("upgrade")
def db_upgrade(
    db: CreateDbOption = None,
    revision: str = typer.Option("head", help="Target revision."),
    json_out: JsonOutOption = None,
) -> None:
    """Create or migrate the schema to this memabra's version (`--json`: the revision `before` and
    `after`, null for no schema, this memabra's `head` and whether anything `changed`)."""
    # each migration step, and an index built concurrently on a large table (which may take
    # minutes), is reported as it starts
    configure_logging(verbose=True)
    logging.getLogger("alembic.runtime.migration").addFilter(_migration_steps_only)
    url = run_guarded(resolve_url, db)
    before = _revision_of(url) if json_out is not None else None
    now = migrate(upgrade, url, revision)
    where = shown_url(url)  # no engine: nothing to dispose
    console.print(f"database {escape(where)} is at schema revision [bold]{escape(now)}[/]")
    if revision not in ("head", "heads") and not revision.startswith("+") and now != revision:
        # an upgrade to a revision the database is already past changes nothing
        console.print(f"it was already past {escape(revision)}: nothing was changed (db downgrade goes back)")
    write_json(json_out, _migration_json(where, before, now))


def _revision_of(url: str) -> str | None:
    """The database's schema revision before a migration (``None``: no schema, or a SQLite file
    not created yet, which this look must not create)."""
    path = sqlite_file(url)
    if path is not None and not path.exists():
        return None
    engine = run_guarded(make_engine, url)
    try:
        return current_revision(engine)
    finally:
        engine.dispose()


def _migration_json(where: str, before: str | None, now: str) -> dict[str, object]:
    """What `db upgrade --json` and `db downgrade --json` write; no schema is null, as in `db current`."""
    after = None if now == "base" else now
    return {"database": where, "before": before, "after": after, "head": head_revision(), "changed": before != after}


def _migration_steps_only(record: logging.LogRecord) -> bool:
    """Alembic's lines about its own set-up say nothing to an operator; a step keeps its
    migration's first sentence, on one line."""
    message = record.getMessage()
    if not message.startswith("Running "):
        return False
    step, _, description = message.partition(", ")
    sentence = " ".join(description.split()).split(". ")[0].rstrip(".")
    record.msg, record.args = f"{step}: {sentence}" if sentence else step, None
    return True


@db_app.command("downgrade")
def db_downgrade(
    revision: Annotated[str, typer.Argument(help="Target revision, e.g. base.")],
    db: DbOption = None,
    yes: Annotated[
        bool, typer.Option("--yes", help="Do not ask: the tables and columns added since are dropped with their data.")
    ] = False,
    json_out: JsonOutOption = None,
) -> None:
    """Migrate the schema down (``base`` drops every memabra table). What the revisions after the
    target added is dropped with its data, so it asks first (``--yes`` in scripts). `--json`: the
    revision `before` and `after` (null for no schema) and whether anything `changed`."""
    from memabra.storage import known_revisions

    url = run_guarded(resolve_url, db)
    if revision not in known_revisions() and revision != "base" and not revision.startswith("-"):
        migrate(downgrade, url, revision)  # names the unknown revision
    where = shown_url(url)
    what = "every memabra table" if revision == "base" else f"what the revisions after {revision} added"
    # asked whatever standard input is (`echo y |` answers): a schema change is never a cron job's
    confirm_or_stop(
        f"Drop {what} in {where}, with its data?",
        yes=yes,
        refused="nothing was changed (pass --yes to downgrade without asking)",
    )
    before = _revision_of(url) if json_out is not None else None
    now = migrate(downgrade, url, revision)
    console.print(f"schema revision is now [bold]{escape(now)}[/]")
    write_json(json_out, _migration_json(where, before, now))


@db_app.command("current")
def db_current(db: DbOption = None, json_out: JsonOutOption = None) -> None:
    """Show the schema revision of the database, the oldest memabra schema that may still run on
    it (during a rolling deploy), and the one this memabra needs (`--json`: `"up_to_date"` says
    whether they are the same, for a deploy step that runs `db upgrade` only when needed)."""
    engine = make_engine(db)
    try:
        current = current_revision(engine)
        oldest = compatible_from(engine) if current is not None else None
    finally:
        engine.dispose()
    head = head_revision()
    runs_on = f" (memabra at schema {oldest} or later runs on it)" if oldest is not None else ""
    console.print(f"database: {current or 'no schema'}{runs_on}; this memabra needs: {head}")
    write_json(json_out, {"current": current, "compatible_from": oldest, "head": head, "up_to_date": current == head})
