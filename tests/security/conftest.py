"""Tenant-isolation tests run over every memory backend: the SQL registry (SQLite, and PostgreSQL
when ``MEMABRA_TEST_DATABASE_URL`` is set), LangGraph's ``InMemoryStore`` and ``PostgresStore``."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from langgraph.store.memory import InMemoryStore

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
def tenants(request: pytest.FixtureRequest, tmp_path) -> Iterator[tuple[MemoryBackend, EpisodeLog]]:  # type: ignore[no-untyped-def]
    """One memory backend serving every user, and the episode log beside it."""
    kind: str = request.param
    url = request.getfixturevalue("pg_schema_url") if kind == "sql-postgres" else f"sqlite:///{tmp_path / 'm.db'}"
    upgrade(url)
    log = EpisodeLog(url)
    try:
        if kind.startswith("sql"):
            yield SQLMemory(log), log
        elif kind == "store-inmemory":
            yield StoreMemory(InMemoryStore(), namespace=("memories", "{user_id}"), log=log), log
        else:
            from langgraph.store.postgres import PostgresStore

            pg = str(request.getfixturevalue("pg_schema_url")).replace("postgresql+psycopg://", "postgresql://")
            with PostgresStore.from_conn_string(pg) as store:
                store.setup()
                yield StoreMemory(store, namespace=("memories", "{user_id}"), log=log), log
    finally:
        log.close()
