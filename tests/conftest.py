"""Shared fixtures: the episode log on SQLite always, and on PostgreSQL when configured.

Set ``MEMABRA_TEST_DATABASE_URL`` (e.g. ``postgresql+psycopg://root@127.0.0.1:5432/test``) to run
every storage test on PostgreSQL too. If it is set and the server cannot be reached the run
fails: a silently skipped backend is a backend nobody tested.
"""

from __future__ import annotations

import os
import socket
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from pgbouncer import BINARY_ABSENT, PGBOUNCER
from sqlalchemy import create_engine, event, text
from sqlalchemy.pool import Pool

from memabra.storage import EpisodeLog, make_engine, resolve_url, upgrade
from pg_schema import pg_schema

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


@pytest.fixture
def pg_schema_url() -> Iterator[str]:
    """A fresh PostgreSQL schema, as a SQLAlchemy URL with its search_path; dropped afterwards."""
    with pg_schema(os.environ[PG_ENV]) as url:
        yield url


@pytest.fixture
def pooled_url() -> Iterator[str]:
    """A fresh PostgreSQL schema behind a PgBouncer of its own in transaction pooling mode (two
    server connections), as a URL through the pooler; the pooler is stopped afterwards."""
    if not os.environ.get(PG_ENV):
        pytest.skip(f"PgBouncer tests need PostgreSQL: set {PG_ENV}")
    if PGBOUNCER is None:
        pytest.skip(BINARY_ABSENT)
    with pg_schema(os.environ[PG_ENV], pooled=True) as url:
        yield url


@pytest.fixture(params=_backends())
def db_url(request: pytest.FixtureRequest, tmp_path) -> str:  # type: ignore[no-untyped-def]
    """A URL to an empty database (no schema yet) on each configured backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'memabra.db'}"
    return str(request.getfixturevalue("pg_schema_url"))


# Every PostgreSQL connection a pool opens, so a test that leaves one open fails itself instead
# of psycopg warning from __del__ whenever the garbage collector gets to it, in some later test.
# Pools that opened connections before the test (a module-scoped log) are not the test's to close.
_OPENED: list[tuple[weakref.ref[psycopg.Connection[Any]], int]] = []
_POOLS: weakref.WeakSet[Pool] = weakref.WeakSet()


@event.listens_for(Pool, "connect")
def _track_connection(dbapi_connection: object, record: object) -> None:
    if isinstance(dbapi_connection, psycopg.Connection):
        pool = getattr(record, "_ConnectionRecord__pool", None)  # SQLAlchemy names no public owner
        if pool is not None:
            _POOLS.add(pool)
        _OPENED.append((weakref.ref(dbapi_connection), id(pool)))


@pytest.fixture(autouse=True)
def _no_leaked_connections() -> Iterator[None]:
    """Fails the test (at teardown, after every other fixture's) that left a PostgreSQL connection
    open: an engine not disposed, a log, session or agent not closed."""
    _OPENED.clear()
    known = {id(pool) for pool in _POOLS}
    yield
    leaked = [c for ref, pool in _OPENED if pool not in known and (c := ref()) is not None and not c.closed]
    _OPENED.clear()
    if leaked:
        for conn in leaked:
            conn.close()
        pytest.fail(f"{len(leaked)} PostgreSQL connection(s) left open: close or dispose what the test opened")


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


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A port that accepts TCP connections and never answers (a hung server, a half-open link, a
    black-holing proxy)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:  # the timeout, or the listener closed
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield int(listener.getsockname()[1])
    stop.set()
    thread.join()
    for conn in accepted:
        conn.close()
    listener.close()
