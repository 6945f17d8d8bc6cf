"""``memabra status``, ``EpisodeLog.status`` and ``/metrics`` on a large log: the counts that grow
with the log stop at a cap (said so: ``+``, ``*_capped``) or, for the episodes on PostgreSQL, are the
planner's estimate (said so: ``~``, ``memabra_episodes_exact 0``); ``--exact`` counts everything.
The caps are lowered here so a handful of rows crosses them."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from runtime.learning_log import log_final
from sqlalchemy import text
from typer.testing import CliRunner

from memabra._cli import app
from memabra._learner import Learner
from memabra._metrics import status_metrics
from memabra.router import VWRouter
from memabra.storage import EpisodeLog, _status_counts
from memabra.storage._status import log_status

runner = CliRunner(env={"COLUMNS": "200"})


@pytest.fixture
def small_caps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_status_counts, "BACKLOG_COUNT_CAP", 3)
    monkeypatch.setattr(_status_counts, "EPISODES_COUNT_CAP", 4)


def _status(url: str, *args: str) -> tuple[int, str, dict]:  # type: ignore[type-arg]
    out = runner.invoke(app, ["status", "--db", url, "--json", "-", *args])
    return out.exit_code, out.output, json.loads(out.stdout[out.stdout.index("{") :])


def _metric(text_: str, line_start: str) -> str:
    (line,) = [line for line in text_.splitlines() if line.startswith(line_start + " ")]
    return line.split(" ", 1)[1]


def test_a_backlog_past_the_cap_says_at_least_and_exact_counts_it(migrated_url: str, small_caps: None) -> None:
    with EpisodeLog(migrated_url) as log:
        log_final(log, 2)
        learner = Learner(log, lambda: VWRouter(seed=0), commit_every=1000)
        for _ in range(200):
            learner.step()
            if learner.learned >= 2:
                break
        learner.commit(force=True)
        learner.close()
        log_final(log, 5, start=2)
        bounded = log.status()
        exact = log_status(log.engine, exact=True)
    (policy,) = bounded.policies
    assert (policy.backlog, policy.backlog_capped) == (3, True)
    assert policy.backlog_since is not None
    (counted,) = exact.policies
    assert (counted.backlog, counted.backlog_capped) == (5, False)
    assert counted.backlog_since is not None and policy.backlog_since >= counted.backlog_since
    # the learner checkpointed after 2 of 7: 5 final rewards not marked learned, counted up to 3
    assert (bounded.unlearned, bounded.unlearned_capped) == (3, True)
    assert (exact.unlearned, exact.unlearned_capped) == (5, False)

    metrics = status_metrics(bounded, max_lag=timedelta(minutes=15), duration_s=0.1, checked_at=bounded.checked_at)
    assert _metric(metrics, 'memabra_learner_backlog{policy="vw"}') == "3"
    assert _metric(metrics, 'memabra_learner_backlog_capped{policy="vw"}') == "1"
    assert _metric(metrics, "memabra_rewards_unlearned_capped") == "1"
    assert "counted up to 3" in metrics  # HELP says what the figure is
    code, output, document = _status(migrated_url)
    assert code == 0, output
    assert "3+ final and not learned" in output and "3+; the oldest final" in output
    assert document["status"]["policies"][0]["backlog_capped"] is True
    code, output, document = _status(migrated_url, "--exact")
    assert code == 0, output
    assert "5 final and not learned" in output and document["status"]["policies"][0]["backlog"] == 5


def test_a_policy_without_a_checkpoint_counts_its_backlog_up_to_the_cap(log: EpisodeLog, small_caps: None) -> None:
    log_final(log, 6)
    state = log.status()
    assert (state.unlearned, state.unlearned_capped, state.policies) == (3, True, ())
    assert state.unlearned_since is not None
    assert log_status(log.engine, exact=True).unlearned == 6


def test_many_episodes_are_counted_up_to_the_cap_then_estimated_on_postgresql(
    migrated_url: str, small_caps: None
) -> None:
    with EpisodeLog(migrated_url) as log:
        log_final(log, 3)
        assert (log.status().episodes, log.status().episodes_accuracy) == (3, "exact")
        log_final(log, 4, start=3)
        state = log.status()
        exact = log_status(log.engine, exact=True)
        assert (exact.episodes, exact.episodes_accuracy) == (7, "exact")
        if log.engine.dialect.name != "postgresql":
            assert (state.episodes, state.episodes_accuracy) == (7, "exact")  # SQLite keeps no estimate
            return
        # never analysed: the planner knows nothing, so the figure is the cap, a lower bound
        assert (state.episodes, state.episodes_accuracy) == (4, "at least")
        with log.engine.begin() as conn:
            conn.execute(text("ANALYZE episodes"))
        estimated = log.status()
    assert (estimated.episodes, estimated.episodes_accuracy) == (7, "estimate")
    metrics = status_metrics(estimated, max_lag=timedelta(minutes=15), duration_s=0.1, checked_at=estimated.checked_at)
    assert _metric(metrics, "memabra_episodes") == "7" and _metric(metrics, "memabra_episodes_exact") == "0"
    assert "planner's estimate" in metrics
    code, output, document = _status(migrated_url)
    assert "episodes  ~7 (the planner's estimate; --exact counts them)" in output
    assert document["status"]["episodes_accuracy"] == "estimate"
    assert "episodes  7;" in _status(migrated_url, "--exact")[1]


def test_an_exact_episode_count_says_so_in_the_metrics(log: EpisodeLog) -> None:
    log_final(log, 2)
    state = log.status()
    metrics = status_metrics(state, max_lag=timedelta(minutes=15), duration_s=0.1, checked_at=state.checked_at)
    assert _metric(metrics, "memabra_episodes") == "2" and _metric(metrics, "memabra_episodes_exact") == "1"
    assert _metric(metrics, "memabra_rewards_unlearned_capped") == "0"


def test_a_capped_held_back_count_is_said_to_be_at_least_in_the_learner_check(migrated_url: str) -> None:
    from dataclasses import replace

    from memabra._health import health_problems
    from memabra.storage import PolicyStatus

    with EpisodeLog(migrated_url) as log:
        state = log.status()
    since = state.checked_at - timedelta(hours=2)
    behind = PolicyStatus("linear", None, None, None, None, 10_000, since, 10_000, None, True, True)
    (problem,) = health_problems(replace(state, policies=(behind,), oldest_transaction=None))
    assert "10000+ final reward(s)" in problem.message
    assert "10000+ of them wait behind" in problem.message  # not "10000 of them": there are more


def test_the_library_status_counts_exactly_when_asked(migrated_url: str, small_caps: None) -> None:
    with EpisodeLog(migrated_url) as log:
        log_final(log, 5)
        bounded, exact = log.status(), log.status(exact=True)
    assert (bounded.unlearned, bounded.unlearned_capped) == (3, True)
    assert (exact.unlearned, exact.unlearned_capped, exact.episodes, exact.episodes_accuracy) == (5, False, 5, "exact")
