"""A database the admin cannot reach (connections refused) or whose connection the server ends under
a request (a restart, a failover: ``pg_terminate_backend`` here, on this test's own connections only,
named by ``application_name``, as other runs share the server): 503 with ``Retry-After``, as the
page, JSON or text the request asked for, saying so without the database's URL or password, logged
as one WARNING line; the next request is served again with no restart. Any other error stays 500."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from starlette.testclient import TestClient

from memabra._admin import create_app
from memabra._admin._auth import SESSION_COOKIE
from memabra.storage import EpisodeLog, make_engine, upgrade

from .conftest import PASSWORD, TOKEN, sign_in

PG_ENV = "MEMABRA_TEST_DATABASE_URL"
BEARER = {"authorization": f"Bearer {TOKEN}"}
# what the database URLs carry: PostgreSQL's trust authentication (the test server's) ignores it
SECRET = "hunter2-not-for-pages"


@dataclass(frozen=True)
class Outage:
    """What a request answered while the database was away: the response and what was logged."""

    response: httpx.Response
    warnings: list[str]
    errors: list[str]


def _assert_unavailable(outage: Outage, kind: str) -> None:
    response = outage.response
    assert response.status_code == 503, response.text
    assert int(response.headers["retry-after"]) > 0
    assert response.headers["cache-control"] == "no-store"
    assert "content-security-policy" in response.headers  # the admin's own answer, not the server's
    content_type = response.headers["content-type"]
    if kind == "html":
        assert content_type.startswith("text/html")
        assert "<h1>Database unavailable</h1>" in response.text and "Sign in" not in response.text
    elif kind == "json":
        assert content_type.startswith("application/json")
        assert "database is unavailable" in response.json()["detail"]
    else:
        assert content_type.startswith("text/plain")
    assert "database is unavailable" in response.text.lower()
    # neither the password nor the rest of the URL (host, user, database) reaches the client
    assert SECRET not in response.text and "postgresql" not in response.text and "127.0.0.1" not in response.text
    assert len(outage.warnings) == 1, outage.warnings
    assert "answered 503, the database is unavailable: " in outage.warnings[0]
    assert SECRET not in outage.warnings[0] and "\n" not in outage.warnings[0]
    assert outage.errors == []  # no traceback logged


def _request(client: TestClient, kind: str) -> httpx.Response:
    """The request of each kind: a page and a JSON download (a bearer token: no database read to
    sign in), or ``/metrics`` with a signed-in session (checking it is not logged out reads the
    database; a bearer scrape's status read answers ``memabra_status_up 0`` instead)."""
    if kind == "html":
        return client.get("/episodes", headers=BEARER)
    if kind == "json":
        return client.get("/episodes/any-episode?format=json", headers=BEARER)
    return client.get("/metrics")


@pytest.fixture
def caught(caplog: pytest.LogCaptureFixture) -> Callable[[Callable[[], httpx.Response]], Outage]:
    def call(request: Callable[[], httpx.Response]) -> Outage:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="memabra"):
            response = request()
        ours = [r for r in caplog.records if r.name.startswith("memabra")]
        return Outage(
            response,
            [r.getMessage() for r in ours if r.levelno == logging.WARNING],
            [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR],
        )

    return call


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _signed_in_cookie(tmp_path: Path, secret_key: bytes) -> str:
    """A session cookie signed with ``secret_key``, from an app whose database answers (signing
    in reads the database: a sign-in form's session must not be one that was logged out)."""
    url = f"sqlite:///{tmp_path / 'sign-in.db'}"
    upgrade(url)
    with EpisodeLog(url) as log, TestClient(create_app(log, password=PASSWORD, secret_key=secret_key)) as client:
        assert sign_in(client, PASSWORD).status_code == 303
        return str(client.cookies[SESSION_COOKIE])


@pytest.mark.parametrize("kind", ["html", "json", "text"])
def test_a_database_that_refuses_connections_answers_503(
    kind: str, tmp_path: Path, caught: Callable[[Callable[[], httpx.Response]], Outage]
) -> None:
    key = b"k" * 32
    cookie = _signed_in_cookie(tmp_path, key)
    url = f"postgresql+psycopg://memabra:{SECRET}@127.0.0.1:{_closed_port()}/memabra"
    with (
        EpisodeLog(url, check=False) as log,
        TestClient(create_app(log, token=TOKEN, password=PASSWORD, secret_key=key)) as client,
    ):
        client.cookies.set(SESSION_COOKIE, cookie)
        outage = caught(lambda: _request(client, kind))
    _assert_unavailable(outage, kind)
    assert "cannot connect to the database postgresql+psycopg://memabra:***@127.0.0.1" in outage.warnings[0]


def test_signing_in_while_the_database_is_away_answers_503_with_a_way_back(
    caught: Callable[[Callable[[], httpx.Response]], Outage],
) -> None:
    url = f"postgresql+psycopg://memabra:{SECRET}@127.0.0.1:{_closed_port()}/memabra"
    with EpisodeLog(url, check=False) as log, TestClient(create_app(log, password=PASSWORD)) as client:
        outage = caught(lambda: sign_in(client, PASSWORD))
    _assert_unavailable(outage, "html")
    assert 'href="/login">Try again' in outage.response.text and "may or may not" not in outage.response.text


