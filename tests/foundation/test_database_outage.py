"""A PostgreSQL server that cannot be reached, or that drops a connection mid-run: a named error
with the URL (password hidden) and the driver's reason; a write whose connection was killed before
its commit is run again on a new connection, and nothing acknowledged is lost."""

from __future__ import annotations

import os
import socket
import time

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from factories import episode
from memabra import Feedback
from memabra._errors import ConfigError
from memabra._feedback import RewardService
from memabra.storage import DatabaseUnavailableError, EpisodeLog, make_engine, resolve_url, upgrade
from memabra.storage import _engine as engine_module

PG_ENV = "MEMABRA_TEST_DATABASE_URL"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("postgresql+psycopg://root:s3cret@127.0.0.1:{port}/memabra", "Connection refused"),
        ("postgresql+psycopg://root:s3cret@no-such-host.invalid:5432/memabra", "no-such-host.invalid"),
    ],
)
def test_an_unreachable_server_is_named_in_one_line(url: str, reason: str) -> None:
    url = url.format(port=_free_port())
    with pytest.raises(DatabaseUnavailableError) as caught:
        EpisodeLog(url)
    message = str(caught.value)
    assert message.startswith("cannot connect to the database postgresql+psycopg://root:***@"), message
    assert reason in message and "\n" not in message and "s3cret" not in message
    # still an OperationalError: code that waits out an outage by catching that keeps doing so
    assert isinstance(caught.value, OperationalError)
    assert isinstance(caught.value.orig, psycopg.OperationalError)


def test_a_server_that_never_answers_times_out(silent_server: int) -> None:
    url = f"postgresql+psycopg://root@127.0.0.1:{silent_server}/memabra?connect_timeout=1"
    started = time.monotonic()
    with pytest.raises(DatabaseUnavailableError, match=r"cannot connect to the database .*127\.0\.0\.1"):
        EpisodeLog(url)
    assert time.monotonic() - started < 8


def test_a_connection_has_a_connect_timeout_unless_the_url_sets_one(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict[str, object]] = []
    real = engine_module.create_engine

    def spy(url: str, **kwargs: object) -> object:
        seen.append(dict(kwargs.get("connect_args", {})))  # type: ignore[call-overload]
        return real(url, **kwargs)

    monkeypatch.setattr(engine_module, "create_engine", spy)
    make_engine("postgresql+psycopg://root@127.0.0.1/x").dispose()
    make_engine("postgresql+psycopg://root@127.0.0.1/x?connect_timeout=3").dispose()
    # never a server-side prepared statement (PgBouncer), and TCP settings for a silent server
    never = {"prepare_threshold": None, **engine_module.PG_SOCKET_DEFAULTS}
    assert seen == [{**never, "connect_timeout": engine_module.PG_CONNECT_TIMEOUT_S}, never]


def test_a_libpq_without_tcp_user_timeout_is_not_given_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """libpq before 12 refuses every connection given an option it does not know ("invalid
    connection option"), and psycopg 3 runs on libpq 10 and later: the keepalives alone serve there."""
    monkeypatch.setattr(psycopg.pq, "version", lambda: 110_022)
    settings = engine_module.pg_connection_defaults({})
    assert "tcp_user_timeout" not in settings
    assert settings["keepalives_idle"] == engine_module.PG_SOCKET_DEFAULTS["keepalives_idle"]
    monkeypatch.setattr(psycopg.pq, "version", lambda: 120_000)
    assert engine_module.pg_connection_defaults({})["tcp_user_timeout"] == 30_000


def _terminate_backends_of(log: EpisodeLog) -> None:
    """``pg_terminate_backend`` on the connection the log's pool hands out next (a server restart,
    an administrator, a proxy), from another connection; only that one, as tests may share the server."""
    with log.transactions.read() as s:
        pid = s.execute(text("SELECT pg_backend_pid()")).scalar_one()
    url = make_engine(resolve_url(os.environ[PG_ENV])).url
    with psycopg.connect(
        host=url.host or "127.0.0.1", port=url.port or 5432, user=url.username, dbname=url.database, autocommit=True
    ) as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
    time.sleep(0.2)  # the server's FATAL reaches the client


@pytest.mark.skipif(not os.environ.get(PG_ENV), reason="PostgreSQL only")
def test_writes_and_reads_recover_from_a_killed_connection(pg_schema_url: str) -> None:
    upgrade(pg_schema_url)
    with EpisodeLog(pg_schema_url) as log:
        svc = RewardService(log)
        first = episode()
        svc.record(first)
        _terminate_backends_of(log)
        svc.record(episode())  # the pooled connection is dead: run again on a new one
        _terminate_backends_of(log)
        svc.post_feedback(Feedback(first.id, "explicit", "user", {"rating": 4}))
        _terminate_backends_of(log)
        assert log.count_episodes() == 2  # a read after the kill
        assert len(log.feedback_for(first.id)) == 1


def test_a_write_whose_connection_dies_while_committing_is_not_run_again(log: EpisodeLog) -> None:
    calls: list[int] = []

    def attempt(committing: list[bool]) -> None:
        calls.append(1)
        committing.append(True)  # the work ran; the connection is lost while COMMIT is in flight
        lost = psycopg.OperationalError("the connection is lost")
        raise OperationalError("COMMIT", {}, lost, connection_invalidated=True)

    with pytest.raises(DatabaseUnavailableError, match=r"cannot finish the log_episodes on .*may or may not have"):
        log.transactions._retrying(attempt, "log_episodes")
    assert calls == [1]


def test_postgresql_without_its_driver_is_one_line_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "psycopg", None)  # as where the postgres extra is not installed
    with pytest.raises(ConfigError, match=r"pip install 'memabra\[postgres\]'"):
        make_engine("postgresql+psycopg://root@127.0.0.1/x")
