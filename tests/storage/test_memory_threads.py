"""An in-memory SQLite log (``sqlite://``, or a shared-cache ``mode=memory`` URI) lives in one
connection, which its engine lends to one thread at a time: an async server's worker threads or an
application's thread pool writing and reading it at once each get whole transactions. Lent to all
of them at once, their transactions mixed on the one connection ("cannot start a transaction within
a transaction", one thread's rollback undoing another's writes), and episodes were lost."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable

import pytest
from sqlalchemy import Engine, text

from factories import episode
from memabra.storage import make_engine, open_log
from memabra.storage._sqlite import OneConnectionPool

_THREADS = 8
_EACH = 15


def _hammer(work: Callable[[int], None]) -> list[BaseException]:
    errors: list[BaseException] = []
    start = threading.Barrier(_THREADS)

    def run(i: int) -> None:
        start.wait()
        try:
            work(i)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(_THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return errors


@pytest.mark.parametrize(
    "url",
    ["sqlite://", f"sqlite:///file:memabra_threads_{uuid.uuid4().hex[:12]}?mode=memory&cache=shared&uri=true"],
    ids=["memory", "shared-cache"],
)
def test_threads_writing_and_reading_an_in_memory_log_lose_nothing(url: str) -> None:
    with open_log(url) as log:

        def work(_i: int) -> None:
            for _ in range(_EACH):
                kept = episode()
                log.log_episode(kept)
                assert log.get_episode(kept.id).id == kept.id
                log.count_episodes()

        errors = _hammer(work)
        assert errors == []
        assert log.count_episodes() == _THREADS * _EACH


def test_a_thread_nesting_a_read_in_its_own_transaction_does_not_wait_on_itself() -> None:
    engine = make_engine("sqlite://", busy_timeout_s=0.5)
    try:
        with engine.connect() as outer:
            outer.execute(text("CREATE TABLE t (x INTEGER)"))
            outer.commit()
            with engine.connect() as inner:  # the same connection, this thread's already
                assert inner.execute(text("SELECT count(*) FROM t")).scalar() == 0
    finally:
        engine.dispose()


def test_another_thread_waits_its_turn_and_is_told_the_database_is_locked_past_the_busy_timeout() -> None:
    engine = make_engine("sqlite://", busy_timeout_s=0.2)
    assert isinstance(engine.pool, OneConnectionPool)
    seen: list[BaseException] = []
    try:
        with engine.connect():

            def other() -> None:
                try:
                    with engine.connect():
                        pass
                except BaseException as exc:  # noqa: BLE001 - reported by the test
                    seen.append(exc)

            thread = threading.Thread(target=other)
            thread.start()
            thread.join(timeout=10)
        assert len(seen) == 1 and "database is locked" in str(seen[0])
        with engine.connect() as again:  # returned: the next thread's turn
            assert again.execute(text("SELECT 1")).scalar() == 1
        engine.dispose()  # a disposed engine opens a new database, lent the same way
        assert isinstance(engine.pool, OneConnectionPool) and engine.pool.wait_s == 0.2
    finally:
        engine.dispose()


def _from_another_thread(engine: Engine) -> object:
    """What another thread gets: the count of ``t``, or the error that refused it the connection."""
    seen: list[object] = []

    def other() -> None:
        try:
            with engine.connect() as conn:
                seen.append(conn.execute(text("SELECT count(*) FROM t")).scalar())
        except Exception as exc:  # noqa: BLE001 - reported by the test
            seen.append(exc)

    thread = threading.Thread(target=other)
    thread.start()
    thread.join(timeout=10)
    return seen[0]


def test_a_nested_checkout_returned_first_leaves_the_connection_lent_until_the_outer_one_returns() -> None:
    # SQLAlchemy checked the one record in at the nested checkout's return: the loan ended while
    # the outer connection was still open, another thread's statements ran in its transaction, and
    # the other thread's rollback on return undid the outer connection's insert
    engine = make_engine("sqlite://", busy_timeout_s=0.2)
    try:
        with engine.connect() as setup:
            setup.execute(text("CREATE TABLE t (x INTEGER)"))
            setup.commit()
        with engine.connect() as outer:
            outer.execute(text("SELECT 1"))
            outer.commit()
            with engine.connect() as inner:
                inner.execute(text("SELECT count(*) FROM t"))
                inner.commit()
            outer.execute(text("INSERT INTO t VALUES (1)"))
            refused = _from_another_thread(engine)
            assert isinstance(refused, Exception) and "database is locked" in str(refused)
            outer.commit()
        assert _from_another_thread(engine) == 1  # returned: the next thread's turn, the insert kept
    finally:
        engine.dispose()
