"""Alembic environment shipped inside the wheel; driven by :mod:`memabra.storage._migrate`.

The revisions in ``versions/`` are immutable history: each spells out its tables and columns in
full, as they were when it was written, so they repeat each other and the models on purpose (a
shared helper would change what an old revision does). ``duplicates`` lists them; leave them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from alembic import context
from alembic.runtime.migration import MigrationContext, MigrationInfo

from memabra.storage._engine import make_engine
from memabra.storage._models import Base
from memabra.storage._schema_compat import record_marker

config = context.config
target_metadata = Base.metadata


def _run(connection: object) -> None:
    context.configure(
        connection=connection,  # type: ignore[arg-type]
        target_metadata=target_metadata,
        render_as_batch=True,  # SQLite alters tables by copy-and-move
        compare_type=True,
        # the compatibility marker, in each step's transaction, so that it always matches the
        # revision Alembic records with it
        on_version_apply=_record_marker,
    )
    with context.begin_transaction():
        context.run_migrations()


def _record_marker(
    ctx: MigrationContext, step: MigrationInfo, heads: Collection[str], run_args: Mapping[str, Any]
) -> None:
    if ctx.connection is not None:  # None only in offline (--sql) mode, which memabra does not use
        record_marker(ctx.connection, context.script, heads)


connection = config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    engine = make_engine(config.get_main_option("sqlalchemy.url"))
    try:
        with engine.connect() as conn:
            _run(conn)
            conn.commit()
    finally:
        engine.dispose()
