"""A PostgreSQL schema of its own for one test, fixture or module, dropped afterwards."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import quote

from pgbouncer import POOL_SIZE, pgbouncer
from sqlalchemy import create_engine, text

from memabra.storage import resolve_url

# Set (to anything) to run every PostgreSQL test through a PgBouncer of its own in transaction
# pooling mode (tests/pgbouncer.py): the schema is then set by the pooler, not by the URL. Not a
# MEMABRA_ name: memabra warns about MEMABRA_ variables it does not read.
THROUGH_PGBOUNCER_ENV = "TEST_THROUGH_PGBOUNCER"
# Server connections of that pooler: tests written for a direct server hold one open on purpose
# (a writer an index build must wait for) while the code under test needs two at once (a lease
# and a write, or the lock and the build of `db upgrade`); tests/runtime/test_pgbouncer.py uses two.
WIDE_POOL_SIZE = 4


@contextmanager
def pg_schema(url: str, *, pooled: bool | None = None) -> Iterator[str]:
    """A fresh schema on the server at ``url``, as a URL whose search_path is that schema; through
    a transaction-pooling PgBouncer of its own when ``pooled`` (default: when
    ``$TEST_THROUGH_PGBOUNCER`` is set)."""
    base = resolve_url(url)
    schema = f"t_{uuid.uuid4().hex[:12]}"
    pool_size = POOL_SIZE if pooled else WIDE_POOL_SIZE
    if pooled is None:
        pooled = bool(os.environ.get(THROUGH_PGBOUNCER_ENV))
    admin = create_engine(base)
    try:
        with admin.begin() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
        try:
            if pooled:
                with pgbouncer(base, schema, pool_size=pool_size) as through:
                    yield through
            else:
                sep = "&" if "?" in base else "?"
                yield f"{base}{sep}options={quote(f'-csearch_path={schema}')}"
        finally:
            with admin.begin() as conn:
                conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
    finally:
        admin.dispose()
