from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from logged_world import TOPICS, true_value
from memabra import ConfigError, InvalidRecordError, RewardWeights
from memabra._cli import app
from memabra.evals.offline import evaluate_on_log, logged_value, resolve_policy, train_from_log
from memabra.router import HybridRouter, RandomRouter
from memabra.storage import EpisodeLog

runner = CliRunner(env={"COLUMNS": "200"})


def test_the_logging_policy_evaluated_on_its_own_log_is_the_logged_mean(log: EpisodeLog, fill_log, lexical) -> None:  # type: ignore[no-untyped-def]
    fill_log(log, n=300)
    ev = evaluate_on_log(log, RandomRouter(similarity=lexical, seed=99), policy="random")
    mean, _, n = logged_value(log)
    assert n == 300 and ev.n_rounds == 300
    for r in ev.results:
        assert r.value == pytest.approx(mean, abs=1e-9), r.estimator
    assert ev.max_weight == pytest.approx(1.0)


def test_a_better_policy_is_estimated_close_to_its_true_value(log: EpisodeLog, fill_log, lexical) -> None:  # type: ignore[no-untyped-def]
    fill_log(log, n=600)
    target = HybridRouter(similarity=lexical, seed=2)
    truth = true_value(HybridRouter(similarity=lexical, seed=2), 600)
    ev = evaluate_on_log(log, target, policy="hybrid", estimators=("ipw", "snipw", "dr"))
    by_name = {r.estimator: r for r in ev.results}
    assert by_name["ipw"].ci_low <= truth <= by_name["ipw"].ci_high
    assert by_name["snipw"].value == pytest.approx(truth, abs=0.05)
    assert by_name["dr"].ci_high - by_name["dr"].ci_low <= by_name["ipw"].ci_high - by_name["ipw"].ci_low
    assert ev.logging_value < truth
    assert 0 < ev.zero_weight_share < 1


def test_reweighting_changes_estimates_without_touching_the_log(log: EpisodeLog, fill_log, lexical) -> None:  # type: ignore[no-untyped-def]
    fill_log(log, n=200)
    plain = evaluate_on_log(log, HybridRouter(similarity=lexical), policy="h", estimators=("snipw",))
    heavy = evaluate_on_log(log, HybridRouter(similarity=lexical), policy="h", estimators=("snipw",), weights=RewardWeights(ws=2.0))
    assert heavy.results[0].value > plain.results[0].value
    assert logged_value(log)[0] == plain.logging_value


def test_off_policy_training_saves_only_a_policy_that_beats_the_logger(log: EpisodeLog, fill_log) -> None:  # type: ignore[no-untyped-def]
    fill_log(log, n=600)
    report = train_from_log(log, learner="vw", learner_args={"seed": 0}, holdout=0.3)
    assert report.n_train + report.n_holdout == 600
    assert report.estimate.value > report.logging_value
    assert report.promotable and report.saved_version is not None
    snap = log.get_snapshot(report.saved_version)
    assert snap.metrics["verdict"] == "beats logging policy" and snap.status == "candidate"
    stored = log.list_ope_runs(report.saved_version)
    assert [r.estimator for r in stored] == ["snipw"]


def test_a_policy_that_does_not_beat_the_logger_is_not_saved_unless_forced(log: EpisodeLog, fill_log) -> None:  # type: ignore[no-untyped-def]
    fill_log(log, n=200)
    # a learner with nothing to learn from: every reward is re-weighted to zero
    zero = RewardWeights(ws=0, wr=0, we=0, wc=0, wl=0, wx=0, wu=0)
    report = train_from_log(log, learner="random", weights=zero)
    assert not report.promotable and report.saved_version is None
    forced = train_from_log(log, learner="random", weights=zero, force=True)
    assert forced.saved_version is not None
    assert log.get_snapshot(forced.saved_version).metrics["verdict"].startswith("forced")


def test_bad_input_names_the_problem(log: EpisodeLog, lexical) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidRecordError, match="no rewarded decisions"):
        evaluate_on_log(log, HybridRouter(similarity=lexical), policy="h")
    with pytest.raises(InvalidRecordError, match="at least 10"):
        train_from_log(log)
    with pytest.raises(ConfigError, match="unknown policy 'nope'"):
        resolve_policy("nope", log)
    with pytest.raises(ConfigError, match="no snapshot with version 'v9'"):
        resolve_policy("snapshot:v9", log)
    with pytest.raises(ConfigError, match="not JSON"):
        resolve_policy("vw:{oops", log)
    with pytest.raises(ConfigError, match="unknown learner"):
        train_from_log(log, learner="magic")


def test_cli_ope_log_writes_json_png_and_stores_runs(migrated_url: str, fill_log, tmp_path) -> None:  # type: ignore[no-untyped-def]
    with EpisodeLog(migrated_url) as log:
        fill_log(log, n=120)
    out, png = tmp_path / "ope.json", tmp_path / "ope.png"
    result = runner.invoke(
        app, ["ope", "log", "--db", migrated_url, "--policy", "hybrid", "--policy", "random", "--json", str(out), "--plot", str(png)]
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert set(doc["policies"]) == {"hybrid", "random"}
    assert set(doc["policies"]["hybrid"]["estimates"]["ipw"]) == {"value", "ci_low", "ci_high"}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with EpisodeLog(migrated_url) as log:
        assert len(log.list_ope_runs(policy="hybrid")) == 5
    trained = runner.invoke(app, ["train", "--from-log", "--db", migrated_url, "--holdout", "0.3"])
    assert trained.exit_code == 0, trained.output
    assert "vs logging policy" in trained.output
    empty_topic = runner.invoke(app, ["ope", "log", "--db", migrated_url, "--policy", "bogus"])
    assert empty_topic.exit_code == 1 and "unknown policy 'bogus'" in empty_topic.output
    assert len(TOPICS) == 6
