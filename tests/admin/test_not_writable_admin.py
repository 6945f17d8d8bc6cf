"""A database that refuses writes under a running admin: a SQLite file read-only to the admin's
user or on a full volume, a PostgreSQL hot standby. A change sent then is answered 503 with
``Retry-After`` (as an outage is), saying what refuses, the driver's reason and what to do, never
the URL; pages that only read are still served, and once the database takes writes the same admin
saves the change, with no restart.

The refusals are the ones ``tests/storage/test_read_only.py`` and ``test_disk_full.py`` make: a
connection opened while the database was read-only keeps ``PRAGMA query_only`` (SQLite) or
``default_transaction_read_only`` (PostgreSQL's standby refusal, SQLSTATE 25006); a full volume is
``PRAGMA max_page_count`` capping the file at its size."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import event
from sqlalchemy.exc import OperationalError
from starlette.applications import Starlette
from starlette.testclient import TestClient

from factories import episode
from memabra._admin import create_app
from memabra.storage import EpisodeLog, make_engine

from .conftest import BACKENDS, TOKEN, migrated_database

BEARER = {"authorization": f"Bearer {TOKEN}"}
_ROOM = 1_073_741_823  # SQLite's largest max_page_count: as much room as the volume has


class Database:
    """What connections opened from now on meet: read-only (each keeps it), or a full volume (at checkout)."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.read_only = False
        self.full = False

    def on_connect(self, dbapi_connection: Any, _record: Any) -> None:
        if not self.read_only:
            return
        if self.backend == "sqlite":
            dbapi_connection.execute("PRAGMA query_only=ON")
            return
        with dbapi_connection.cursor() as cursor:
            cursor.execute("SET default_transaction_read_only = on")
        dbapi_connection.commit()

    def on_checkout(self, dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        if self.backend == "sqlite":
            # max_page_count cannot go below the file's size: asking for 1 caps it at its size now
            dbapi_connection.execute(f"PRAGMA max_page_count={1 if self.full else _ROOM}")


@dataclass(frozen=True)
class Served:
    client: TestClient
    log: EpisodeLog
    database: Database
    episode_id: str


@contextmanager
def _serve(backend: str, directory: Path) -> Iterator[Served]:
    with migrated_database(backend, directory) as url:
        engine = make_engine(url)
        database = Database(engine.dialect.name)
        event.listen(engine, "connect", database.on_connect)
        event.listen(engine, "checkout", database.on_checkout)
        log = EpisodeLog(engine=engine)
        ep = episode()
        log.log_episode(ep)
        app = create_app(log, token=TOKEN)
        with TestClient(app, follow_redirects=False, raise_server_exceptions=False) as client:
            yield Served(client, log, database, ep.id)
        log.close()
        engine.dispose()


@pytest.fixture(params=BACKENDS)
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Served]:
    with _serve(request.param, tmp_path) as serving:
        yield serving


@pytest.fixture
def served_sqlite(tmp_path: Path) -> Iterator[Served]:
    with _serve("sqlite", tmp_path) as serving:
        yield serving


def _rate(served: Served, key: str, **headers: str) -> httpx.Response:
    return served.client.post(
        f"/episodes/{served.episode_id}/feedback",
        data={"action": "rating", "rating": "4", "idempotency_key": key},
        headers={**BEARER, **headers},
    )


def _assert_not_writable(response: httpx.Response, *phrases: str) -> None:
    assert response.status_code == 503, response.text[:800]
    assert int(response.headers["retry-after"]) > 0
    assert response.headers["cache-control"] == "no-store"
    text = response.text
    assert "postgresql" not in text and "127.0.0.1" not in text and "sqlite:" not in text
    assert "a connection was refused or lost" not in text  # not the outage's wording
    for phrase in phrases:
        assert phrase in text, (phrase, text[:1500])


_READ_ONLY = {
    "sqlite": (
        "The database refuses writes",
        "attempt to write a readonly database",
        "the SQLite file admin.db is read-only to the admin&#39;s user",
        "make them writable",
    ),
    "postgresql": (
        "The database refuses writes",
        "in a read-only transaction",
        "the PostgreSQL server takes no writes: it is a hot standby",
        "point the admin&#39;s database URL at the primary",
    ),
}


def test_a_read_only_database_names_the_refusal_and_saves_again_once_writable(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    served.log.engine.dispose()  # the next connections open read-only (a standby, a read-only file)
    served.database.read_only = True
    with caplog.at_level(logging.WARNING, logger="memabra"):
        refused = _rate(served, "k-1")
    _assert_not_writable(refused, "<h1>Database not writable</h1>", *_READ_ONLY[served.database.backend])
    # a refusal is the database's answer, its transaction rolled back: nothing to check before sending it again
    assert "Your change was not saved (the database rolled it back)" in refused.text
    assert "may or may not" not in refused.text
    warnings = [r.getMessage() for r in caplog.records if r.name == "memabra" and r.levelno == logging.WARNING]
    assert any("answered 503, the database refused a write" in w for w in warnings), warnings
    # JSON asked for, JSON answered, with the same words
    asked = _rate(served, "k-1", accept="application/json")
    _assert_not_writable(asked)
    assert "hot standby" in asked.json()["detail"] or "read-only to the admin's user" in asked.json()["detail"]
    # reading is not refused: the pages are still served
    assert served.client.get(f"/episodes/{served.episode_id}", headers=BEARER).status_code == 200
    assert not served.log.feedback_for(served.episode_id)

    served.database.read_only = False  # the file is writable again, the address points at the primary
    saved = _rate(served, "k-1")
    assert saved.status_code == 303, saved.text[:800]
    assert len(served.log.feedback_for(served.episode_id)) == 1


def test_a_full_sqlite_volume_says_to_free_space(served_sqlite: Served) -> None:
    served = served_sqlite
    served.database.full = True
    refused = None
    for i in range(200):  # the file's last page has room for a few ratings
        response = _rate(served, f"k-{i}")
        if response.status_code != 303:
            refused = response
            break
    assert refused is not None, "the capped file never filled"
    _assert_not_writable(
        refused,
        "<h1>Database not writable</h1>",
        "database or disk is full",
        "the volume that holds the SQLite file admin.db is full",
        "free space on it",
    )
    served.database.full = False
    assert _rate(served, "k-after").status_code == 303


def test_a_refusal_met_outside_storage_s_listener_is_worded_the_same(served_sqlite: Served) -> None:
    """sqlite3's own error (a statement on a connection storage never saw), not "cannot be used":
    the file is there and still read."""

    async def write_raw(_request: Any) -> Any:
        raise OperationalError("INSERT", {}, sqlite3.OperationalError("attempt to write a readonly database"))

    app = served_sqlite.client.app
    assert isinstance(app, Starlette)
    app.add_route("/raw-write", write_raw, methods=["POST"])
    refused = served_sqlite.client.post("/raw-write", headers=BEARER)
    _assert_not_writable(refused, "<h1>Database not writable</h1>", "the SQLite file admin.db is read-only")
    assert "cannot be used" not in refused.text
    assert served_sqlite.client.get("/episodes", headers=BEARER).status_code == 200
