"""``memabra learner``, ``memabra policies`` and ``memabra route`` on both backends."""

from __future__ import annotations

import json
from pathlib import Path

from runtime.learning_log import log_final
from typer.testing import CliRunner

from memabra._cli._app import app
from memabra._records import CandidateKind, RegistryItem
from memabra.storage import EpisodeLog

runner = CliRunner(env={"COLUMNS": "200"})


def test_learner_once_then_replay_and_export_are_identical(migrated_url: str, tmp_path: Path) -> None:
    with EpisodeLog(migrated_url) as log:
        log_final(log, 25)
    learned = runner.invoke(app, ["learner", "--once", "--db", migrated_url, "--commit-every", "10"])
    assert learned.exit_code == 0, learned.output
    assert "learned 25 rewards" in learned.output
    replay, export = tmp_path / "replay.bin", tmp_path / "active.bin"
    assert runner.invoke(app, ["learner", "--replay", "--db", migrated_url, "--out", str(replay)]).exit_code == 0
    assert runner.invoke(app, ["policies", "export", "--db", migrated_url, "--out", str(export)]).exit_code == 0
    assert replay.read_bytes() == export.read_bytes()
    # a second --once finds nothing new and leaves the model as it was
    again = runner.invoke(app, ["learner", "--once", "--db", migrated_url])
    assert again.exit_code == 0 and "learned 0 rewards" in again.output


def test_policies_list_shows_versions_status_and_decisions_served(migrated_url: str, tmp_path: Path) -> None:
    with EpisodeLog(migrated_url) as log:
        log_final(log, 12)
    assert runner.invoke(app, ["learner", "--once", "--db", migrated_url, "--commit-every", "5"]).exit_code == 0
    out = tmp_path / "policies.json"
    listed = runner.invoke(app, ["policies", "list", "--db", migrated_url, "--json", str(out)])
    assert listed.exit_code == 0, listed.output
    rows = json.loads(out.read_text())
    assert [r["status"] for r in rows].count("active") == 1
    assert rows[-1]["version"].endswith("+12") and rows[-1]["parent"] == rows[-2]["version"]
    assert all(r["decisions"] == 0 for r in rows)  # the random logging policy made the decisions


def test_route_prints_one_decision_with_its_distributions(migrated_url: str, tmp_path: Path) -> None:
    with EpisodeLog(migrated_url) as log:
        log.put_items(
            [
                RegistryItem(CandidateKind.MEMORY, "m1", "ann", "I live in Lyon [/] downtown", tokens=6),
                RegistryItem(CandidateKind.MEMORY, "m2", "ann", "my dog is called Rex", tokens=5),
            ]
        )
        before = log.count_episodes()
    out = tmp_path / "route.json"
    args = ["route", "--db", migrated_url, "--user", "ann", "--seed", "7", "--json", str(out), "where do I live?"]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert "[/]" in first.output  # user text is shown, not parsed as markup
    decision = json.loads(out.read_text())
    assert decision["seed"] == 7 and decision["slots"]
    assert {o["id"] for o in decision["offered"]} == {"m1", "m2"}  # every candidate, with the prior's z and the score
    assert all(isinstance(o["similarity"], float) and isinstance(o["score"], float) for o in decision["offered"])
    assert all(abs(sum(s["distribution"].values()) - 1.0) < 1e-9 for s in decision["slots"])
    assert runner.invoke(app, args).exit_code == 0 and json.loads(out.read_text()) == decision  # same seed, same draw
    with EpisodeLog(migrated_url) as log:
        assert log.count_episodes() == before  # nothing logged


def test_output_paths_are_checked_before_any_work(migrated_url: str, tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "out.bin"
    for args in (
        ["learner", "--replay", "--db", migrated_url, "--out", str(missing)],
        ["policies", "export", "--db", migrated_url, "--out", str(missing)],
        ["policies", "list", "--db", migrated_url, "--json", str(missing)],
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 1 and "does not exist" in result.output, (args, result.output)
    assert "needs --out" in runner.invoke(app, ["learner", "--replay", "--db", migrated_url]).output
    assert (
        "no active snapshot"
        in runner.invoke(app, ["policies", "export", "--db", migrated_url, "--out", str(tmp_path / "x")]).output
    )
