from __future__ import annotations

import multiprocessing
import threading
import time
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from memabra import ConfigError, SchemaError
from memabra.storage import EpisodeLog, check_schema, current_revision, downgrade, head_revision, open_log, upgrade
from memabra.storage._models import Base

TABLES = {
    "episodes",
    "decisions",
    "decision_slots",
    "decision_candidates",
    "steps",
    "feedback",
    "rewards",
    "policy_snapshots",
    "registry",
    "ope_runs",
    "memory_scores",
    "memory_history",
    "embeddings",
    "memory_pools",
}


def test_upgrade_then_downgrade_round_trips(engine) -> None:  # type: ignore[no-untyped-def]
    assert upgrade(engine) == head_revision()
    assert set(inspect(engine).get_table_names()) >= TABLES
    check_schema(engine)
    assert downgrade(engine, "base") == "base"
    assert not (TABLES & set(inspect(engine).get_table_names()))
    assert upgrade(engine) == head_revision()


def test_models_match_migrations(engine) -> None:  # type: ignore[no-untyped-def]
    upgrade(engine)
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True, "compare_server_default": True})
        assert compare_metadata(context, Base.metadata) == []


def test_unmigrated_database_is_refused_with_the_command_to_run(db_url: str) -> None:
    with pytest.raises(SchemaError, match="memabra db upgrade"):
        EpisodeLog(db_url)


def test_database_at_an_unknown_breaking_revision_is_refused(engine) -> None:  # type: ignore[no-untyped-def]
    """A newer database that still accepts this code is opened (test_schema_compatibility.py)."""
    upgrade(engine)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = 'ffff'"))
        conn.execute(text("UPDATE schema_compatibility SET oldest_compatible_revision = 'ffff'"))
    with pytest.raises(SchemaError, match="newer than this memabra .*its revision ffff changed the schema"):
        check_schema(engine)


def test_outdated_database_is_refused_with_the_command_to_run(engine) -> None:  # type: ignore[no-untyped-def]
    upgrade(engine, "0001")
    with pytest.raises(
        SchemaError, match=f"at schema revision 0001, but this memabra needs {head_revision()}; run `memabra db upgrade"
    ):
        check_schema(engine)
    upgrade(engine)
    check_schema(engine)


def test_each_migration_steps_down_and_up(engine) -> None:  # type: ignore[no-untyped-def]
    upgrade(engine)
    assert downgrade(engine, "0001") == "0001"
    assert "ope_runs" not in inspect(engine).get_table_names()
    assert upgrade(engine) == head_revision()


def test_sqlite_runs_with_wal_and_foreign_keys(tmp_path) -> None:  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp_path / 'x.db'}"
    upgrade(url)
    with EpisodeLog(url) as log, log.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1


def test_postgres_json_columns_are_jsonb(engine) -> None:  # type: ignore[no-untyped-def]
    if engine.dialect.name != "postgresql":
        pytest.skip("JSONB is PostgreSQL's type; SQLite stores JSON as text")
    upgrade(engine)
    cols = {c["name"]: c["type"] for c in inspect(engine).get_columns("decision_candidates")}
    assert type(cols["features"]).__name__ == "JSONB"
    ts = {c["name"]: c["type"] for c in inspect(engine).get_columns("episodes")}
    assert ts["created_at"].timezone is True


_fork = multiprocessing.get_context("fork")


def _first_open(url: str, how: str, start: Barrier, results: Queue[str]) -> None:
    start.wait()
    try:
        if how == "open_log":
            open_log(url).close()
        else:
            upgrade(url)
        results.put("ok")
    except Exception as exc:  # noqa: BLE001 - reported to the test, which names it
        results.put(f"{type(exc).__module__}.{type(exc).__name__}: {exc}")


