"""A PostgreSQL server that vanishes without closing its connections (a failover that moves the
address, a network partition) is given up on by TCP keepalives and a user timeout that memabra
sets unless the URL does, on the log's pooled connections and on a runtime's LISTEN connection.
Checked on the sockets themselves: the options the kernel will act on, not the arguments passed."""

from __future__ import annotations

import os
import socket
import time
from typing import Any

import psycopg
import pytest

from memabra._serving import PolicyRuntime
from memabra.router import VWRouter
from memabra.storage import EpisodeLog, make_engine, upgrade

PG_ENV = "MEMABRA_TEST_DATABASE_URL"

pytestmark = [pytest.mark.postgres, pytest.mark.skipif(not os.environ.get(PG_ENV), reason="PostgreSQL only")]

# Linux's value where Python does not name it
TCP_USER_TIMEOUT = getattr(socket, "TCP_USER_TIMEOUT", 18)
DEFAULTS = {"keepalive": 1, "idle_s": 10, "interval_s": 5, "count": 3, "user_timeout_ms": 30_000}


def _socket_settings(connection: psycopg.Connection[Any]) -> dict[str, int]:
    sock = socket.socket(fileno=os.dup(connection.pgconn.socket))
    try:
        return {
            "keepalive": int(sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) != 0),
            "idle_s": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
            "interval_s": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
            "count": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
            "user_timeout_ms": sock.getsockopt(socket.IPPROTO_TCP, TCP_USER_TIMEOUT),
        }
    finally:
        sock.close()


def _pooled_settings(url: str) -> dict[str, int]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            raw = conn.connection.dbapi_connection
            assert isinstance(raw, psycopg.Connection)
            return _socket_settings(raw)
    finally:
        engine.dispose()


def _tcp(url: str) -> str:
    if "host=/" in url or "@/" in url:
        pytest.skip("the test server is reached over a Unix-domain socket, where libpq sets no TCP options")
    return url


def test_pooled_connections_give_up_on_a_silent_server(pg_schema_url: str) -> None:
    assert _pooled_settings(_tcp(pg_schema_url)) == DEFAULTS


def test_the_url_sets_its_own_values_and_memabra_fills_in_the_rest(pg_schema_url: str) -> None:
    url = f"{_tcp(pg_schema_url)}&keepalives_idle=60&tcp_user_timeout=0"
    assert _pooled_settings(url) == {**DEFAULTS, "idle_s": 60, "user_timeout_ms": 0}


def test_the_listen_connection_gives_up_on_a_silent_server(pg_schema_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    upgrade(_tcp(pg_schema_url))
    opened: list[psycopg.Connection[Any]] = []
    real_connect = psycopg.connect

    def connect_and_keep(*args: Any, **kwargs: Any) -> psycopg.Connection[Any]:
        connection = real_connect(*args, **kwargs)
        opened.append(connection)
        return connection

    monkeypatch.setattr(psycopg, "connect", connect_and_keep)
    with EpisodeLog(pg_schema_url) as log:
        runtime = PolicyRuntime(log, VWRouter(seed=0), learn=False, reload_interval_s=3600)
        try:
            deadline = time.monotonic() + 10
            while not opened and time.monotonic() < deadline:
                time.sleep(0.05)
            assert opened, "the runtime opened no LISTEN connection"
            assert _socket_settings(opened[0]) == DEFAULTS
        finally:
            runtime.close()
