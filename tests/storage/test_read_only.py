"""A database that takes no writes: a SQLite file opened while it was read-only, a PostgreSQL
server that is a hot standby. Each write is refused with an error naming the database, the cause
and what to do, and once the database takes writes again the same log writes, with no restart:
the connections that met the refusal are replaced, not handed out again from the pool.

A connection keeps what it met when it opened, which is what these simulate: SQLite opens a file
it may not write read-only, and stays so (``PRAGMA query_only`` gives the same refusal, "attempt to
write a readonly database"); a pooled connection to a standby stays on the standby when the
address moves to the primary (``default_transaction_read_only`` gives the standby's refusal, "cannot
execute INSERT in a read-only transaction", SQLSTATE 25006).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event, text

from factories import episode
from memabra import Feedback, PolicySnapshot
from memabra.storage import DatabaseNotWritableError, DatabaseUnavailableError, EpisodeLog, LearnerStore, make_engine
from memabra.storage._learner import START, ReadPosition


class Server:
    """Whether connections opened from now on may write: each keeps what it met when it opened."""

    def __init__(self, backend: str) -> None:
        self.read_only = False
        self.backend = backend

    def on_connect(self, dbapi_connection: Any, _record: Any) -> None:
        if not self.read_only:
            return
        if self.backend == "sqlite":
            dbapi_connection.execute("PRAGMA query_only=ON")
            return
        with dbapi_connection.cursor() as cursor:
            cursor.execute("SET default_transaction_read_only = on")
        dbapi_connection.commit()


@pytest.fixture
def read_only(migrated_url: str) -> Iterator[tuple[EpisodeLog, Server]]:
    engine = make_engine(migrated_url)
    server = Server(engine.dialect.name)
    event.listen(engine, "connect", server.on_connect)
    with EpisodeLog(engine=engine) as log:
        log.log_episode(episode())  # a pooled connection, opened while the database took writes
        yield log, server
    engine.dispose()


_CAUSE = {
    "sqlite": r"attempt to write a readonly database; this process cannot write the file",
    "postgresql": r"cannot execute INSERT in a read-only transaction; the server takes no writes: it is a hot standby",
}


def _count(log: EpisodeLog, table: str) -> int:
    with log.engine.connect() as conn:
        return int(conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())


def test_a_read_only_database_is_named_and_the_same_log_writes_once_it_takes_writes_again(
    read_only: tuple[EpisodeLog, Server],
) -> None:
    log, server = read_only
    log.engine.dispose()  # the next connections open read-only (a standby, a read-only file)
    server.read_only = True
    for _ in range(2):  # a new connection meets it too: every try says so
        with pytest.raises(DatabaseNotWritableError, match=_CAUSE[server.backend]) as refused:
            log.log_episode(episode())
        assert "nothing of this write was stored" in str(refused.value)
        assert str(refused.value).startswith(f"the database {log.url} refused log_episodes: ")
        assert isinstance(refused.value, DatabaseUnavailableError)  # what waits out an outage waits this out
    assert _count(log, "episodes") == 1 and _count(log, "decisions") == 1
    server.read_only = False  # the file is writable again, the address points at the primary
    log.log_episode(episode())  # the same log: its read-only connections were not handed out again
    assert _count(log, "episodes") == 2 and _count(log, "decisions") == 2


def test_feedback_refused_by_a_standby_is_stored_once_when_sent_again(read_only: tuple[EpisodeLog, Server]) -> None:
    log, server = read_only
    ep = episode()
    log.log_episode(ep)
    log.engine.dispose()
    server.read_only = True
    feedback = Feedback(ep.id, "explicit", "user", {"correct": True})
    with pytest.raises(DatabaseNotWritableError, match=r"refused add_feedback: "):
        log.add_feedback(feedback)
    server.read_only = False
    assert log.add_feedback(feedback).status == "stored"
    assert log.add_feedback(feedback).status == "duplicate"
    assert [f.id for f in log.feedback_for(ep.id)] == [feedback.id]


def test_a_learner_commit_refused_by_a_standby_commits_whole_once_the_primary_is_back(
    read_only: tuple[EpisodeLog, Server],
) -> None:
    log, server = read_only
    store = LearnerStore(log.engine)
    log.engine.dispose()
    server.read_only = True
    snapshot = PolicySnapshot("p", "p-1", b"m")
    with pytest.raises(DatabaseNotWritableError, match=r"refused the learner commit of policy 'p'"):
        store.commit(snapshot, previous=START, position=ReadPosition(3, "e"), learned=3)
    assert store.checkpoint("p") is None and log.list_snapshots("p") == []
    server.read_only = False
    assert store.commit(snapshot, previous=START, position=ReadPosition(3, "e"), learned=3).status == "active"
