from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from memabra import SchemaError
from memabra.storage import EpisodeLog, check_schema, downgrade, head_revision, upgrade
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


def test_database_at_an_unknown_revision_is_refused(engine) -> None:  # type: ignore[no-untyped-def]
    upgrade(engine)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = 'ffff'"))
    with pytest.raises(SchemaError, match="newer than this memabra"):
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
