from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from factories import episode
from memabra._cli import app, main
from memabra._feedback import RewardService
from memabra.storage import EpisodeLog, head_revision

runner = CliRunner(env={"COLUMNS": "200"})


def test_db_upgrade_then_episode_commands(db_url: str) -> None:
    result = runner.invoke(app, ["db", "upgrade", "--db", db_url])
    assert result.exit_code == 0, result.output
    assert head_revision() in result.output
    with EpisodeLog(db_url) as log:
        ep = episode()
        RewardService(log).record(ep)
    listed = runner.invoke(app, ["episodes", "list", "--db", db_url])
    assert listed.exit_code == 0 and ep.id in listed.output
    shown = runner.invoke(app, ["episodes", "show", ep.id, "--db", db_url])
    assert shown.exit_code == 0, shown.output
    for needle in ("m0", "propensity", "reward", "H by kind"):
        assert needle in shown.output
    fb = runner.invoke(app, ["feedback", ep.id, json.dumps({"correction": True}), "--db", db_url, "--idempotency-key", "k1"])
    assert fb.exit_code == 0 and "stored" in fb.output
    again = runner.invoke(app, ["feedback", ep.id, json.dumps({"correction": True}), "--db", db_url, "--idempotency-key", "k1"])
    assert "duplicate" in again.output
    rec = runner.invoke(app, ["rewards", "recompute", "--weights", "wc=1.0", "--db", db_url])
    assert rec.exit_code == 0 and "recomputed 1" in rec.output


def test_cli_errors_are_one_line_and_name_the_problem(db_url: str) -> None:
    unmigrated = runner.invoke(app, ["episodes", "list", "--db", db_url])
    assert unmigrated.exit_code == 1
    assert "memabra db upgrade" in unmigrated.output
    runner.invoke(app, ["db", "upgrade", "--db", db_url])
    missing = runner.invoke(app, ["episodes", "show", "nope", "--db", db_url])
    assert missing.exit_code == 1 and "no episode with id 'nope'" in missing.output
    bad = runner.invoke(app, ["rewards", "recompute", "--weights", "wc=nan", "--db", db_url])
    assert bad.exit_code == 1 and "finite" in bad.output
    badjson = runner.invoke(app, ["feedback", "x", "{not json", "--db", db_url])
    assert badjson.exit_code == 1 and "not JSON" in badjson.output



def test_an_unreachable_database_is_one_line_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = f"sqlite:///{tmp_path / 'no-such-dir' / 'x.db'}"
    monkeypatch.setattr(sys, "argv", ["memabra", "episodes", "list", "--db", missing])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert "database error" in err and "unable to open database file" in err
    assert "Traceback" not in err
