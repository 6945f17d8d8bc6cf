"""``memabra policies promote V`` where V is already active is done, not failed (a retried script),
``--if-active`` still refuses a state it did not review, and ``policies list`` says for each
active snapshot where ``memabra policies rollback`` would go, by the rule the rollback itself uses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sqlalchemy import text
from typer.testing import CliRunner

from memabra import PolicySnapshot
from memabra._cli._app import app
from memabra.storage import EpisodeLog, SnapshotAudit
from memabra.storage._snapshot_audit import HISTORY_KEY

runner = CliRunner(env={"COLUMNS": "200"})


def _three(url: str) -> None:
    """v1 active, v2 (parent v1) promoted over it, v3 (parent v2) a candidate."""
    with EpisodeLog(url) as log:
        log.save_snapshot(PolicySnapshot("p", "v1", b"one", status="active"))
        log.save_snapshot(PolicySnapshot("p", "v2", b"two", parent="v1"))
        log.promote("v2")
        log.save_snapshot(PolicySnapshot("p", "v3", b"three", parent="v2"))


def _metrics(url: str) -> dict[str, Any]:
    with EpisodeLog(url) as log:
        return {s.version: (s.status, dict(s.metrics)) for s in log.list_snapshots("p")}


def _listed(url: str, tmp_path: Path) -> dict[str, Any]:
    out = tmp_path / "list.json"
    listed = runner.invoke(app, ["policies", "list", "--db", url, "--json", str(out)])
    assert listed.exit_code == 0, listed.output
    return {r["version"]: r["rollback_to"] for r in json.loads(out.read_text())}


def test_promoting_the_active_snapshot_again_changes_nothing_and_exits_0(migrated_url: str, tmp_path: Path) -> None:
    _three(migrated_url)
    before = _metrics(migrated_url)
    out = tmp_path / "promote.json"
    for extra in ([], ["--if-active", "v2"]):
        again = runner.invoke(
            app, ["policies", "promote", "v2", "--db", migrated_url, "--reason", "retry", "--json", str(out), *extra]
        )
        assert again.exit_code == 0, again.output
        text_out = " ".join(again.output.split())
        assert "v2 is already the active snapshot of policy p: nothing changed" in text_out
        assert "returns to v1" in text_out
        record = json.loads(out.read_text())
        assert record["changed"] is False and record["active"] == "v2" and record["retired"] is None
        assert record["rollback_to"] == "v1" and record["policy"] == "p"
        assert _metrics(migrated_url) == before  # no status change, no audit entry
    assert all(HISTORY_KEY not in metrics for _, metrics in before.values())

    # a retry of the promote that put v2 over v1 (its answer lost) is done too
    retried = runner.invoke(app, ["policies", "promote", "v2", "--db", migrated_url, "--if-active", "v1"])
    assert retried.exit_code == 0 and "nothing changed" in " ".join(retried.output.split())
    assert _metrics(migrated_url) == before
    # --if-active naming a snapshot that is neither active nor the one v2 replaced is still refused
    stale = runner.invoke(app, ["policies", "promote", "v2", "--db", migrated_url, "--if-active", "v3"])
    assert stale.exit_code == 1 and "v2 is active now" in " ".join(stale.output.split())
    assert _metrics(migrated_url) == before

    promoted = runner.invoke(app, ["policies", "promote", "v3", "--db", migrated_url, "--json", str(out)])
    assert promoted.exit_code == 0, promoted.output
    record = json.loads(out.read_text())
    assert record["changed"] is True and record["retired"] == "v2" and record["rollback_to"] == "v2"


def test_list_says_where_a_rollback_goes_as_the_rollback_does(migrated_url: str, tmp_path: Path) -> None:
    _three(migrated_url)
    assert _listed(migrated_url, tmp_path) == {"v1": None, "v2": "v1", "v3": None}
    table = " ".join(runner.invoke(app, ["policies", "list", "--db", migrated_url]).output.split())
    assert "rollback to" in table
    with EpisodeLog(migrated_url) as log:
        SnapshotAudit(log).promote("v3", by="op")
        # v3 replaced v2 (its parent too); once v2 is gone, a rollback of v3 has nowhere to go
        assert _listed(migrated_url, tmp_path)["v3"] == "v2"
        assert SnapshotAudit(log).rollback("v3", by="op") == "v2"
        assert _listed(migrated_url, tmp_path) == {"v1": None, "v2": "v1", "v3": None}


def test_list_and_rollback_agree_where_the_recorded_snapshot_is_of_another_policy(
    migrated_url: str, tmp_path: Path
) -> None:
    """A snapshot whose parent belongs to another policy, activated before revision 0011 (nothing
    recorded): the rollback refuses it, so the list must not offer it."""
    with EpisodeLog(migrated_url) as log:
        log.save_snapshot(PolicySnapshot("q", "q1", b"q"))
        log.save_snapshot(PolicySnapshot("p", "p1", b"p", parent="q1", status="active"))
        with log.engine.begin() as conn:
            conn.execute(text("UPDATE policy_snapshots SET previous_active = NULL"))
    assert _listed(migrated_url, tmp_path)["p1"] is None
    back = runner.invoke(app, ["policies", "rollback", "--policy", "p", "--db", migrated_url])
    assert back.exit_code == 1 and "has no parent to roll back to" in back.output


def test_promote_names_the_parent_a_rollback_returns_to_when_it_retired_nothing(
    migrated_url: str, tmp_path: Path
) -> None:
    with EpisodeLog(migrated_url) as log:
        log.save_snapshot(PolicySnapshot("p", "v1", b"one"))
        log.save_snapshot(PolicySnapshot("p", "v2", b"two", parent="v1"))
    out = tmp_path / "promote.json"
    promoted = runner.invoke(app, ["policies", "promote", "v2", "--db", migrated_url, "--json", str(out)])
    assert promoted.exit_code == 0, promoted.output
    record = json.loads(out.read_text())
    assert record["retired"] is None and record["rollback_to"] == "v1"
    assert "returns to v1" in " ".join(promoted.output.split())
    back = runner.invoke(app, ["policies", "rollback", "--policy", "p", "--db", migrated_url])
    assert back.exit_code == 0 and "v1 is active again" in back.output


def test_if_active_empty_promotes_only_while_no_snapshot_is_active(migrated_url: str) -> None:
    """``--if-active ""`` is "no snapshot of the policy is active" (what the admin's form sends
    when none was): done while none is, refused naming the one a promote made active meanwhile."""
    with EpisodeLog(migrated_url) as log:
        log.save_snapshot(PolicySnapshot("p", "v1", b"one"))
        log.save_snapshot(PolicySnapshot("p", "v2", b"two"))
    first = runner.invoke(app, ["policies", "promote", "v1", "--db", migrated_url, "--if-active", ""])
    assert first.exit_code == 0, first.output
    retried = runner.invoke(app, ["policies", "promote", "v1", "--db", migrated_url, "--if-active", ""])
    assert retried.exit_code == 0 and "nothing changed" in " ".join(retried.output.split())
    stale = runner.invoke(app, ["policies", "promote", "v2", "--db", migrated_url, "--if-active", ""])
    assert stale.exit_code == 1
    assert "it was to be the first active one, but v1 is active now" in " ".join(stale.output.split())
    assert {s.version: s.status for s in _listed_snapshots(migrated_url)} == {"v1": "active", "v2": "candidate"}


def _listed_snapshots(url: str) -> list[PolicySnapshot]:
    with EpisodeLog(url) as log:
        return list(log.list_snapshots("p"))
