"""``DatabaseUnavailableError.may_have_written``: whether a write of the failed call may have
reached the database. A connection that could not be opened sent nothing, and a refused write was
rolled back: a client told "it may or may not have been recorded" would look for a change that
cannot be there. Only a connection lost while the write (its ``COMMIT``) was in flight leaves it
unknown, and that stays said."""

from __future__ import annotations

import pickle
import socket
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, event, text

from factories import episode
from memabra.storage import DatabaseNotWritableError, DatabaseUnavailableError, EpisodeLog, make_engine
from memabra.storage._tx import Transactions


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_refused_connection_says_nothing_was_written() -> None:
    url = f"postgresql+psycopg://memabra:hunter2@127.0.0.1:{_closed_port()}/memabra"
    with EpisodeLog(url, check=False) as log:
        for call in (log.count_episodes, lambda: log.log_episode(episode())):
            with pytest.raises(DatabaseUnavailableError, match=r"cannot connect to the database") as raised:
                call()
            assert raised.value.may_have_written is False
            assert "hunter2" not in str(raised.value)
            copy = pickle.loads(pickle.dumps(raised.value))  # a worker process's error, sent back
            assert copy.may_have_written is False and str(copy) == str(raised.value)


def test_a_connection_lost_during_the_commit_says_the_write_may_have_landed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'scratch.db'}")
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE notes (id INTEGER PRIMARY KEY AUTOINCREMENT, body TEXT)")
    real_commit = engine.dialect.do_commit

    def commit_then_lose(dbapi_connection: Any) -> None:
        real_commit(dbapi_connection)  # it landed; the answer did not come back
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(engine.dialect, "do_commit", commit_then_lose)
    monkeypatch.setattr(engine.dialect, "is_disconnect", lambda *_args, **_kw: True)

    def work(conn: Connection) -> None:
        conn.execute(text("INSERT INTO notes (body) VALUES ('once')"))

    with pytest.raises(DatabaseUnavailableError, match="may or may not have committed") as raised:
        Transactions(engine).write_connection(work, what="the note")
    assert raised.value.may_have_written is True
    assert pickle.loads(pickle.dumps(raised.value)).may_have_written is True
    monkeypatch.undo()
    engine.dispose()


def test_a_refused_write_says_nothing_was_written(migrated_url: str) -> None:
    engine = make_engine(migrated_url)
    read_only = {"on": False}

    @event.listens_for(engine, "connect")
    def _standby(dbapi_connection: Any, _record: Any) -> None:
        if not read_only["on"]:
            return
        if engine.dialect.name == "sqlite":
            dbapi_connection.execute("PRAGMA query_only=ON")
            return
        with dbapi_connection.cursor() as cursor:
            cursor.execute("SET default_transaction_read_only = on")
        dbapi_connection.commit()

    with EpisodeLog(engine=engine) as log:
        engine.dispose()
        read_only["on"] = True
        with pytest.raises(DatabaseNotWritableError) as raised:
            log.log_episode(episode())
        assert raised.value.may_have_written is False  # rolled back: the page says "not saved"
        assert log.count_episodes() == 0
    engine.dispose()
