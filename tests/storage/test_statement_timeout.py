"""PostgreSQL's statement_timeout (57014) and lock_timeout (55P03) reach the caller as
DatabaseTimeoutError: one line naming the database, the setting and what to do, never the statement
or its parameters; not retried (a retry waits the operator's bound again); and a cancel that meets
the COMMIT says the write may or may not have committed instead of "nothing stored"."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from memabra import StorageContentionError
from memabra.storage import DatabaseTimeoutError, make_engine
from memabra.storage._tx import Transactions

pytestmark = pytest.mark.skipif(
    not os.environ.get("MEMABRA_TEST_DATABASE_URL"), reason="statement and lock timeouts are PostgreSQL's"
)

_SECRET = "the user's private words"


@pytest.fixture
def pg(pg_schema_url: str) -> Iterator[Engine]:
    engine = make_engine(pg_schema_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE notes (id serial PRIMARY KEY, body text)")
    yield engine
    engine.dispose()


def _count(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM notes")).scalar_one())


def _one_line_without_the_statement(error: DatabaseTimeoutError, engine: Engine) -> str:
    message = str(error)
    assert message.startswith(f"the database {engine.url.render_as_string(hide_password=True)} cancelled ")
    assert "\n" not in message and "INSERT" not in message and _SECRET not in message
    assert isinstance(error, StorageContentionError) and isinstance(error, OperationalError)
    return message


def test_a_statement_past_statement_timeout_is_named_and_not_retried(pg: Engine) -> None:
    tries: list[int] = []

    def work(s: Session) -> None:
        tries.append(1)
        s.execute(text("SET LOCAL statement_timeout = 100"))
        s.execute(text("INSERT INTO notes (body) SELECT :body FROM pg_sleep(2)"), {"body": _SECRET})

    with pytest.raises(DatabaseTimeoutError) as raised:
        Transactions(pg).write(work, what="the note")
    message = _one_line_without_the_statement(raised.value, pg)
    assert "cancelled the note: canceling statement due to statement timeout" in message
    assert "statement_timeout" in message and "rolled back, nothing of it stored" in message
    assert raised.value.setting == "statement_timeout" and not raised.value.outcome_unknown
    assert tries == [1] and _count(pg) == 0


def test_a_lock_waited_for_past_lock_timeout_is_named_by_any_caller(pg: Engine) -> None:
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with pg.begin() as conn:
            conn.exec_driver_sql("LOCK TABLE notes IN ACCESS EXCLUSIVE MODE")
            holding.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert holding.wait(10)
        tries: list[int] = []

        def work(s: Session) -> None:
            tries.append(1)
            s.execute(text("SET LOCAL lock_timeout = 100"))
            s.execute(text("INSERT INTO notes (body) VALUES (:body)"), {"body": _SECRET})

        with pytest.raises(DatabaseTimeoutError) as raised:
            Transactions(pg).write(work, what="the note")
        message = _one_line_without_the_statement(raised.value, pg)
        assert "lock_timeout" in message and "pg_locks" in message
        assert raised.value.setting == "lock_timeout" and tries == [1]

        # not through Transactions: the engine's own naming
        with pytest.raises(DatabaseTimeoutError, match="cancelled a statement: .*lock_timeout"), pg.begin() as conn:
            conn.execute(text("SET LOCAL lock_timeout = 100"))
            conn.execute(text("INSERT INTO notes (body) VALUES (:body)"), {"body": _SECRET})
    finally:
        release.set()
        holder.join()
    assert _count(pg) == 0


@pytest.fixture
def slow_commit(pg: Engine) -> Engine:
    """COMMIT runs a deferred constraint trigger that takes seconds: a cancel sent meanwhile (an
    operator's pg_cancel_backend; PostgreSQL stops the statement_timeout timer before a COMMIT's
    work) reaches the COMMIT itself."""
    with pg.begin() as conn:
        conn.exec_driver_sql(
            "CREATE FUNCTION slow_check() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN PERFORM pg_sleep(5); RETURN NULL; END $$"
        )
        conn.exec_driver_sql(
            "CREATE CONSTRAINT TRIGGER slow AFTER INSERT ON notes DEFERRABLE INITIALLY DEFERRED "
            "FOR EACH ROW EXECUTE FUNCTION slow_check()"
        )
    return pg


def _cancel_soon(engine: Engine, pid: int) -> threading.Thread:
    def cancel() -> None:
        with engine.connect() as conn:
            for _ in range(100):  # until the backend is inside the trigger's sleep
                waiting = conn.execute(
                    text("SELECT wait_event FROM pg_stat_activity WHERE pid = :pid"), {"pid": pid}
                ).scalar()
                if waiting == "PgSleep":
                    break
                time.sleep(0.05)
            conn.execute(text("SELECT pg_cancel_backend(:pid)"), {"pid": pid})

    thread = threading.Thread(target=cancel)
    thread.start()
    return thread


def test_a_cancel_during_commit_says_the_write_may_have_committed_and_is_not_retried(slow_commit: Engine) -> None:
    tries: list[int] = []
    cancels: list[threading.Thread] = []

    def work(s: Session) -> None:
        tries.append(1)
        s.execute(text("INSERT INTO notes (body) VALUES (:body)"), {"body": _SECRET})
        cancels.append(_cancel_soon(slow_commit, int(s.execute(text("SELECT pg_backend_pid()")).scalar_one())))

    with pytest.raises(DatabaseTimeoutError) as raised:
        Transactions(slow_commit).write(work, what="the note")
    for thread in cancels:
        thread.join()
    message = _one_line_without_the_statement(raised.value, slow_commit)
    assert "cancelled the note: canceling statement due to user request" in message
    assert "may or may not have committed" in message and "nothing of it stored" not in message
    assert raised.value.outcome_unknown and raised.value.setting is None and tries == [1]

    # not through Transactions: the engine's own naming
    unknown = pytest.raises(DatabaseTimeoutError, match="may or may not have committed")
    with unknown as plain, slow_commit.begin() as conn:
        conn.execute(text("INSERT INTO notes (body) VALUES (:body)"), {"body": _SECRET})
        pid = int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())
        cancels.append(_cancel_soon(slow_commit, pid))
    cancels[-1].join()
    assert plain.value.outcome_unknown
