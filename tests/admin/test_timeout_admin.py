"""A statement PostgreSQL cancels under a running admin (``lock_timeout`` here, with another
transaction holding the feedback table; ``statement_timeout`` alike) is storage's
:class:`DatabaseTimeoutError`: answered 503 with ``Retry-After`` as an outage is, titled "Database
timed out", saying which bound fired and, for a change, whether it may have been recorded, never the
URL; once the lock is gone the same admin saves the change, with no restart. Not the 500 an
``OperationalError`` would be, on either backend's app."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import event, text
from starlette.applications import Starlette
from starlette.testclient import TestClient

from factories import episode
from memabra._admin import create_app
from memabra.storage import DatabaseTimeoutError, EpisodeLog, make_engine

from .conftest import PG_ENV, TOKEN, migrated_database

BEARER = {"authorization": f"Bearer {TOKEN}"}


def _assert_timed_out(response: httpx.Response, *phrases: str) -> None:
    assert response.status_code == 503, response.text[:800]
    assert int(response.headers["retry-after"]) > 0
    assert response.headers["cache-control"] == "no-store"
    assert "postgresql" not in response.text and "127.0.0.1" not in response.text
    for phrase in phrases:
        assert phrase in response.text, (phrase, response.text[:1500])


def _rate(client: TestClient, episode_id: str, key: str, **headers: str) -> httpx.Response:
    return client.post(
        f"/episodes/{episode_id}/feedback",
        data={"action": "rating", "rating": "4", "idempotency_key": key},
        headers={**BEARER, **headers},
    )


@pytest.mark.skipif(not os.environ.get(PG_ENV), reason=f"PostgreSQL's lock_timeout: set {PG_ENV}")
def test_a_lock_timeout_is_a_503_that_says_so_and_the_change_saves_once_the_lock_is_gone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with migrated_database("postgres", tmp_path) as url:
        engine = make_engine(url)

        def short_lock_wait(dbapi_connection: Any, _record: Any) -> None:
            with dbapi_connection.cursor() as cursor:
                cursor.execute("SET lock_timeout = '200ms'")
            dbapi_connection.commit()

        event.listen(engine, "connect", short_lock_wait)
        log = EpisodeLog(engine=engine)
        ep = episode()
        log.log_episode(ep)
        holder = make_engine(url)
        try:
            with TestClient(create_app(log, token=TOKEN), follow_redirects=False) as client:
                with holder.connect() as conn:
                    conn.execute(text("LOCK TABLE feedback IN ACCESS EXCLUSIVE MODE"))
                    with caplog.at_level(logging.WARNING, logger="memabra"):
                        refused = _rate(client, ep.id, "k-1")
                    asked = _rate(client, ep.id, "k-1", accept="application/json")
                    conn.rollback()
                _assert_timed_out(
                    refused,
                    "<h1>Database timed out</h1>",
                    "waited longer than the database&#39;s lock_timeout for a lock another transaction holds",
                    "rolled back (nothing of it recorded): send the change again",
                )
                assert "may or may not have been recorded" not in refused.text
                assert asked.status_code == 503 and "lock_timeout" in asked.json()["detail"]
                warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
                assert any("answered 503, the database cancelled a statement" in w for w in warnings), warnings
                assert not log.feedback_for(ep.id)
                saved = _rate(client, ep.id, "k-1")
                assert saved.status_code == 303, saved.text[:800]
                assert len(log.feedback_for(ep.id)) == 1
        finally:
            log.close()
            holder.dispose()
            engine.dispose()


@pytest.fixture
def sqlite_client(tmp_path: Path) -> Iterator[TestClient]:
    """A SQLite app, whose own handler of ``OperationalError`` (file problems) must not take it."""
    with migrated_database("sqlite", tmp_path) as url:
        log = EpisodeLog(url)
        app = create_app(log, token=TOKEN)
        assert isinstance(app, Starlette)

        async def cancelled(request: Any) -> Any:
            raise DatabaseTimeoutError(
                "the database postgresql://memabra@db.internal/prod cancelled a statement: canceling statement "
                "due to statement timeout; ...",
                setting="statement_timeout",
                outcome_unknown=request.query_params.get("at") == "commit",
            )

        app.add_route("/cancelled", cancelled, methods=["GET", "POST"])
        with TestClient(app, follow_redirects=False, raise_server_exceptions=False) as client:
            yield client
        log.close()


def test_a_cancel_during_the_commit_says_the_change_may_or_may_not_be_recorded(sqlite_client: TestClient) -> None:
    unknown = sqlite_client.post("/cancelled?at=commit", headers=BEARER)
    _assert_timed_out(
        unknown,
        "<h1>Database timed out</h1>",
        "ran longer than the database&#39;s statement_timeout allows",
        "may or may not have been recorded: check before repeating it",
    )
    assert "db.internal" not in unknown.text and "send the change again" not in unknown.text
    as_json = sqlite_client.post("/cancelled?at=commit", headers={**BEARER, "accept": "application/json"})
    assert as_json.status_code == 503 and "may or may not have been recorded" in as_json.json()["detail"]
    # a page read again is as safe as ever: no word about changes
    read = sqlite_client.get("/cancelled", headers=BEARER)
    _assert_timed_out(read, "statement_timeout", "Try again")
    assert "recorded" not in read.text
