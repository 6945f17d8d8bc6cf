"""Every memory test runs over the SQL registry, LangGraph's ``InMemoryStore`` and, when
``MEMABRA_TEST_DATABASE_URL`` is set, ``PostgresStore`` (and the SQL registry on PostgreSQL)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from langgraph.store.memory import InMemoryStore
from memory_helpers import HashingEncoder, hashing_embed  # noqa: F401  (re-exported for the tests)

from memabra import SQLMemory, StoreMemory
from memabra._memory import MemoryBackend
from memabra.storage import EpisodeLog, upgrade

PG_ENV = "MEMABRA_TEST_DATABASE_URL"


def _kinds() -> list[str]:
    kinds = ["sql-sqlite", "store-inmemory"]
    if os.environ.get(PG_ENV):
        kinds += ["sql-postgres", "store-postgres"]
    return kinds


@pytest.fixture(params=_kinds())
def memory_log(request: pytest.FixtureRequest, tmp_path) -> Iterator[tuple[MemoryBackend, EpisodeLog]]:  # type: ignore[no-untyped-def]
    """A memory backend and the episode log beside it."""
    kind: str = request.param
    if kind.endswith("postgres"):
        url = request.getfixturevalue("pg_schema_url")
    else:
        url = f"sqlite:///{tmp_path / 'memabra.db'}"
    if kind == "store-postgres":
        sqlite_url = f"sqlite:///{tmp_path / 'memabra.db'}"
        upgrade(sqlite_url)
        log = EpisodeLog(sqlite_url)
    else:
        upgrade(url)
        log = EpisodeLog(url)
    try:
        if kind.startswith("sql"):
            yield SQLMemory(log), log
        elif kind == "store-inmemory":
            yield StoreMemory(InMemoryStore(), log=log), log
        else:
            from langgraph.store.postgres import PostgresStore

            conn_string = url.replace("postgresql+psycopg://", "postgresql://")
            with PostgresStore.from_conn_string(conn_string) as store:
                store.setup()
                yield StoreMemory(store, log=log), log
    finally:
        log.close()


@pytest.fixture
def memory(memory_log: tuple[MemoryBackend, EpisodeLog]) -> MemoryBackend:
    return memory_log[0]


@pytest.fixture
def pg_or_skip(request: pytest.FixtureRequest) -> str:
    """An empty PostgreSQL schema's URL (skipped when no PostgreSQL is configured)."""
    if not os.environ.get(PG_ENV):
        pytest.skip(f"{PG_ENV} is not set")
    return str(request.getfixturevalue("pg_schema_url"))
