"""Review of refused writes (``storage/_refusals.py``, ``storage/_tx.py``): replacing pooled
connections never empties an in-memory database, and a refusal that arrives with the connection
lost during the COMMIT is not retried (the write may have landed: a retry would store it twice).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.pool import QueuePool

from factories import episode
from memabra.storage import DatabaseNotWritableError, DatabaseUnavailableError, EpisodeLog, make_engine, upgrade
from memabra.storage._tx import Transactions

_ROOM = 1_073_741_823  # SQLite's largest max_page_count


def _cap_size(engine: Engine, full: dict[str, bool]) -> None:
    @event.listens_for(engine, "checkout")
    def _cap(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        # max_page_count cannot go below the file's size: 1 caps it at its size now
        dbapi_connection.execute(f"PRAGMA max_page_count={1 if full['on'] else _ROOM}")


@pytest.fixture(
    params=[
        "sqlite://",  # SQLAlchemy's own pool for it: SingletonThreadPool
        "sqlite:///file:memabra_review?mode=memory&cache=shared&uri=true",  # a QueuePool
    ]
)
def memory_engine(request: pytest.FixtureRequest) -> Iterator[Engine]:
    shared = "cache=shared" in request.param
    pool: dict[str, Any] = {"poolclass": QueuePool} if shared else {}
    engine = create_engine(request.param, connect_args={"check_same_thread": False}, **pool)
    keep = engine.raw_connection() if shared else None  # the caller's anchor, as such a database needs
    yield engine
    if keep is not None:
        keep.close()
    engine.dispose()


def test_a_refused_write_keeps_an_in_memory_database_and_what_it_holds(memory_engine: Engine) -> None:
    full = {"on": False}
    upgrade(memory_engine)
    _cap_size(memory_engine, full)
    with EpisodeLog(engine=memory_engine) as log:
        kept = episode()
        log.log_episode(kept)
        full["on"] = True
        with pytest.raises(DatabaseNotWritableError, match="database or disk is full"):
            for _ in range(500):
                log.log_episode(episode())
        full["on"] = False
        # replacing the connection would have closed the database with it: its schema and rows gone
        assert log.get_episode(kept.id) is not None
        log.log_episode(episode())
        with memory_engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM episodes")).scalar_one() >= 2


@pytest.fixture
def scratch(tmp_path: Any) -> Iterator[Engine]:
    engine = make_engine(f"sqlite:///{tmp_path / 'scratch.db'}")
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE notes (id INTEGER PRIMARY KEY AUTOINCREMENT, body TEXT)")
    yield engine
    engine.dispose()


def test_a_refusal_with_the_connection_lost_during_commit_is_not_retried(
    scratch: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    dialect = scratch.dialect
    real_commit = dialect.do_commit

    def commit_then_lose(dbapi_connection: Any) -> None:
        real_commit(dbapi_connection)  # it landed; the answer did not come back
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(dialect, "do_commit", commit_then_lose)
    monkeypatch.setattr(dialect, "is_disconnect", lambda *_args, **_kw: True)

    def work(conn: Connection) -> None:
        conn.execute(text("INSERT INTO notes (body) VALUES ('once')"))

    with pytest.raises(DatabaseUnavailableError) as raised:
        Transactions(scratch).write_connection(work, what="the note")
    assert not isinstance(raised.value, DatabaseNotWritableError)
    assert "may or may not have committed" in str(raised.value)
    monkeypatch.undo()
    with scratch.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM notes")).scalar_one() == 1  # not written twice
