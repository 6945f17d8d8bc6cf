"""``memabra ope log`` options a data scientist passes: bad ones refused before anything is
evaluated or stored, and what the JSON records of the run."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

import memabra.evals.offline as offline
from memabra._cli import app
from memabra.router import Similarity
from memabra.storage import EpisodeLog

runner = CliRunner(env={"COLUMNS": "240"})


def _filled(url: str, fill_log) -> None:  # type: ignore[no-untyped-def]
    with EpisodeLog(url) as log:
        fill_log(log, n=40)


def _runs(url: str) -> int:
    with EpisodeLog(url) as log:
        return len(log.list_ope_runs())


def test_a_plot_format_matplotlib_cannot_write_is_refused_before_anything_is_stored(
    migrated_url: str, fill_log, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    _filled(migrated_url, fill_log)
    out = tmp_path / "ope.json"
    args = ["ope", "log", "--db", migrated_url, "--policy", "hybrid", "--estimators", "cdr", "--json", str(out)]
    result = runner.invoke(app, [*args, "--plot", str(tmp_path / "chart.txt")])
    assert result.exit_code == 1, result.output
    assert "--plot" in result.output and "cannot save a chart as .txt" in result.output
    assert isinstance(result.exception, SystemExit)  # an error message, not a traceback
    assert not out.exists() and _runs(migrated_url) == 0  # nothing written half way
    svg = runner.invoke(app, [*args, "--plot", str(tmp_path / "chart.svg"), "--no-store"])
    assert svg.exit_code == 0, svg.output
    assert (tmp_path / "chart.svg").read_text().lstrip().startswith("<?xml")


def test_an_estimator_list_that_names_none_is_refused(migrated_url: str, fill_log) -> None:  # type: ignore[no-untyped-def]
    _filled(migrated_url, fill_log)
    for given in (",", " , ", ""):
        result = runner.invoke(app, ["ope", "log", "--db", migrated_url, "--policy", "hybrid", "--estimators", given])
        assert result.exit_code == 1, (given, result.output)
        assert "--estimators" in result.output and "name at least one estimator" in result.output
    assert _runs(migrated_url) == 0


def test_the_json_records_the_reward_weights_it_rescored_under(
    migrated_url: str, fill_log, lexical: Similarity, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    _filled(migrated_url, fill_log)
    out = tmp_path / "ope.json"
    args = ["ope", "log", "--db", migrated_url, "--policy", "hybrid", "--estimators", "cdr", "--no-store"]
    plain = runner.invoke(app, [*args, "--json", str(out)])
    assert plain.exit_code == 0, plain.output
    assert json.loads(out.read_text())["weights"] is None  # the totals as logged
    rescored = runner.invoke(app, [*args, "--weights", "wc=0.8", "--json", str(out)])
    assert rescored.exit_code == 0, rescored.output
    weights = json.loads(out.read_text())["weights"]
    assert weights["wc"] == 0.8 and weights["ws"] == 1.0 and set(weights) == {"ws", "wr", "we", "wc", "wl", "wx", "wu"}


def test_a_run_that_fails_to_store_its_second_target_stores_nothing(
    migrated_url: str, fill_log, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    # the second target names a snapshot the log no longer holds (pruned while the run read the
    # log): its results are refused, and the first target's must not stay behind as a whole run
    _filled(migrated_url, fill_log)
    evaluate = offline.evaluate_policies

    def second_snapshot_gone(*args, **kwargs):  # type: ignore[no-untyped-def]
        first, second = evaluate(*args, **kwargs)
        gone = tuple(replace(r, snapshot_version="pruned-1") for r in second.results)
        return first, replace(second, snapshot_version="pruned-1", results=gone)

    monkeypatch.setattr(offline, "evaluate_policies", second_snapshot_gone)
    args = ["ope", "log", "--db", migrated_url, "--policy", "hybrid", "--policy", "bm25", "--estimators", "cdr"]
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    assert "pruned-1" in result.output and "not in the log" in result.output
    assert _runs(migrated_url) == 0


def test_stored_runs_carry_the_weights_they_rescored_under_and_ope_runs_lists_them(
    migrated_url: str, fill_log, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    # two weekly runs, one re-scored with wc=0.8: listed side by side they must not look comparable
    _filled(migrated_url, fill_log)
    args = ["ope", "log", "--db", migrated_url, "--policy", "hybrid", "--estimators", "cdr"]
    assert runner.invoke(app, args).exit_code == 0
    assert runner.invoke(app, [*args, "--weights", "wc=0.8"]).exit_code == 0
    with EpisodeLog(migrated_url) as log:
        stored = log.list_ope_runs()
        # a run from before runs recorded their weights (no "weights" in its details)
        old = replace(stored[0], details={k: v for k, v in stored[0].details.items() if k != "weights"})
        log.record_ope_results([replace(old, run_id="stored-before-weights", id="old-row")])
    rescored = [r for r in stored if r.reward_weights is not None]
    as_logged = [r for r in stored if r.reward_weights is None]
    assert rescored and as_logged and all(r.weights_recorded for r in stored)
    assert rescored[0].reward_weights is not None and rescored[0].reward_weights["wc"] == 0.8
    assert not old.weights_recorded and old.reward_weights is None  # reads, does not fail
    out = tmp_path / "runs.json"
    listed = runner.invoke(app, ["ope", "runs", "--db", migrated_url, "--json", str(out)])
    assert listed.exit_code == 0, listed.output
    assert "wc=0.8" in listed.output and "as logged" in listed.output and "not recorded" in listed.output
    runs = json.loads(out.read_text())["runs"]
    assert len(runs) == 3
    assert sorted(str(r["weights"] and r["weights"]["wc"]) for r in runs) == ["0.8", "None", "None"]
    assert sorted(r["weights_recorded"] for r in runs) == [False, True, True]
    only = runner.invoke(app, ["ope", "runs", "--db", migrated_url, "--policy", "bm25"])
    assert only.exit_code == 0 and "0 stored OPE run(s)" in only.output
