"""A stored OPE run keeps what a scientist needs weeks later, before and after promoting: the
paired differences ``ope log`` printed, the logging policy's interval on the same decisions, the
effective sample size behind the headline estimate, and how the run was made (seed, interval
method, estimators, the targets evaluated together, the command and its options), all of which
``memabra ope runs`` shows and writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memabra._cli import app
from memabra.evals.offline import LOGGING_POLICY, evaluate_on_log
from memabra.router import RandomRouter, Similarity
from memabra.storage import EpisodeLog

runner = CliRunner(env={"COLUMNS": "240"})
# two targets the random logger supports, under distinct names, so each is paired with the other
_TARGETS = ["--policy", "random", "--policy", 'random:{"seed": 3}']


def _filled(url: str, fill_log) -> None:  # type: ignore[no-untyped-def]
    with EpisodeLog(url) as log:
        fill_log(log, n=60)


def test_ope_runs_shows_the_paired_differences_and_provenance_ope_log_stored(
    migrated_url: str, fill_log, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    _filled(migrated_url, fill_log)
    out = tmp_path / "ope.json"
    args = ["ope", "log", "--db", migrated_url, *_TARGETS, "--estimators", "cdr", "--seed", "7", "--json", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    # the header gives the logging policy's interval, and the JSON keeps it and how the run was made
    low, high = doc["logging_ci_low"], doc["logging_ci_high"]
    assert low < doc["logging_value"] < high
    assert f"logging policy {doc['logging_value']:+.4f} [{low:+.4f}, {high:+.4f}] · seed 7" in result.output
    made = doc["provenance"]
    assert made["seed"] == 7 and made["ci_method"] == "normal" and made["include_provisional"] is False
    assert made["ci_description"] == "95% normal (delta-method)"
    assert made["targets"] == ["random", 'random:{"seed": 3}'] and "cdr" in made["estimators"]
    assert made["invocation"]["command"] == "memabra ope log"
    arguments = made["invocation"]["arguments"]
    assert arguments["seed"] == 7 and arguments["policy"] == ["random", 'random:{"seed": 3}']
    assert arguments["estimators"] == "cdr" and arguments["alpha"] == 0.05
    assert "db" not in arguments and "json_out" not in arguments  # no URL (nor its password) in the log

    listed_path = tmp_path / "runs.json"
    listed = runner.invoke(app, ["ope", "runs", "--db", migrated_url, "--json", str(listed_path)])
    assert listed.exit_code == 0, listed.output
    runs = {run["policy"]: run for run in json.loads(listed_path.read_text())["runs"]}
    assert set(runs) == {"random", 'random:{"seed": 3}'}
    for policy, run in runs.items():
        printed = doc["policies"][policy]
        assert printed["recommended"]["supported"] is True
        # what ope log printed as the paired table is what the stored run says, other target included
        assert run["versus"] == printed["versus"]
        assert set(run["versus"]) == {LOGGING_POLICY, *(p for p in runs if p != policy)}
        assert run["provenance"] == made  # one evaluation: one id, one seed, one command
        assert run["logging_ci_low"] == pytest.approx(low) and run["logging_ci_high"] == pytest.approx(high)
        # the effective sample size behind the headline estimate, from the weight it leans on
        assert run["weight"]["label"] == "joint"
        assert run["weight"]["effective_sample_size"] == pytest.approx(
            printed["diagnostics"]["joint"]["effective_sample_size"]
        )
    text = listed.output
    assert "paired on the same decisions: minus random" in text and "minus logging policy" in text
    assert "seed 7" in text and "95% normal, ESS" in text


def test_the_api_stores_the_same_record_without_a_command(log: EpisodeLog, fill_log, lexical: Similarity) -> None:  # type: ignore[no-untyped-def]
    fill_log(log, n=60)
    ev = evaluate_on_log(log, RandomRouter(similarity=lexical, seed=2), policy="random", estimators=["cdr"], seed=4)
    assert ev.recommended.supported and LOGGING_POLICY in ev.versus
    log.record_ope_results(list(ev.results))
    stored = [r for r in log.list_ope_runs(limit=20) if r.details["recommended"]]
    assert len(stored) == 1
    details = stored[0].details
    d = ev.versus[LOGGING_POLICY]
    assert details["versus"] == {LOGGING_POLICY: {"difference": d.value, "ci_low": d.ci_low, "ci_high": d.ci_high}}
    assert details["provenance"]["seed"] == 4 and details["provenance"]["invocation"] is None
    assert details["provenance"] == dict(ev.provenance)
    assert details["weight"] == "joint" and details["logging_stderr"] == pytest.approx(ev.logging_stderr)


def test_train_from_log_stores_what_it_trained_and_the_command(migrated_url: str, fill_log, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _filled(migrated_url, fill_log)
    out = tmp_path / "train.json"
    args = ["train", "--from-log", "--db", migrated_url, "--learner", "linear", "--holdout", "0.5"]
    result = runner.invoke(app, [*args, "--args", '{"epsilon": 0.2}', "--json", str(out)])
    assert result.exit_code == 0, result.output
    ess = json.loads(out.read_text())["effective_sample_size"]
    assert isinstance(ess, float) and ess > 0 and f"ESS {ess:.0f} of" in result.output
    with EpisodeLog(migrated_url) as log:
        (row,) = [r for r in log.list_ope_runs(limit=20) if r.details["recommended"]]
    training = row.details["training"]
    assert training["learner"] == "linear" and training["learner_args"] == {"epsilon": 0.2}
    assert training["holdout"] == 0.5 and training["n_train"] > 0
    invocation = row.details["provenance"]["invocation"]
    assert invocation["command"] == "memabra train"
    assert invocation["arguments"]["args"] == '{"epsilon": 0.2}' and "db" not in invocation["arguments"]
