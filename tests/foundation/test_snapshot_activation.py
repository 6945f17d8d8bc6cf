"""Which snapshot is active: a rollback returns to the snapshot a promote replaced (not always its
parent), and the database itself holds at most one active snapshot per policy (migration 0011)."""

from __future__ import annotations

import logging

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from typer.testing import CliRunner

from memabra import PolicySnapshot
from memabra._cli import app
from memabra.storage import EpisodeLog, LearnerStore, SnapshotAudit, downgrade, make_engine, upgrade
from memabra.storage._learner import START, ReadPosition


def _statuses(log: EpisodeLog, policy: str = "p") -> dict[str, str]:
    return {s.version: s.status for s in log.list_snapshots(policy)}


def _learner_then_trained(log: EpisodeLog) -> None:
    """v1 active, the learner publishes v2 (parent v1), then a model trained while v1 served (so
    its parent is v1) is saved and promoted over v2."""
    log.save_snapshot(PolicySnapshot("p", "v1", b"one", status="active"))
    log.save_snapshot(PolicySnapshot("p", "v2", b"two", parent="v1"))
    log.promote("v2")
    log.save_snapshot(PolicySnapshot("p", "trained", b"t", parent="v1"))


def test_a_rollback_returns_to_what_the_promote_replaced(log: EpisodeLog) -> None:
    _learner_then_trained(log)
    log.promote("trained")
    assert log.rollback("p").version == "v2"
    assert _statuses(log) == {"v1": "retired", "v2": "active", "trained": "retired"}
    assert log.rollback("p").version == "v1"  # and v2 replaced v1
    assert _statuses(log) == {"v1": "active", "v2": "retired", "trained": "retired"}


def test_an_audited_rollback_returns_to_what_the_promote_replaced(log: EpisodeLog) -> None:
    _learner_then_trained(log)
    audit = SnapshotAudit(log)
    audit.promote("trained", by="ops")
    assert audit.rollback("trained", by="ops") == "v2"
    assert _statuses(log) == {"v1": "retired", "v2": "active", "trained": "retired"}


def test_a_snapshot_activated_before_the_record_existed_rolls_back_to_its_parent(log: EpisodeLog) -> None:
    _learner_then_trained(log)
    log.promote("trained")
    with log.engine.begin() as conn:  # a row promoted before migration 0011
        conn.execute(text("UPDATE policy_snapshots SET previous_active = NULL"))
    assert log.rollback("p").version == "v1"


def test_a_learner_publish_records_what_it_replaced(log: EpisodeLog) -> None:
    log.save_snapshot(PolicySnapshot("p", "ops", b"o", status="active"))
    store = LearnerStore(log.engine)
    store.commit(PolicySnapshot("p", "l1", b"l"), previous=START, position=ReadPosition(0, ""), learned=0)
    assert _statuses(log) == {"ops": "retired", "l1": "active"}
    assert log.rollback("p").version == "ops"


def test_cli_rollback_after_a_promote_returns_to_what_served_before(migrated_url: str) -> None:
    with EpisodeLog(migrated_url) as log:
        _learner_then_trained(log)
    runner = CliRunner()
    promoted = runner.invoke(app, ["policies", "promote", "trained", "--db", migrated_url])
    assert promoted.exit_code == 0, promoted.output
    assert "rollback` now re-activates its parent" not in promoted.output
    back = runner.invoke(app, ["policies", "rollback", "--policy", "p", "--db", migrated_url])
    assert back.exit_code == 0, back.output
    assert "v2 is active again" in back.output


def test_every_way_of_activating_a_snapshot_keeps_one_active(log: EpisodeLog) -> None:
    log.save_snapshot(PolicySnapshot("p", "a", b"a", status="active"))
    log.save_snapshot(PolicySnapshot("p", "b", b"b", parent="a", status="active"))
    assert _statuses(log) == {"a": "retired", "b": "active"}
    log.set_snapshot_status("a", "active")
    log.promote("b")
    SnapshotAudit(log).promote("a", by="ops")
    SnapshotAudit(log).rollback("a", by="ops")
    log.rollback("p")
    LearnerStore(log.engine).commit(PolicySnapshot("p", "c", b"c"), previous=START, position=START, learned=0)
    statuses = _statuses(log)
    assert list(statuses.values()).count("active") == 1, statuses


def test_the_database_refuses_a_second_active_snapshot(log: EpisodeLog) -> None:
    log.save_snapshot(PolicySnapshot("p", "a", b"a", status="active"))
    log.save_snapshot(PolicySnapshot("q", "other", b"o", status="active"))  # another policy may
    log.save_snapshot(PolicySnapshot("p", "b", b"b"))
    with pytest.raises(IntegrityError), log.engine.begin() as conn:
        conn.execute(text("UPDATE policy_snapshots SET status = 'active' WHERE version = 'b'"))
    assert _statuses(log) == {"a": "active", "b": "candidate"}


def test_the_migration_repairs_a_policy_with_two_active_snapshots(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    engine = make_engine(db_url)
    try:
        upgrade(engine, "0010")
        with engine.begin() as conn:
            for version, created, status in (
                ("old", "2026-01-01", "active"),
                ("new", "2026-02-01", "active"),
                ("cand", "2026-03-01", "candidate"),
                ("solo", "2026-01-01", "active"),
            ):
                conn.execute(
                    text(
                        "INSERT INTO policy_snapshots (version, policy, model, learner_args, metrics, status, "
                        "created_at) VALUES (:v, :p, :m, '{}', '{}', :s, :c)"
                    ),
                    {"v": version, "p": "solo" if version == "solo" else "p", "m": b"x", "s": status, "c": created},
                )
        with caplog.at_level(logging.WARNING, logger="memabra"):
            upgrade(engine)
        with engine.connect() as conn:
            rows = dict(conn.execute(text("SELECT version, status FROM policy_snapshots")).all())
        # the newest active one is what serving read; the other is retired, and the log says so
        assert rows == {"old": "retired", "new": "active", "cand": "candidate", "solo": "active"}
        assert any("old" in r.getMessage() and "new" in r.getMessage() for r in caplog.records), caplog.text
        assert downgrade(engine, "0010") == "0010"
        assert upgrade(engine) != "0010"
    finally:
        engine.dispose()


def test_prune_keeps_what_a_rollback_returns_to(log: EpisodeLog) -> None:
    _learner_then_trained(log)
    for i in range(3):  # newer candidates, so the newest-N rule alone would not keep v2
        log.save_snapshot(PolicySnapshot("p", f"c{i}", b"c", parent="v1"))
    log.promote("trained")
    result = log.prune_snapshots(1, policy="p")
    assert {"trained", "v1", "v2"} <= set(result.kept)
    assert log.rollback("p").version == "v2"
