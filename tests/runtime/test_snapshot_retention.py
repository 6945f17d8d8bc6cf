"""Snapshot retention (``EpisodeLog.prune_snapshots``, ``memabra policies prune``) on both backends."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from runtime.learning_log import log_final
from typer.testing import CliRunner

from factories import episode
from memabra._cli._app import app
from memabra._errors import InvalidRecordError, UnknownSnapshotError
from memabra._learner import DEFAULT_POLICY
from memabra._records import OPEResult, PolicySnapshot, utcnow
from memabra.storage import EpisodeLog, LearnerStore

runner = CliRunner(env={"COLUMNS": "200"})


def _chain(log: EpisodeLog, policy: str, n: int, *, active: int) -> list[str]:
    """``n`` snapshots of ``policy``, each the parent of the next, oldest first; ``active`` promoted."""
    t0 = utcnow() - timedelta(hours=1)
    versions = [f"{policy}-{i}" for i in range(n)]
    for i, v in enumerate(versions):
        parent = versions[i - 1] if i else None
        log.save_snapshot(
            PolicySnapshot(policy, v, bytes([i]) * 8, parent=parent, created_at=t0 + timedelta(seconds=i))
        )
    log.promote(versions[active])
    return versions


def test_prune_keeps_newest_active_ancestors_and_ope_targets(log: EpisodeLog) -> None:
    vw = _chain(log, "vw", 10, active=5)  # an operator rolled back to vw-5
    other = _chain(log, "other", 3, active=2)
    log.record_ope_results([OPEResult("vw", "ips", 0.5, 0.4, 0.6, 100, snapshot_version="vw-1")])

    dry = log.prune_snapshots(2, policy="vw", dry_run=True)
    assert dry.dry_run and dry.pruned == ("vw-0", "vw-2", "vw-6", "vw-7")
    assert len(log.list_snapshots("vw")) == 10  # a dry run deletes nothing

    result = log.prune_snapshots(2, policy="vw")
    # newest 2 (8, 9), active 5 with 2 generations of ancestors (4, 3), the OPE target (1)
    assert set(result.kept) == {"vw-1", "vw-3", "vw-4", "vw-5", "vw-8", "vw-9"}
    assert result.pruned == ("vw-0", "vw-2", "vw-6", "vw-7")
    assert {s.version for s in log.list_snapshots("vw")} == set(result.kept)
    assert [s.version for s in log.list_snapshots("other")] == other  # --policy limits the pass
    assert log.get_snapshot("vw-5").status == "active"
    assert log.get_snapshot("vw-8").parent is None  # its parent vw-7 is gone: no rollback past it
    assert log.get_snapshot("vw-4").parent == "vw-3"
    assert log.prune_snapshots(2, policy="vw").pruned == ()  # idempotent
    with pytest.raises(UnknownSnapshotError, match="no policy snapshot"):
        log.get_snapshot(vw[0])
    with pytest.raises(InvalidRecordError):
        log.prune_snapshots(0)


def test_a_pruned_version_that_served_decisions_says_its_model_is_gone(log: EpisodeLog) -> None:
    # the factory's decisions carry policy_version "test-1"
    log.save_snapshot(PolicySnapshot("test", "test-1", b"m", created_at=utcnow() - timedelta(minutes=5)))
    log.save_snapshot(PolicySnapshot("test", "test-2", b"n", status="active"))
    log.log_episode(episode())
    assert log.prune_snapshots(1).pruned == ("test-1",)
    # the log cannot tell a pruned snapshot from a model never saved: it says both, and what stays
    with pytest.raises(UnknownSnapshotError, match="its decisions stay in the log.*removed by memabra policies prune"):
        log.get_snapshot("test-1")


def test_cli_prune_never_touches_the_learner_checkpoint(migrated_url: str, tmp_path: Path) -> None:
    with EpisodeLog(migrated_url) as log:
        log_final(log, 30)
    assert runner.invoke(app, ["learner", "--once", "--db", migrated_url, "--commit-every", "5"]).exit_code == 0
    with EpisodeLog(migrated_url) as log:
        before = [s.version for s in log.list_snapshots()]
        checkpoint = LearnerStore(log.engine).checkpoint(DEFAULT_POLICY)
    assert checkpoint is not None and len(before) >= 6

    out = tmp_path / "prune.json"
    dry = runner.invoke(
        app, ["policies", "prune", "--db", migrated_url, "--keep", "1", "--dry-run", "--json", str(out)]
    )
    assert dry.exit_code == 0, dry.output
    assert "would delete" in dry.output
    report = json.loads(out.read_text())
    assert report["dry_run"] and report["pruned"] and checkpoint.snapshot_version in report["kept"]

    done = runner.invoke(app, ["policies", "prune", "--db", migrated_url, "--keep", "1", "--json", str(out)])
    assert done.exit_code == 0, done.output
    assert json.loads(out.read_text())["pruned"] == report["pruned"]
    with EpisodeLog(migrated_url) as log:
        left = {s.version for s in log.list_snapshots()}
        log_final(log, 5, start=30)
    assert checkpoint.snapshot_version in left and len(left) < len(before)
    # the learner resumes from its checkpoint and its model still equals a replay
    assert "learned 5 rewards" in runner.invoke(app, ["learner", "--once", "--db", migrated_url]).output
    replay, export = tmp_path / "replay.bin", tmp_path / "active.bin"
    assert runner.invoke(app, ["learner", "--replay", "--db", migrated_url, "--out", str(replay)]).exit_code == 0
    assert runner.invoke(app, ["policies", "export", "--db", migrated_url, "--out", str(export)]).exit_code == 0
    assert replay.read_bytes() == export.read_bytes()
    # a pruned version by name: a clear error, no traceback
    gone = runner.invoke(
        app, ["policies", "export", "--db", migrated_url, "--version", report["pruned"][0], "--out", str(export)]
    )
    assert gone.exit_code != 0 and "Traceback" not in gone.output


def test_cli_prune_checks_its_arguments_first(migrated_url: str, tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "out.json"
    r = runner.invoke(app, ["policies", "prune", "--db", migrated_url, "--keep", "1", "--json", str(missing)])
    assert r.exit_code != 0 and "does not exist" in r.output
    assert runner.invoke(app, ["policies", "prune", "--db", migrated_url, "--keep", "0"]).exit_code != 0
