"""A scratch database for one benchmark run, shared by the benchmark scripts: a PostgreSQL schema of
its own (dropped afterwards, even when the run fails) or a new SQLite file."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import create_engine, make_url, text

from memabra.storage import resolve_url


def in_schema(base: str, schema: str) -> str:
    """``base`` with every connection's search_path set to ``schema`` (a URL's own query kept, its
    ``options`` too: libpq takes one, so the search path joins it)."""
    url = make_url(base)
    own = url.query.get("options")
    options = " ".join([*([own] if isinstance(own, str) else list(own or ())), f"-csearch_path={schema}"])
    return url.update_query_dict({"options": options}).render_as_string(hide_password=False)


@contextmanager
def scratch_schema(url: str, prefix: str = "bench") -> Iterator[str]:
    """A new schema on the PostgreSQL server at ``url``, as a URL working inside it; dropped on exit."""
    base = resolve_url(url)
    schema = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin = create_engine(base)
    try:
        with admin.begin() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
        try:
            yield in_schema(base, schema)
        finally:
            with admin.begin() as conn:
                conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    finally:
        admin.dispose()


@contextmanager
def scratch_log(url: str | None, prefix: str = "bench", folder: Path | None = None) -> Iterator[str]:
    """A fresh log: a schema of its own when ``url`` is PostgreSQL, ``url`` itself when it names
    another database, else a new SQLite file (in ``folder``, or a temporary folder removed on exit)."""
    if url is not None and url.startswith("postgresql"):
        with scratch_schema(url, prefix) as scoped:
            yield scoped
        return
    if url is not None:
        yield url
        return
    name = f"{prefix}-{uuid.uuid4().hex[:8]}.db"
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
        yield f"sqlite:///{folder / name}"
        return
    with tempfile.TemporaryDirectory() as tmp:
        yield f"sqlite:///{tmp}/{name}"