def _at_once(url: str, how: str, processes: int) -> list[str]:
    start = _fork.Barrier(processes)
    results: Queue[str] = _fork.Queue()
    workers = [_fork.Process(target=_first_open, args=(url, how, start, results)) for _ in range(processes)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
    return [results.get(timeout=5) for _ in workers]


def test_processes_opening_one_new_sqlite_file_at_once_all_succeed(tmp_path: Path) -> None:
    """The embedded default: several agents started together on a file nobody created yet. The
    schema upgrade takes the file's write lock, so the others wait and find the schema made."""
    for round_ in range(4):
        url = f"sqlite:///{tmp_path / f'new-{round_}.db'}"
        assert _at_once(url, "open_log", 4) == ["ok"] * 4
        with EpisodeLog(url) as log:
            check_schema(log.engine)


def test_concurrent_upgrades_of_one_database_serialise(db_url: str) -> None:
    """``memabra db upgrade`` run by several deploy jobs at once (an advisory lock on PostgreSQL)."""
    assert _at_once(db_url, "upgrade", 3) == ["ok"] * 3
    with EpisodeLog(db_url) as log:
        assert current_revision(log.engine) == head_revision()


def test_opening_a_sqlite_file_in_a_missing_directory_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "dir" / "x.db"
    with pytest.raises(ConfigError, match=f"cannot open the SQLite database {missing}: the directory"):
        open_log(f"sqlite:///{missing}")
    with pytest.raises(ConfigError, match="it is a directory"):
        open_log(f"sqlite:///{tmp_path}")
    assert not missing.parent.exists()


def test_the_log_on_a_sqlite_file_that_does_not_exist_names_it_and_creates_nothing(tmp_path: Path) -> None:
    """``EpisodeLog(url)`` only opens a log (``open_log`` creates one): a mistyped path is named
    with the command that makes the database, and leaves no empty file behind for the next try to
    find; a missing directory is a ``ConfigError`` naming it, as ``open_log`` says, not sqlite3's
    ``unable to open database file``."""
    new = tmp_path / "typo.db"
    with pytest.raises(SchemaError, match=f"no database at {new}; create it with `memabra db upgrade"):
        EpisodeLog(f"sqlite:///{new}")
    assert not new.exists()
    missing = tmp_path / "no" / "dir" / "x.db"
    with pytest.raises(ConfigError, match=f"cannot open the SQLite database {missing}: the directory"):
        EpisodeLog(f"sqlite:///{missing}")
    with pytest.raises(ConfigError, match="it is a directory"):
        EpisodeLog(f"sqlite:///{tmp_path}")
    with open_log(f"sqlite:///{new}") as log:  # the way to create it
        check_schema(log.engine)
    with EpisodeLog(f"sqlite:///{new}") as log:
        check_schema(log.engine)


def _feedback_index_valid(engine) -> bool | None:  # type: ignore[no-untyped-def]
    with engine.connect() as conn:
        return conn.execute(  # type: ignore[no-any-return]
            text("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass('ix_feedback_decision_id')")
        ).scalar()


@pytest.mark.postgres
def test_an_index_added_to_an_existing_table_is_built_while_its_writes_go_on(engine) -> None:  # type: ignore[no-untyped-def]
    """Migration 0008's index on feedback: built in the upgrade's transaction, a plain CREATE INDEX
    queued behind a long write transaction would hold every new feedback write behind it too."""
    if engine.dialect.name != "postgresql":
        pytest.skip("PostgreSQL only: SQLite builds indexes in its one writer's transaction")
    upgrade(engine, "0007")
    outcome: list[str | BaseException] = []
    with engine.connect() as long_writer:
        long_writer.execute(text("LOCK TABLE feedback IN ROW EXCLUSIVE MODE"))  # an insert still open
        upgrading = threading.Thread(target=lambda: outcome.append(_try(lambda: upgrade(engine))))
        upgrading.start()
        # autocommit: a transaction reads pg_stat_activity once and sees that snapshot until it ends
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as watcher:
            deadline = time.monotonic() + 30
            while not watcher.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'CREATE INDEX%'"
                    " AND wait_event_type = 'Lock'"
                )
            ).scalar():
                assert time.monotonic() < deadline, "the index build never started waiting"
                time.sleep(0.05)
        with engine.connect() as new_writer:  # arrives while the build waits: not held behind it
            new_writer.execute(text("SET LOCAL lock_timeout = '2s'"))
            new_writer.execute(text("LOCK TABLE feedback IN ROW EXCLUSIVE MODE"))
            new_writer.commit()
        long_writer.commit()
        upgrading.join(timeout=60)
    assert outcome == [head_revision()]
    assert _feedback_index_valid(engine) is True


@pytest.mark.postgres
def test_an_index_a_dead_build_left_invalid_is_built_again(engine) -> None:  # type: ignore[no-untyped-def]
    if engine.dialect.name != "postgresql":
        pytest.skip("PostgreSQL only: a concurrent build is PostgreSQL's")
    upgrade(engine, "0007")
    with engine.begin() as conn:  # what CREATE INDEX CONCURRENTLY leaves when it is killed part way
        conn.execute(text("CREATE INDEX ix_feedback_decision_id ON feedback (decision_id)"))
        conn.execute(
            text("UPDATE pg_index SET indisvalid = false WHERE indexrelid = to_regclass('ix_feedback_decision_id')")
        )
    assert _feedback_index_valid(engine) is False
    assert upgrade(engine) == head_revision()
    assert _feedback_index_valid(engine) is True
    check_schema(engine)


def _try(action):  # type: ignore[no-untyped-def]
    try:
        return action()
    except BaseException as exc:  # noqa: BLE001 - handed to the test's thread to assert on
        return exc


@pytest.mark.postgres
def test_two_upgrades_that_build_an_online_index_together_both_succeed(engine, db_url: str) -> None:  # type: ignore[no-untyped-def]
    """Two deploy jobs upgrading one database from before 0008: the second waited for the first's
    migration lock in a blocking statement, holding a snapshot the first's CREATE INDEX
    CONCURRENTLY then waited on, and one of them died with "deadlock detected"."""
    if engine.dialect.name != "postgresql":
        pytest.skip("PostgreSQL only: the concurrent index build is PostgreSQL's")
    upgrade(engine, "0007")
    outcome: list[str | BaseException] = []
    with engine.connect() as long_writer:
        long_writer.execute(text("LOCK TABLE feedback IN ROW EXCLUSIVE MODE"))  # holds the first build
        first = threading.Thread(target=lambda: outcome.append(_try(lambda: upgrade(db_url))))
        first.start()
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as watcher:
            deadline = time.monotonic() + 30
            while not watcher.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'CREATE INDEX%'"
                    " AND wait_event_type = 'Lock'"
                )
            ).scalar():
                assert time.monotonic() < deadline, "the index build never started waiting"
                time.sleep(0.05)
        second = threading.Thread(target=lambda: outcome.append(_try(lambda: upgrade(db_url))))
        second.start()
        time.sleep(1.0)  # the second job now waits for the migration lock
        long_writer.commit()
    first.join(timeout=60)
    second.join(timeout=60)
    assert outcome == [head_revision(), head_revision()]
    assert _feedback_index_valid(engine) is True
