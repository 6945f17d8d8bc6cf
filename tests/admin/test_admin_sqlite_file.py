"""A SQLite log file that goes away under a running admin (deleted, moved, its disk unmounted,
replaced by another file): the admin answers 503 naming the problem, never a 500 nor the ghost of
the file its pooled connections still hold open, creates no empty file at the path, and serves
again as soon as the file is back, without a restart. A bearer scrape of ``/metrics`` reads
``memabra_status_up 0``, as for any log it cannot read."""

from __future__ import annotations

import logging
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from starlette.testclient import TestClient

from memabra._admin import create_app
from memabra._admin._sqlite_file import SqliteFileWatch
from memabra.storage import EpisodeLog, upgrade

from .conftest import TOKEN, Seeded, seed_log

BEARER = {"authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[TestClient, Path, Seeded]]:
    """An admin over a seeded SQLite log at ``tmp_path/logs/admin.db`` (its WAL checkpointed)."""
    folder = tmp_path / "logs"
    folder.mkdir()
    path = folder / "admin.db"
    url = f"sqlite:///{path}"
    upgrade(url)
    with EpisodeLog(url) as seeding:
        seeded = seed_log(seeding)
    log = EpisodeLog(url)
    client = TestClient(create_app(log, token=TOKEN), follow_redirects=False, raise_server_exceptions=False)
    with client:
        assert client.get("/episodes", headers=BEARER).status_code == 200  # the pool holds connections
        yield client, path, seeded
    log.close()


def _assert_file_problem(client: TestClient, problem: str) -> None:
    response = client.get("/episodes", headers=BEARER)
    assert response.status_code == 503, response.text[:500]
    assert int(response.headers["retry-after"]) > 0
    assert "<h1>Database unavailable</h1>" in response.text
    assert "SQLite file admin.db cannot be used" in response.text
    assert problem in response.text
    assert "serves again as soon as the file is back" in response.text


def test_a_moved_log_file_is_a_503_naming_the_problem_and_served_again_once_back(
    served: tuple[TestClient, Path, Seeded], caplog: pytest.LogCaptureFixture
) -> None:
    client, path, seeded = served
    away = path.with_name("moved.db")
    path.rename(away)
    with caplog.at_level(logging.WARNING, logger="memabra"):
        _assert_file_problem(client, "it is missing (deleted or moved)")
    # the log line names the whole path for the operator
    assert any(str(path) in r.getMessage() and "answered 503" in r.getMessage() for r in caplog.records)
    assert not path.exists()  # no empty database left at the path
    # a write is refused the same way, saying it may not have been recorded
    posted = client.post(f"/episodes/{seeded.episodes[0]}/feedback", headers=BEARER, data={"rating": "1"})
    assert posted.status_code == 503 and "check before repeating it" in posted.text
    # a scrape with a token: the alert on memabra_status_up fires rather than a scrape error
    metrics = client.get("/metrics", headers=BEARER)
    assert metrics.status_code == 200 and "memabra_status_up 0" in metrics.text
    # JSON asked for, JSON answered
    asked = client.get("/episodes", headers={**BEARER, "accept": "application/json"})
    assert asked.status_code == 503 and "missing" in asked.json()["detail"]
    assert not path.exists()

    away.rename(path)
    page = client.get("/episodes", headers=BEARER)
    assert page.status_code == 200
    assert seeded.episodes[0][:12] in page.text
    assert "memabra_status_up 1" in client.get("/metrics", headers=BEARER).text


def test_a_log_file_replaced_by_a_restored_copy_is_read_not_the_ghost_of_the_old_one(
    served: tuple[TestClient, Path, Seeded],
) -> None:
    client, path, seeded = served
    gone = seeded.episodes[-1]
    assert client.get(f"/episodes/{gone}", headers=BEARER).status_code == 200
    # a restore: a copy made elsewhere (without that episode) moved over the file
    copy = path.with_name("restored.db")
    shutil.copy(path, copy)
    with EpisodeLog(f"sqlite:///{copy}") as restored:
        restored.delete_episodes([gone], include_unlearned=True)
    copy.replace(path)
    assert client.get(f"/episodes/{gone}", headers=BEARER).status_code == 404
    assert client.get(f"/episodes/{seeded.episodes[0]}", headers=BEARER).status_code == 200


def test_an_unmounted_folder_is_named(served: tuple[TestClient, Path, Seeded]) -> None:
    client, path, _ = served
    path.parent.rename(path.parent.with_name("unmounted"))
    _assert_file_problem(client, "its folder logs is missing (a disk not mounted?)")
    assert not path.parent.exists()  # nothing created in its place
    path.parent.with_name("unmounted").rename(path.parent)
    assert client.get("/episodes", headers=BEARER).status_code == 200


def test_a_file_with_no_log_in_its_place_is_a_503_not_a_500(served: tuple[TestClient, Path, Seeded]) -> None:
    client, path, _ = served
    path.rename(path.with_name("kept.db"))
    sqlite3.connect(path).close()  # an empty database where the log was
    _assert_file_problem(client, "the file now at its path holds no memabra log")
    path.with_name("kept.db").replace(path)
    assert client.get("/episodes", headers=BEARER).status_code == 200


def test_a_request_in_flight_when_the_file_goes_creates_no_empty_file(
    served: tuple[TestClient, Path, Seeded], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file checked and found, then moved before the request's first query, while another
    request that found it gone dropped the pool: the new connection must not create an empty
    database at the path (which the next check would take for a restored file)."""
    client, path, _ = served
    checked = SqliteFileWatch.problem
    moved = path.with_name("moved.db")

    def checked_then_gone(self: SqliteFileWatch) -> str | None:
        found = checked(self)
        if found is None and not moved.exists():
            path.rename(path.with_name("moved.db"))
            self.log.engine.dispose()  # what a request that found the file gone meanwhile did
        return found

    monkeypatch.setattr(SqliteFileWatch, "problem", checked_then_gone)
    response = client.get("/episodes", headers=BEARER)
    monkeypatch.undo()
    assert not path.exists()  # no empty database left at the path
    assert response.status_code == 503, response.text[:300]
    assert "it is missing (deleted or moved)" in response.text
    path.with_name("moved.db").rename(path)
    assert client.get("/episodes", headers=BEARER).status_code == 200


@pytest.mark.parametrize(
    ("name", "query"),
    [("admin.db", "?timeout=30"), ("résumé 日本 a?b#c%41.db", ""), ("sp ace.db", "?timeout=5&check_same_thread=false")],
)
def test_the_read_write_open_keeps_query_parameters_and_odd_paths(tmp_path: Path, name: str, query: str) -> None:
    """The guard's ``mode=rw`` opens the very file the URL names (percent-escaped in the URI it
    builds), with the URL's connection parameters; a session embedded beside the admin on the same
    log routes and logs through it; the file gone, nothing is created at the path."""
    from memabra._session import RoutingSession
    from memabra.router import HybridRouter, Similarity

    path = tmp_path / name
    url = f"sqlite:///{quote(str(path))}{query}"
    upgrade(url)
    log = EpisodeLog(url)
    try:
        client = TestClient(create_app(log, token=TOKEN), follow_redirects=False, raise_server_exceptions=False)
        with client, RoutingSession(router=HybridRouter(similarity=Similarity(encoder=None)), log=log) as session:
            assert client.get("/episodes", headers=BEARER).status_code == 200
            with log.engine.connect() as conn:
                assert [Path(row[2]) for row in conn.exec_driver_sql("PRAGMA database_list")] == [path]
            session.memory.remember("ann", "I live in Lyon")
            t = session.begin(user_id="ann", query="where do I live")
            episode_id = session.finish(t.id, "Lyon")
            assert client.get(f"/episodes/{episode_id}", headers=BEARER).status_code == 200
            path.rename(tmp_path / "moved.db")
            assert client.get("/episodes", headers=BEARER).status_code == 503
            assert not path.exists()
    finally:
        log.close()
