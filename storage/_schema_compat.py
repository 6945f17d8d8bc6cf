"""The schema's compatibility marker: the oldest memabra schema head whose code may still run on a
database, recorded in the database itself next to Alembic's revision.

A process checks the schema when it opens the log. A database newer than its code is one that a
newer memabra upgraded; only that newer memabra's migrations know whether what they changed breaks
older code, so the database has to say. Every migration script declares :data:`DECLARATION`:

* ``BREAKS_OLDER_CODE = False``: additive (a new table, a nullable column, an index): code whose
  schema head is older keeps working on it, and the marker stays where it was;
* ``BREAKS_OLDER_CODE = True``: a dropped or renamed column, a NOT NULL or a unique constraint that
  older code's writes can violate, rows whose meaning changed: the marker moves to this revision.

The marker is written after every migration step (upgrade, downgrade or stamp) in the step's own
transaction, by the callback ``migrations/env.py`` hands Alembic, so it always matches the revision
recorded with it. It is recomputed from the revision the database lands on, which keeps it right
after a downgrade too.
"""

from __future__ import annotations

from collections.abc import Iterable

from alembic.script import Script, ScriptDirectory
from sqlalchemy import CheckConstraint, Column, Connection, Integer, String, Table, delete, insert, inspect, select

from memabra._errors import SchemaError
from memabra.storage._models import Base

DECLARATION = "BREAKS_OLDER_CODE"
"""The module-level constant every migration script must set to ``True`` or ``False``."""

MARKER_TABLE = "schema_compatibility"

# In Base.metadata (migration 0014 creates it) so that the models still match the migrations; it
# is migration machinery, like alembic_version, and no ORM code reads or writes it.
schema_compatibility = Table(
    MARKER_TABLE,
    Base.metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("oldest_compatible_revision", String(32), nullable=False),
    CheckConstraint("id = 1", name="one_row"),
)


def breaks_older_code(script: Script) -> bool:
    """What ``script`` declares; :class:`SchemaError` naming the file when it declares nothing."""
    declared = getattr(script.module, DECLARATION, None)
    if not isinstance(declared, bool):
        raise SchemaError(
            f"migration {script.revision} ({script.path}) must declare {DECLARATION} = True or False "
            f"(got {declared!r}): True when code at the revision before it cannot run on the schema it leaves "
            "(a dropped, renamed or newly NOT NULL column, a constraint older writes violate, rows whose "
            "meaning changed), False when it only adds (tables, nullable columns, indexes)"
        )
    return declared


def oldest_compatible_revision(scripts: ScriptDirectory, revision: str) -> str:
    """The oldest schema head whose code may run on a database at ``revision``: the newest revision
    at or below it that breaks older code, or the first revision when none does. Every script on
    the way down is checked for its declaration, so a missing one fails the first upgrade."""
    newest_breaking: str | None = None
    first = revision
    for script in scripts.iterate_revisions(revision, "base"):  # newest first
        if breaks_older_code(script) and newest_breaking is None:
            newest_breaking = script.revision
        first = script.revision
    return newest_breaking or first


def record_marker(connection: Connection, scripts: ScriptDirectory, heads: Iterable[str]) -> None:
    """Write the marker for the revision the database is now at; nothing before migration 0014
    has made the table (or after a downgrade past it)."""
    revisions = sorted(heads)
    if not revisions or not inspect(connection).has_table(MARKER_TABLE):
        return
    if len(revisions) > 1:  # pragma: no cover - memabra's history is linear
        raise SchemaError(f"the schema has several heads ({', '.join(revisions)}); memabra's migrations are linear")
    marker = oldest_compatible_revision(scripts, revisions[0])
    connection.execute(delete(schema_compatibility))
    connection.execute(insert(schema_compatibility).values(id=1, oldest_compatible_revision=marker))


def read_marker(connection: Connection) -> str | None:
    """The marker, or ``None`` on a database that has none (upgraded by a memabra without it)."""
    if not inspect(connection).has_table(MARKER_TABLE):
        return None
    column = schema_compatibility.c.oldest_compatible_revision
    return connection.execute(select(column).where(schema_compatibility.c.id == 1)).scalar_one_or_none()
