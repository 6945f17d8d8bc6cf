"""Every PostgreSQL connection of a process cut at once (a failover, a managed server's restart),
the server back a moment later: what serving processes and the learner do. Only this test's own
connections are ended (named by ``application_name``), as other runs share the server."""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid

import psycopg
import pytest
from sqlalchemy import text

from memabra._serving import PolicyRuntime
from memabra.router import VWRouter
from memabra.storage import DatabaseUnavailableError, EpisodeLog, make_engine, resolve_url, upgrade

PG_ENV = "MEMABRA_TEST_DATABASE_URL"

pytestmark = [pytest.mark.postgres, pytest.mark.skipif(not os.environ.get(PG_ENV), reason="PostgreSQL only")]


@pytest.fixture(name="named_url")
def named_url_fixture(pg_schema_url: str) -> str:
    """The test's schema, its connections named so that only they are ended."""
    upgrade(pg_schema_url)
    return f"{pg_schema_url}&application_name=cut{uuid.uuid4().hex[:12]}"


def _cut(url: str) -> int:
    """``pg_terminate_backend`` on every connection named as ``url`` names them; how many."""
    name = make_engine(url).url.query["application_name"]
    server = make_engine(resolve_url(os.environ[PG_ENV])).url
    with psycopg.connect(
        host=server.host or "127.0.0.1", port=server.port or 5432, user=server.username, dbname=server.database
    ) as admin:
        admin.autocommit = True
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", (name,)
        ).fetchall()
    time.sleep(0.2)  # the server's FATAL reaches the clients
    return len(rows)


def _promote(url: str, seed: int) -> str:
    """Another process's promote (a connection of its own, not one this test cuts)."""
    with EpisodeLog(url.rsplit("&application_name=", 1)[0]) as other:
        snapshot = VWRouter(seed=seed).snapshot()
        other.save_snapshot(snapshot)
        other.set_snapshot_status(snapshot.version, "active")
        return snapshot.version


def _wait_for(runtime: PolicyRuntime, version: str, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while runtime.watcher.loaded_version != version:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_the_listener_listens_again_after_its_connection_is_cut(named_url: str) -> None:
    with EpisodeLog(named_url) as log:
        runtime = PolicyRuntime(log, VWRouter(seed=0), learn=False, reload_interval_s=3600)
        try:
            assert _wait_for(runtime, _promote(named_url, 1), 10), "the NOTIFY never reached the runtime"
            assert _cut(named_url) >= 1  # the listener's connection among them
            # pushed again once it listens again (after 1 s): no poll is due for an hour
            assert _wait_for(runtime, _promote(named_url, 2), 10), "the listener stopped for good"
        finally:
            runtime.close()


def test_a_statement_whose_connection_is_cut_raises_one_named_line_and_the_next_one_works(named_url: str) -> None:
    with EpisodeLog(named_url) as log:
        failed: list[BaseException] = []

        def long_read() -> None:
            try:
                with log.transactions.read() as s:
                    s.execute(text("SELECT pg_sleep(5)"))
            except BaseException as exc:  # noqa: BLE001 - looked at below
                failed.append(exc)

        reader = threading.Thread(target=long_read)
        reader.start()
        time.sleep(0.5)  # the read is in flight
        _cut(named_url)
        reader.join(10)
        assert len(failed) == 1
        error = failed[0]
        assert isinstance(error, DatabaseUnavailableError), repr(error)
        message = str(error)
        assert message.startswith("lost the connection to the database postgresql+psycopg://"), message
        assert "terminating connection" in message and "\n" not in message
        assert log.count_episodes() == 0  # the next read gets a live connection


def test_a_listener_that_cannot_connect_warns_once_not_at_every_try(
    named_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The listener connects with the engine's URL alone: a log whose engine gets its database from
    connect_args works, the listener never does. Its retries warned "lost its database connection"
    at each one (every 30 s for the life of the process), a connection it never had."""
    from memabra import _policy_listen

    monkeypatch.setattr(_policy_listen, "RELISTEN_MAX_S", 0.1)
    server = make_engine(named_url).url
    engine = make_engine(server.set(database="memabra_no_such_db"), connect_args={"dbname": server.database})
    with caplog.at_level(logging.DEBUG, logger="memabra"), EpisodeLog(engine=engine) as log:
        runtime = PolicyRuntime(log, VWRouter(seed=0), learn=False, reload_interval_s=3600)
        try:
            deadline = time.monotonic() + 10
            while sum("LISTEN" in r.getMessage() for r in caplog.records) < 4:
                assert time.monotonic() < deadline, "the listener stopped trying"
                time.sleep(0.05)
        finally:
            runtime.close()
    engine.dispose()  # a log given an engine leaves it to its owner
    tries = [r for r in caplog.records if "LISTEN" in r.getMessage()]
    warned = [r for r in tries if r.levelno >= logging.WARNING]
    assert len(warned) == 1, [r.getMessage() for r in warned]
    assert "cannot connect to the database" in warned[0].getMessage()
    assert all("lost" not in r.getMessage() for r in tries)
