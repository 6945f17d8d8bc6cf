"""Two operators changing which snapshot is active from two terminals: each is told what its own
change did (not what an earlier read suggested), ``--if-active`` refuses a change made against a
state another operator changed meanwhile, and the audit trail keeps who and why."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from runtime.learning_log import log_final
from typer.testing import CliRunner

from memabra._cli._app import app
from memabra._errors import SnapshotError
from memabra._learner import DEFAULT_POLICY
from memabra.storage import EpisodeLog, LearnerStore, Promotion, SnapshotAudit
from memabra.storage._snapshot_audit import status_history

runner = CliRunner(env={"COLUMNS": "200"})


def _three_snapshots(url: str) -> list[str]:
    with EpisodeLog(url) as log:
        log_final(log, 18)
    assert runner.invoke(app, ["learner", "--once", "--db", url, "--commit-every", "6"]).exit_code == 0
    with EpisodeLog(url) as log:
        versions = [s.version for s in log.list_snapshots()]
        assert log.get_snapshot(versions[-1]).status == "active"
    return versions[-3:]


def test_promote_reports_what_it_retired_when_another_promote_landed_first(
    migrated_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    first, second, active = _three_snapshots(migrated_url)
    original = SnapshotAudit.promote

    def after_another_operator(self: SnapshotAudit, version: str, **kwargs: Any) -> Promotion:
        with EpisodeLog(migrated_url) as other:  # the other terminal, between this one's look and its write
            original(SnapshotAudit(other), second, by="cli:bob")
        return original(self, version, **kwargs)

    monkeypatch.setattr(SnapshotAudit, "promote", after_another_operator)
    out = tmp_path / "promote.json"
    result = runner.invoke(
        app, ["policies", "promote", first, "--db", migrated_url, "--reason", "canary", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert f"(retired {second})" in result.output and f"returns to {second}" in result.output
    assert f"retired {active}" not in result.output
    record = json.loads(out.read_text())
    assert record["active"] == first and record["retired"] == second and record["rollback_to"] == second
    assert record["policy"] == DEFAULT_POLICY and record["reason"] == "canary"


def test_if_active_refuses_a_change_against_a_state_another_operator_changed(migrated_url: str, tmp_path: Path) -> None:
    first, second, active = _three_snapshots(migrated_url)
    # alice reviewed `active`; bob rolls it back first
    assert runner.invoke(app, ["policies", "rollback", "--db", migrated_url]).exit_code == 0
    late = runner.invoke(app, ["policies", "rollback", "--db", migrated_url, "--if-active", active])
    assert late.exit_code == 1 and "is not active (retired)" in late.output
    assert "memabra policies list" in late.output
    stale = runner.invoke(app, ["policies", "promote", first, "--db", migrated_url, "--if-active", active])
    assert stale.exit_code == 1 and f"{second} is active now" in stale.output
    with EpisodeLog(migrated_url) as log:
        assert LearnerStore(log.engine).active_version(DEFAULT_POLICY) == second  # one step back, not two
        assert [s.version for s in log.list_snapshots() if s.status == "active"] == [second]
        assert not status_history(log.get_snapshot(first).metrics)

    out = tmp_path / "rollback.json"
    back = runner.invoke(
        app,
        [
            "policies",
            "rollback",
            "--db",
            migrated_url,
            "--if-active",
            second,
            "--reason",
            "p95 latency",
            "--json",
            str(out),
        ],
    )
    assert back.exit_code == 0, back.output
    assert json.loads(out.read_text()) == {
        "policy": DEFAULT_POLICY,
        "active": first,
        "retired": second,
        "by": json.loads(out.read_text())["by"],
        "reason": "p95 latency",
    }
    with EpisodeLog(migrated_url) as log:
        trail = status_history(log.get_snapshot(second).metrics)
        assert trail[-1].action == "rolled back" and trail[-1].reason == "p95 latency"
        assert trail[-1].by.startswith("cli")
        assert status_history(log.get_snapshot(first).metrics)[-1].reason == "p95 latency"


def test_if_active_of_another_policy_is_refused(migrated_url: str) -> None:
    *_, active = _three_snapshots(migrated_url)
    wrong = runner.invoke(app, ["policies", "rollback", "--db", migrated_url, "--policy", "vw", "--if-active", active])
    assert wrong.exit_code == 1 and "pass --policy linear" in wrong.output
    with EpisodeLog(migrated_url) as log:
        assert log.get_snapshot(active).status == "active"


def test_the_library_promote_returns_what_it_retired_and_checks_replacing(migrated_url: str) -> None:
    _, older, newest = _three_snapshots(migrated_url)
    with EpisodeLog(migrated_url) as log:
        audit = SnapshotAudit(log)
        with pytest.raises(SnapshotError, match=re.escape(f"{newest} is active now")):
            audit.promote(older, by="op", replacing="something-else")
        assert log.get_snapshot(older).status == "retired"
        assert audit.promote(older, by="op", replacing=newest, reason="why not").retired == newest
        assert status_history(log.get_snapshot(newest).metrics)[-1].reason == "why not"
