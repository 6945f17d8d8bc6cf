"""Shared fixtures: the episode log on SQLite always, and on PostgreSQL when configured.

Set ``MEMABRA_TEST_DATABASE_URL`` (e.g. ``postgresql+psycopg://root@127.0.0.1:5432/test``) to run
every storage test on PostgreSQL too. If it is set and the server cannot be reached the run
fails: a silently skipped backend is a backend nobody tested.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from urllib.parse import quote

import pytest
from sqlalchemy import create_engine, text

from memabra.storage import EpisodeLog, make_engine, resolve_url, upgrade

PG_ENV = "MEMABRA_TEST_DATABASE_URL"


def _backends() -> list[str]:
    return ["sqlite", "postgres"] if os.environ.get(PG_ENV) else ["sqlite"]


def pytest_configure(config: pytest.Config) -> None:
    url = os.environ.get(PG_ENV)
    if not url:
        return
    try:
        engine = create_engine(resolve_url(url))
        with engine.connect() as conn:
            conn.execute(text("select 1"))
        engine.dispose()
    except Exception as exc:  # the run must fail, not skip
        raise pytest.UsageError(f"{PG_ENV} is set to {url!r} but the server is unreachable: {exc}") from exc


@pytest.fixture(params=_backends())
def db_url(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """A URL to an empty database (no schema yet) on each configured backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'memabra.db'}"
        return
    base = resolve_url(os.environ[PG_ENV])
    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(base)
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    sep = "&" if "?" in base else "?"
    try:
        yield f"{base}{sep}options={quote(f'-csearch_path={schema}')}"
    finally:
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


@pytest.fixture
def migrated_url(db_url: str) -> str:
    upgrade(db_url)
    return db_url


@pytest.fixture
def log(migrated_url: str) -> Iterator[EpisodeLog]:
    with EpisodeLog(migrated_url) as episode_log:
        yield episode_log


@pytest.fixture
def engine(db_url: str):  # type: ignore[no-untyped-def]
    eng = make_engine(db_url)
    yield eng
    eng.dispose()
