"""A PostgreSQL schema of its own for one test, fixture or module, dropped afterwards."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import quote

from sqlalchemy import create_engine, text

from memabra.storage import resolve_url


@contextmanager
def pg_schema(url: str) -> Iterator[str]:
    """A fresh schema on the server at ``url``, as a URL whose search_path is that schema."""
    base = resolve_url(url)
    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(base)
    try:
        with admin.begin() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
        sep = "&" if "?" in base else "?"
        try:
            yield f"{base}{sep}options={quote(f'-csearch_path={schema}')}"
        finally:
            with admin.begin() as conn:
                conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
    finally:
        admin.dispose()
