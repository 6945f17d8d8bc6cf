"""Review of the stored run record: what a stored OPE run keeps must be safe to store (no
secret given in an option other than --db, no value the database cannot hold, whichever caller
stored it) and read back the same on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memabra._cli import app
from memabra.evals.offline import evaluate_on_log, train_from_log
from memabra.router import RandomRouter, Similarity
from memabra.storage import EpisodeLog

runner = CliRunner(env={"COLUMNS": "240"})


_KEYED = """
from memabra.router import RandomRouter


class Keyed(RandomRouter):
    # a router of your own that calls a service: its URL and key are arguments
    name = "keyed"

    def __init__(self, url="", api_key="", **kwargs):
        super().__init__(**kwargs)
        self.url, self.api_key = url, api_key
"""


def test_a_secret_in_a_policy_option_is_not_stored(
    migrated_url: str, fill_log, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    with EpisodeLog(migrated_url) as log:
        fill_log(log, n=60)
    module = f"keyed_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{module}.py").write_text(_KEYED)
    monkeypatch.chdir(tmp_path)
    own = f'{module}:Keyed:{{"url": "postgresql://bot:hunter2@db/x", "api_key": "sk-live-1"}}'
    args = ["ope", "log", "--db", migrated_url, "--policy", own, "--policy", "random", "--estimators", "cdr"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    with EpisodeLog(migrated_url) as log:
        rows = log.list_ope_runs(limit=100)
    stored = json.dumps([[r.policy, dict(r.details)] for r in rows], default=str)
    for secret in ("hunter2", "sk-live-1"):
        assert secret not in stored
    masked = f'{module}:Keyed:{{"url": "postgresql://bot:***@db/x", "api_key": "***"}}'
    # one name for the target everywhere its runs name it: its rows, the targets, the other's versus
    assert {r.policy for r in rows} == {masked, "random"}
    random_row = next(r for r in rows if r.policy == "random" and r.details["recommended"])
    assert masked in random_row.details["versus"] and masked in random_row.details["provenance"]["targets"]
    assert random_row.details["provenance"]["invocation"]["arguments"]["policy"] == [masked, "random"]


def test_train_keeps_learner_args_without_their_secrets(log: EpisodeLog, fill_log) -> None:  # type: ignore[no-untyped-def]
    fill_log(log, n=60)
    report = train_from_log(log, learner="linear", learner_args={"epsilon": 0.2}, holdout=0.5, force=True)
    assert report.saved_version is not None
    row = next(r for r in log.list_ope_runs(limit=20) if r.details.get("recommended"))
    assert row.details["training"]["learner_args"] == {"epsilon": 0.2}
    invocation = {"command": "memabra train", "arguments": {"args": '{"epsilon": 0.2, "client_secret": "s3"}'}}
    report = train_from_log(
        log, learner="linear", learner_args={"epsilon": 0.2}, holdout=0.5, force=True, invocation=invocation
    )
    rows = [r for r in log.list_ope_runs(limit=40) if r.snapshot_version == report.saved_version]
    assert rows and all("s3" not in json.dumps(dict(r.details)) for r in rows)
    assert (
        rows[0].details["provenance"]["invocation"]["arguments"]["args"] == '{"epsilon": 0.2, "client_secret": "***"}'
    )


def test_an_invocation_from_the_api_is_stored_as_json(log: EpisodeLog, fill_log, lexical: Similarity) -> None:  # type: ignore[no-untyped-def]
    """A script passing its own invocation (a datetime, a path, NaN) must not lose the run: the
    store came after the whole evaluation, and the database refused such values there."""
    fill_log(log, n=60)
    when = datetime(2026, 1, 2, tzinfo=UTC)
    invocation = {"command": "nightly.py", "arguments": {"since": when, "out": Path("/tmp/x"), "ratio": float("nan")}}
    ev = evaluate_on_log(
        log, RandomRouter(similarity=lexical, seed=2), policy="random", estimators=["cdr"], invocation=invocation
    )
    log.record_ope_results(list(ev.results))
    (row,) = [r for r in log.list_ope_runs(limit=20) if r.details["recommended"]]
    arguments = row.details["provenance"]["invocation"]["arguments"]
    assert arguments == {"since": str(when), "out": "/tmp/x", "ratio": None}


def test_ope_runs_prints_the_paired_differences_in_ope_logs_order(migrated_url: str, fill_log, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """PostgreSQL's JSONB gives a stored run's ``versus`` back shortest key first: the listing
    must still print the other targets as given, then the logging policy, as ope log did."""
    with EpisodeLog(migrated_url) as log:
        fill_log(log, n=60)
    targets = ["--policy", "random", "--policy", 'random:{"seed": 3}']
    assert runner.invoke(app, ["ope", "log", "--db", migrated_url, *targets, "--estimators", "cdr"]).exit_code == 0
    listed = runner.invoke(app, ["ope", "runs", "--db", migrated_url])
    assert listed.exit_code == 0, listed.output
    text = " ".join(listed.output.split())
    assert 'random, paired on the same decisions: minus random:{"seed": 3}' in text
