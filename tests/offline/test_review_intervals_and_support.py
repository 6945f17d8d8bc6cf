"""What a reviewer found: the per-draw support check of iips/idr, intervals that say their kind
and level (table, JSON, train), empty windows that say which window, and the seed checked by name."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from logged_world import Stopper, log_world
from memabra import InvalidRecordError
from memabra._cli import app
from memabra.evals.offline import evaluate_on_log
from memabra.router import RandomRouter
from memabra.storage import EpisodeLog

runner = CliRunner(env={"COLUMNS": "240"})
pytestmark = pytest.mark.slow


def test_a_fully_supported_target_is_not_called_uncovered_by_the_per_slot_check(log: EpisodeLog) -> None:
    # logger and target give every option a positive probability: the log covers the target. The
    # mean of a decision's ratios is not 1 in expectation when how many draws it makes depends on
    # them (1.22 [1.17, 1.27] here), so iips and idr used to read "excludes 1: the log does not cover
    # this target"; the pseudo-inverse weight, 1 + sum_s (rho_s - 1), has mean exactly 1
    log_world(log, Stopper(0.3, seed=1), 1500)
    ev = evaluate_on_log(log, Stopper(0.8), policy="stop-heavy", seed=0)
    for name in ("iips", "idr"):
        assert ev.verdicts[name].rule != "mean weight", ev.verdicts[name].reason
        assert ev.weight_diagnostics(name) == ev.diagnostics["pseudo-inverse"]
    pi = ev.diagnostics["pseudo-inverse"]
    assert pi.mean_weight_ci_low <= 1.0 <= pi.mean_weight_ci_high


def test_ope_log_says_which_intervals_it_prints(migrated_url: str, tmp_path: Path) -> None:
    with EpisodeLog(migrated_url) as log:
        log_world(log, RandomRouter(seed=1), 120)
    out = tmp_path / "ope.json"
    result = runner.invoke(
        app,
        [
            "ope",
            "log",
            "--db",
            migrated_url,
            "--policy",
            "hybrid",
            "--alpha",
            "0.001",
            "--no-store",
            "--json",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    # 1 - 0.001 used to print as "100%" in the paired table's title
    assert "100%" not in result.output
    assert "99.9% normal (delta-method) intervals" in result.output
    doc = json.loads(out.read_text())
    assert doc["alpha"] == 0.001
    assert doc["ci_method"] == "normal"  # the name ope arrays --json uses


def test_train_states_the_level_it_gates_at(migrated_url: str) -> None:
    with EpisodeLog(migrated_url) as log:
        log_world(log, RandomRouter(seed=1), 120)
    result = runner.invoke(app, ["train", "--from-log", "--db", migrated_url, "--alpha", "0.025"])
    assert result.exit_code == 0, result.output
    assert "97.5% normal (delta-method) intervals" in result.output
    assert "98%" not in result.output


def test_an_empty_window_names_the_window_it_read(migrated_url: str) -> None:
    with EpisodeLog(migrated_url) as log:
        log_world(log, RandomRouter(seed=1), 30)
    result = runner.invoke(
        app, ["ope", "log", "--db", migrated_url, "--policy", "hybrid", "--since", "2090-01-01", "--no-store"]
    )
    assert result.exit_code == 1
    # it used to say "in the chosen range" only: which range, and how many decisions lie outside it?
    assert "since/until [2090-01-01T00:00:00+00:00, now) is empty" in result.output, result.output
    assert "30 rewarded decisions lie outside it" in result.output, result.output


def test_train_on_an_empty_window_says_which_window(migrated_url: str) -> None:
    with EpisodeLog(migrated_url) as log:
        log_world(log, RandomRouter(seed=1), 30)
    result = runner.invoke(app, ["train", "--from-log", "--db", migrated_url, "--since", "2090-01-01"])
    assert result.exit_code == 1
    # it used to read "the episode log holds 0 finally rewarded decisions", as if the log were empty
    assert "0 finally rewarded decisions since 2090-01-01T00:00:00+00:00" in result.output, result.output


@pytest.mark.parametrize("seed", [-1, 1.5, True, "0"])
def test_a_bad_seed_is_refused_by_name_before_the_log_is_read(log: EpisodeLog, seed: object) -> None:
    # numpy's SeedSequence used to fail mid-pass: "expected non-negative integer", naming nothing
    log_world(log, RandomRouter(seed=1), 20)
    with pytest.raises(InvalidRecordError, match="seed must be an integer >= 0"):
        evaluate_on_log(log, RandomRouter(seed=2), policy="random", seed=seed)  # type: ignore[arg-type]


def test_a_numpy_integer_seed_is_a_seed(log: EpisodeLog) -> None:
    log_world(log, RandomRouter(seed=1), 20)
    ev = evaluate_on_log(log, RandomRouter(seed=2), policy="random", seed=np.int64(3))  # type: ignore[arg-type]
    assert ev.n_rounds == 20
