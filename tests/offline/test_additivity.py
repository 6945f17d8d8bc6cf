"""The pseudo-inverse estimator's assumption, tested on the log: a reward that does not add up over
the picks (the simulator's "any note helped") is caught and PI is then not recommended; one that
adds up passes (evals/offline/_additivity.py)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from logged_world import additive_reward_of, log_world
from memabra._cli import app
from memabra.evals.offline import evaluate_on_log
from memabra.evals.simulator import World, log_simulation
from memabra.router import HybridRouter, RandomRouter, VWRouter
from memabra.storage import EpisodeLog

pytestmark = pytest.mark.slow
runner = CliRunner(env={"COLUMNS": "240"})


def test_a_reward_that_adds_up_over_the_picks_passes(log: EpisodeLog, lexical) -> None:  # type: ignore[no-untyped-def]
    log_world(log, RandomRouter(similarity=lexical, seed=1), 300, reward=additive_reward_of, with_used=True)
    ev = evaluate_on_log(log, HybridRouter(similarity=lexical), policy="hybrid")
    assert ev.additivity is not None and ev.additivity.additive, ev.additivity


def test_without_outcomes_there_is_nothing_to_test(log: EpisodeLog, lexical) -> None:  # type: ignore[no-untyped-def]
    log_world(log, RandomRouter(similarity=lexical, seed=1), 300)
    ev = evaluate_on_log(log, HybridRouter(similarity=lexical), policy="hybrid")
    assert ev.additivity is None and ev.as_json()["diagnostics"]["additivity"] is None


def test_pi_is_not_recommended_where_the_reward_is_not_additive(log: EpisodeLog, lexical) -> None:  # type: ignore[no-untyped-def]
    # a short simulator log: cascade DR's joint weight has too few effective samples, and PI's
    # weight alone would pass the verdict (it did before the additivity test: docs/ope.md)
    log_simulation(lambda s: VWRouter(seed=s, similarity=lexical, epsilon=0.9), World(seed=2), 300, log, seed=2)
    ev = evaluate_on_log(log, HybridRouter(similarity=lexical), policy="hybrid")
    # the simulator's success is "any note helped": counting used picks freely predicts it far better
    assert ev.additivity is not None and not ev.additivity.additive
    assert ev.additivity.free_rmse < 0.5 * ev.additivity.additive_rmse
    assert ev.as_json()["diagnostics"]["additivity"]["additive"] is False
    rec = ev.recommended
    assert rec.estimator == "cdr" and not rec.supported
    assert "pi: assumes a reward additive over slots" in rec.reason


def test_ope_log_prints_the_verdict_under_the_table(migrated_url: str, lexical) -> None:  # type: ignore[no-untyped-def]
    with EpisodeLog(migrated_url) as log:
        log_simulation(lambda s: VWRouter(seed=s, similarity=lexical, epsilon=0.9), World(seed=2), 200, log, seed=2)
    result = runner.invoke(app, ["ope", "log", "--db", migrated_url, "--policy", "hybrid", "--no-store"])
    assert result.exit_code == 0, result.output
    assert "does not add up over slots (PI not recommended)" in result.output
