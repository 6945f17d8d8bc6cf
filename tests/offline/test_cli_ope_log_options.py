"""``memabra ope log`` options a data scientist passes: bad ones refused before anything is
evaluated or stored, and what the JSON records of the run."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

import memabra.evals.offline as offline
from memabra._cli import app
from memabra.router import LinearRouter, Similarity
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


def _refuse_ope_runs(url: str) -> None:
    """A trigger that refuses every stored run's rows (a database that takes no writes there)."""
    with EpisodeLog(url) as log, log.engine.begin() as conn:
        if conn.dialect.name == "sqlite":
            conn.execute(
                text(
                    "CREATE TRIGGER refuse_ope BEFORE INSERT ON ope_runs BEGIN SELECT RAISE(ABORT, 'no runs here'); END"
                )
            )
            return
        conn.execute(
            text(
                "CREATE FUNCTION refuse_ope() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN RAISE EXCEPTION 'no runs here'; END $$"
            )
        )
        conn.execute(
            text("CREATE TRIGGER refuse_ope BEFORE INSERT ON ope_runs FOR EACH ROW EXECUTE FUNCTION refuse_ope()")
        )


@pytest.mark.parametrize("failure", ["snapshot pruned meanwhile", "insert refused"])
def test_a_store_that_fails_after_the_evaluation_comes_after_the_results_it_did_not_store(
    migrated_url: str, fill_log, lexical: Similarity, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:  # type: ignore[no-untyped-def]
    # minutes of evaluation must not vanish behind a store that fails: the tables are printed and
    # --json written first, then the store's failure is one line saying they were not stored
    _filled(migrated_url, fill_log)
    snapshot = LinearRouter(similarity=lexical).snapshot()
    with EpisodeLog(migrated_url) as log:
        log.save_snapshot(replace(snapshot, version="linear-new"))
    old = replace(snapshot, version="linear-old", created_at=snapshot.created_at - timedelta(days=1))
    evaluate = offline.evaluate_policies

    def pruned_meanwhile(*args, **kwargs):  # type: ignore[no-untyped-def]
        evaluations = evaluate(*args, **kwargs)
        # `memabra policies prune --keep 1` in another process while this one evaluated: no
        # stored run names linear-old yet, so it goes
        with EpisodeLog(migrated_url) as other:
            assert other.prune_snapshots(1).pruned == ("linear-old",)
        return evaluations

    if failure == "insert refused":
        _refuse_ope_runs(migrated_url)
    else:
        monkeypatch.setattr(offline, "evaluate_policies", pruned_meanwhile)
    out = tmp_path / "ope.json"
    args = ["ope", "log", "--db", migrated_url, "--policy", "snapshot:linear-old", "--estimators", "cdr"]
    for json_out in (str(out), "-"):
        with EpisodeLog(migrated_url) as log:
            if failure == "snapshot pruned meanwhile" or json_out == str(out):
                log.save_snapshot(old)
        result = runner.invoke(app, [*args, "--json", json_out])
        assert result.exit_code == 1, result.output
        assert isinstance(result.exception, SystemExit)  # one line, not a traceback
        # --json -: the JSON alone on standard output, the tables and the error on stderr
        written = out.read_text() if json_out == str(out) else result.stdout
        assert "snapshot:linear-old" in json.loads(written)["policies"]
        error = result.stderr.split("error: ", 1)[1]
        assert error.startswith("the results above were not stored in the log's OPE runs: ")
        if failure == "insert refused":
            assert "no runs here" in error
        else:
            assert "'linear-old', which is not in the log" in error
        # the tables came first
        assert result.output.index("snapshot:linear-old (cdr)") < result.output.index("error: ")
        assert _runs(migrated_url) == 0


def test_ope_runs_says_why_a_stored_run_is_unsupported(migrated_url: str, fill_log, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _filled(migrated_url, fill_log)  # 40 decisions: too few for a hybrid target, unsupported
    assert (
        runner.invoke(app, ["ope", "log", "--db", migrated_url, "--policy", "hybrid", "--estimators", "cdr"]).exit_code
        == 0
    )
    with EpisodeLog(migrated_url) as log:
        (stored,) = [r for r in log.list_ope_runs() if r.details.get("recommended")]
        reason = stored.details["reason"]
        assert stored.details["supported"] is False and "effective sample size" in reason
        # a supported run (no reason), and one stored before its verdict's reason was kept
        supported = {**stored.details, "supported": True, "reason": ""}
        older = {k: v for k, v in stored.details.items() if k != "reason"}
        log.record_ope_results(
            [
                replace(stored, run_id="supported-run", id="supported-row", details=supported, policy="bm25"),
                replace(stored, run_id="older-run", id="older-row", details=older, policy="random"),
            ]
        )
    listed = runner.invoke(app, ["ope", "runs", "--db", migrated_url, "--json", str(tmp_path / "runs.json")])
    assert listed.exit_code == 0, listed.output
    runs = {r["policy"]: r for r in json.loads((tmp_path / "runs.json").read_text())["runs"]}
    assert runs["hybrid"]["supported"] is False and runs["hybrid"]["reason"] == reason
    assert runs["bm25"]["supported"] is True and runs["bm25"]["reason"] is None
    assert runs["random"]["supported"] is False and runs["random"]["reason"] is None  # not recorded
    # the table points below it, where the reason is printed whole, by the run's short id
    output = " ".join(listed.output.split())
    assert "cdr unsupported (why: below)" in output
    assert f"{stored.run_id[:8]} hybrid (cdr): unsupported: {' '.join(reason.split())}" in output