def test_a_bearer_scrape_still_answers_as_an_exporter_does() -> None:
    url = f"postgresql+psycopg://memabra:{SECRET}@127.0.0.1:{_closed_port()}/memabra"
    with EpisodeLog(url, check=False) as log, TestClient(create_app(log, token=TOKEN)) as client:
        scrape = client.get("/metrics", headers=BEARER)
    # a scrape needs no database read to sign in; its status read failing is memabra_status_up 0
    assert scrape.status_code == 200 and "memabra_status_up 0" in scrape.text


def test_a_write_whose_connection_was_refused_says_it_was_not_saved(
    caught: Callable[[Callable[[], httpx.Response]], Outage],
) -> None:
    # no connection was opened, so nothing of the change reached the database: "may or may not
    # have been recorded" would send a person to look for a change that cannot be there
    url = f"postgresql+psycopg://memabra:{SECRET}@127.0.0.1:{_closed_port()}/memabra"
    with EpisodeLog(url, check=False) as log, TestClient(create_app(log, token=TOKEN)) as client:
        outage = caught(
            lambda: client.post(
                "/episodes/e-1/feedback",
                data={"action": "rating", "rating": "4", "idempotency_key": "k-1"},
                headers=BEARER,
            )
        )
        _assert_unavailable(outage, "html")
        assert "Your change was not saved (it never reached the database)" in outage.response.text
        assert "no connection to it could be opened" in outage.response.text
        assert "may or may not" not in outage.response.text
        assert 'href="/episodes"' in outage.response.text


def test_other_database_errors_stay_500(
    tmp_path: Path, caught: Callable[[Callable[[], httpx.Response]], Outage]
) -> None:
    # a table missing is a broken deployment, not an outage that a retry outlasts
    url = f"sqlite:///{tmp_path / 'admin.db'}"
    upgrade(url)
    with EpisodeLog(url) as log:
        with log.engine.begin() as conn:
            conn.execute(text("DROP TABLE policy_snapshots"))
        app = create_app(log, token=TOKEN)
        with TestClient(app, raise_server_exceptions=False) as client:
            outage = caught(lambda: client.get("/policies", headers=BEARER))
    assert outage.response.status_code == 500
    assert "retry-after" not in outage.response.headers


# ---------------------------------------------------------------------------------- PostgreSQL


@pytest.fixture
def named_url(pg_schema_url: str) -> str:
    """The test's schema, with a password in its URL and its connections named so that only they
    are ended."""
    upgrade(pg_schema_url)
    with_secret = make_url(pg_schema_url)
    if not with_secret.password:
        with_secret = with_secret.set(password=SECRET)
    rendered = with_secret.render_as_string(hide_password=False)
    return f"{rendered}&application_name=admin{uuid.uuid4().hex[:12]}"


@pytest.fixture
def locker(pg_schema_url: str) -> Iterator[Callable[[str, str, Callable[[], httpx.Response]], httpx.Response]]:
    """``cut(table, name, request)``: runs ``request`` while ``table`` is locked, ends the
    connection named ``name`` once it waits on that lock (mid-request), and returns the answer."""
    engine = make_engine(pg_schema_url)

    def cut(table: str, name: str, request: Callable[[], httpx.Response]) -> httpx.Response:
        answered: list[httpx.Response] = []
        with engine.connect() as holder, engine.connect().execution_options(isolation_level="AUTOCOMMIT") as watch:
            holder.execute(text(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE"))
            worker = threading.Thread(target=lambda: answered.append(request()))
            worker.start()
            waiting = "SELECT pid FROM pg_stat_activity WHERE application_name = :n AND wait_event_type = 'Lock'"
            deadline = time.monotonic() + 10
            while not watch.execute(text(waiting), {"n": name}).fetchall():
                assert time.monotonic() < deadline, "the request never reached the locked table"
                time.sleep(0.02)
            ended = watch.execute(
                text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = :n"), {"n": name}
            ).fetchall()
            assert ended
            holder.rollback()
            worker.join(10)
        assert len(answered) == 1
        return answered[0]

    yield cut
    engine.dispose()


@pytest.mark.postgres
@pytest.mark.skipif(not os.environ.get(PG_ENV), reason="PostgreSQL only")
@pytest.mark.parametrize(
    ("kind", "table"), [("html", "episodes"), ("json", "episodes"), ("text", "admin_revoked_sessions")]
)
def test_a_connection_cut_mid_request_answers_503_and_the_next_request_is_served(
    named_url: str, locker, caught, kind: str, table: str
) -> None:  # type: ignore[no-untyped-def]
    name = make_url(named_url).query["application_name"]
    app = create_app(named_url, token=TOKEN, password=PASSWORD)
    with TestClient(app) as client:
        assert sign_in(client, PASSWORD).status_code == 303
        before = _request(client, kind)
        assert before.status_code == (404 if kind == "json" else 200), before.text  # no such episode
        outage = caught(lambda: locker(table, name, lambda: _request(client, kind)))
        _assert_unavailable(outage, kind)
        assert "lost the connection to the database postgresql+psycopg://" in outage.warnings[0]
        assert "terminating connection" in outage.warnings[0]
        # the next request gets a live connection: no restart
        after = _request(client, kind)
        assert after.status_code == before.status_code, after.text
