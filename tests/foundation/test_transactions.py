"""Write transactions under contention: bounded retries, a named error when they run out, and
snapshot promote / rollback."""

from __future__ import annotations

import sqlite3
import threading

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from factories import episode
from memabra import PolicySnapshot, SnapshotError, StorageContentionError, UnknownEpisodeError, UnknownSnapshotError
from memabra.storage import EpisodeLog, Transactions, make_engine
from memabra.storage import _tx as tx_module


def test_a_held_sqlite_lock_ends_in_a_named_error_then_clears(
    migrated_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not migrated_url.startswith("sqlite"):
        pytest.skip("SQLite's file lock")
    monkeypatch.setattr(tx_module, "MAX_ATTEMPTS", 2)
    holder = sqlite3.connect(migrated_url.removeprefix("sqlite:///"), isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process holding the write lock
    with EpisodeLog(engine=make_engine(migrated_url, busy_timeout_s=0.05)) as log:
        with pytest.raises(StorageContentionError, match=r"log_episodes kept conflicting .*\(database is locked\)"):
            log.log_episode(episode())
        assert log.count_episodes() == 0  # readers are not blocked by the writer (WAL)
        holder.execute("ROLLBACK")
        log.log_episode(episode())
        assert log.count_episodes() == 1
    holder.close()


def test_a_postgres_deadlock_is_retried_not_raised(migrated_url: str) -> None:
    if not migrated_url.startswith("postgresql"):
        pytest.skip("PostgreSQL's deadlock detector")
    engine = make_engine(migrated_url)
    tx = Transactions(engine)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE dl (id int primary key, n int)"))
        conn.execute(text("INSERT INTO dl VALUES (1, 0), (2, 0)"))
    barrier = threading.Barrier(2, timeout=30)
    attempts: dict[str, int] = {"a": 0, "b": 0}
    errors: list[BaseException] = []

    def writer(name: str, first: int, second: int) -> None:
        def work(s: Session) -> None:
            attempts[name] += 1
            s.execute(text("UPDATE dl SET n = n + 1 WHERE id = :i"), {"i": first})
            if attempts[name] == 1:
                barrier.wait()  # both hold their first row: the second lock closes the cycle
            s.execute(text("UPDATE dl SET n = n + 1 WHERE id = :i"), {"i": second})

        try:
            tx.write(work, what=f"writer {name}")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=("a", 1, 2)), threading.Thread(target=writer, args=("b", 2, 1))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert sorted(attempts.values()) == [1, 2]  # the deadlock victim ran again
    with engine.connect() as conn:
        assert conn.execute(text("SELECT sum(n) FROM dl")).scalar() == 4
    engine.dispose()


def test_promote_and_rollback(log: EpisodeLog) -> None:
    log.save_snapshot(PolicySnapshot("p", "v1", b"one", status="active"))
    log.save_snapshot(PolicySnapshot("p", "v2", b"two", parent="v1"))
    log.promote("v2")
    assert {s.version: s.status for s in log.list_snapshots("p")} == {"v1": "retired", "v2": "active"}
    back = log.rollback("p")
    assert back.version == "v1" and back.status == "active"
    assert {s.version: s.status for s in log.list_snapshots("p")} == {"v1": "active", "v2": "retired"}
    with pytest.raises(SnapshotError, match="no parent"):
        log.rollback("p")
    with pytest.raises(SnapshotError, match="no active snapshot"):
        log.rollback("other")
    with pytest.raises(UnknownSnapshotError, match="no policy snapshot with version 'v9'"):
        log.promote("v9")
    assert issubclass(UnknownSnapshotError, UnknownEpisodeError)  # old callers still catch it


def test_a_postgres_connection_killed_while_idle_is_replaced_not_raised(
    migrated_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not migrated_url.startswith("postgresql"):
        pytest.skip("PostgreSQL's pooled connections")
    from memabra.storage import _engine as engine_module

    engine = make_engine(migrated_url)
    try:
        with engine.connect() as conn:
            pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
        # recently used: no ping, no round trip
        with engine.connect() as conn:
            assert conn.execute(text("SELECT pg_backend_pid()")).scalar_one() == pid
        killer = make_engine(migrated_url)
        with killer.connect() as conn:
            conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid})
        killer.dispose()
        monkeypatch.setattr(engine_module, "PG_PING_IDLE_S", 0.0)  # the pooled connection counts as idle
        with engine.connect() as conn:
            assert conn.execute(text("SELECT pg_backend_pid()")).scalar_one() != pid
    finally:
        engine.dispose()
