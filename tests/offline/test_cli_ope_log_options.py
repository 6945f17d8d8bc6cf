"""``memabra ope log`` options a data scientist passes: bad ones refused before anything is
evaluated or stored, and what the JSON records of the run."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

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
