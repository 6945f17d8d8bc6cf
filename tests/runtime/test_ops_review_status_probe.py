"""``memabra status --json FILE`` as a probe's contract: a run that cannot check the log still
writes the file (``healthy: false`` and the error), so a scraper never reads an earlier run's
``healthy: true``; and ``--timeout`` bounds a check against a database that does not answer."""

from __future__ import annotations

import json
import time
from pathlib import Path

from typer.testing import CliRunner

from memabra._cli import app
from memabra.storage import downgrade

runner = CliRunner(env={"COLUMNS": "200"})


def test_a_check_that_cannot_run_overwrites_the_json_with_the_error(migrated_url: str, tmp_path: Path) -> None:
    out = tmp_path / "status.json"
    first = runner.invoke(app, ["status", "--db", migrated_url, "--json", str(out)])
    assert first.exit_code == 0, first.output
    healthy = json.loads(out.read_text())
    assert healthy["healthy"] is True and healthy["error"] is None
    downgrade(migrated_url, "0010")  # the check cannot run now: the schema is behind this memabra
    failed = runner.invoke(app, ["status", "--db", migrated_url, "--json", str(out)])
    assert failed.exit_code == 1, failed.output
    report = json.loads(out.read_text())
    assert report.keys() == healthy.keys()  # the same keys on every run, for a scraper
    assert report["healthy"] is False
    assert report["status"] is None and report["problems"] == []
    assert "0010" in report["error"] and "db upgrade" in report["error"]


def test_an_unknown_policy_overwrites_the_json_with_the_error(migrated_url: str, tmp_path: Path) -> None:
    out = tmp_path / "status.json"
    assert runner.invoke(app, ["status", "--db", migrated_url, "--json", str(out)]).exit_code == 0
    failed = runner.invoke(app, ["status", "--db", migrated_url, "--policy", "nope", "--json", str(out)])
    assert failed.exit_code == 1, failed.output
    report = json.loads(out.read_text())
    assert report["healthy"] is False and "'nope'" in report["error"]


def test_a_database_that_does_not_answer_fails_the_check_within_the_timeout(silent_server: int, tmp_path: Path) -> None:
    out = tmp_path / "status.json"
    url = f"postgresql+psycopg://root@127.0.0.1:{silent_server}/test"
    started = time.monotonic()
    result = runner.invoke(app, ["status", "--db", url, "--timeout", "1", "--json", str(out)])
    assert time.monotonic() - started < 20
    assert result.exit_code == 1, result.output
    assert "no answer within 1 s" in result.output
    report = json.loads(out.read_text())
    assert report["healthy"] is False and "no answer within 1 s" in report["error"]


def test_a_bad_timeout_is_a_usage_error(migrated_url: str) -> None:
    result = runner.invoke(app, ["status", "--db", migrated_url, "--timeout", "-1"])
    assert result.exit_code == 2
