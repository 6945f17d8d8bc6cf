"""Alembic environment shipped inside the wheel; driven by :mod:`memabra.storage._migrate`.

The revisions in ``versions/`` are immutable history: each spells out its tables and columns in
full, as they were when it was written, so they repeat each other and the models on purpose (a
shared helper would change what an old revision does). ``duplicates`` lists them; leave them.
"""

from __future__ import annotations

from alembic import context

from memabra.storage._engine import make_engine
from memabra.storage._models import Base

config = context.config
target_metadata = Base.metadata


def _run(connection: object) -> None:
    context.configure(
        connection=connection,  # type: ignore[arg-type]
        target_metadata=target_metadata,
        render_as_batch=True,  # SQLite alters tables by copy-and-move
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


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
