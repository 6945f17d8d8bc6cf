"""A learner stopped in the middle of learning one reward (SIGTERM from a rolling deploy, Ctrl-C,
a router raising) must not commit that torn state on its way out.

``memabra learner`` turns SIGTERM into KeyboardInterrupt and closes the learner, which commits
what it learned. Raised after the router learned a reward but before the read position moved past
it, that commit stored a model holding the reward with a position before it: the next learner
learned it again, and the model was no longer a replay of the log."""

from __future__ import annotations

from typing import Any

import pytest
from runtime.learning_log import log_final
from runtime.test_learner import checkpoint_model, drain, vw

import memabra._learner as learner_module
from memabra._learner import Learner, replay
from memabra.router import learned_model
from memabra.storage import EpisodeLog


def _raising_at_the_eighth_reward(monkeypatch: pytest.MonkeyPatch, stop: BaseException | type[BaseException]) -> None:
    """The eighth reward learned raises ``stop`` after the router learned it, before the position
    moved past it (three past a commit every five)."""
    real = learner_module.learn_item
    calls = 0

    def learn_then_stop(*args: Any, **kwargs: Any) -> None:
        nonlocal calls
        real(*args, **kwargs)
        calls += 1
        if calls == 8:
            raise stop

    monkeypatch.setattr(learner_module, "learn_item", learn_then_stop)


@pytest.mark.parametrize("stop", [KeyboardInterrupt, RuntimeError])
def test_a_learner_stopped_between_learning_a_reward_and_moving_past_it_commits_nothing_torn(
    log: EpisodeLog, monkeypatch: pytest.MonkeyPatch, stop: type[BaseException]
) -> None:
    log_final(log, 20)
    first = Learner(log, vw, commit_every=5)
    real = learner_module.learn_item
    _raising_at_the_eighth_reward(monkeypatch, stop)
    with pytest.raises(stop):
        first.step()
    assert first.torn and first.pending == 2
    first.close()  # what the CLI does on its way out
    assert (first.learned, first.pending) == (5, 0)  # what the log holds, for the CLI's last line
    monkeypatch.setattr(learner_module, "learn_item", real)

    second = Learner(log, vw, commit_every=1000)
    assert second.acquire() and second.learned == 5  # the torn rewards were dropped, not committed
    drain(second, 20)
    second.close()
    router, n = replay(log, "vw")
    assert n == 20 and checkpoint_model(log) == learned_model(router.snapshot())


def test_memabra_learner_stopped_mid_reward_says_what_it_committed(
    migrated_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI's last line counts the rewards the log holds as learned, not the ones it dropped."""
    from typer.testing import CliRunner

    from memabra._cli._app import app

    with EpisodeLog(migrated_url) as log:
        log_final(log, 20)
    _raising_at_the_eighth_reward(monkeypatch, KeyboardInterrupt)  # what the learner's SIGTERM handler raises
    result = CliRunner().invoke(app, ["learner", "--db", migrated_url, "--commit-every", "5", "--poll", "0.05"])
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert "learned 5 rewards in this run (5 in this lineage" in said, said


def test_an_in_process_learner_whose_step_raised_midway_steps_on_from_its_last_commit(
    log: EpisodeLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent's own learner steps after each turn: a step that raised midway is followed by
    more steps, which must not learn the torn reward again on top of the torn model."""
    log_final(log, 20)
    learner = Learner(log, vw, commit_every=5)
    _raising_at_the_eighth_reward(monkeypatch, RuntimeError("a custom router's bug, once"))
    with pytest.raises(RuntimeError):
        learner.step()
    drain(learner, 20)
    learner.close()
    router, n = replay(log, "vw")
    assert n == 20 and checkpoint_model(log) == learned_model(router.snapshot())
