"""``memabra learner`` rides out a database outage: it waits and retries instead of exiting, and
resumes from its last commit, learning every final reward exactly once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from runtime.learning_log import log_final
from sqlalchemy.exc import OperationalError
from typer.testing import CliRunner

from memabra._cli import _learner_loop
from memabra._cli._app import app
from memabra._errors import StorageContentionError
from memabra._learner import DEFAULT_POLICY, Learner, replay
from memabra.router import learned_model
from memabra.storage import EpisodeLog, LearnerStore

runner = CliRunner(env={"COLUMNS": "200"})


def _outage() -> OperationalError:
    return OperationalError("SELECT 1", {}, Exception("connection to server failed: Connection refused"))


def _contention() -> StorageContentionError:
    return StorageContentionError("the learner commit of policy 'linear' kept conflicting: Connection refused")


@pytest.mark.parametrize("error", [_outage, _contention])
def test_the_learner_retries_through_a_database_outage_and_learns_each_reward_once(
    migrated_url: str, monkeypatch: pytest.MonkeyPatch, error: Callable[[], Exception]
) -> None:
    with EpisodeLog(migrated_url) as log:
        log_final(log, 30)
    real_step = Learner.step
    calls = {"step": 0, "sleep": 0}

    def flaky_step(self: Learner, **kwargs: Any) -> Any:
        calls["step"] += 1
        if calls["step"] in (2, 3):  # the database goes away after the first step, for two tries
            raise error()
        return real_step(self, **kwargs)

    def sleep(_seconds: float) -> None:
        calls["sleep"] += 1
        if calls["step"] > 8:  # stop the long-running learner as SIGTERM would
            raise KeyboardInterrupt

    monkeypatch.setattr(Learner, "step", flaky_step)
    monkeypatch.setattr(_learner_loop.time, "sleep", sleep)
    monkeypatch.setattr("memabra._learner.READ_BATCH", 10)
    result = runner.invoke(app, ["learner", "--db", migrated_url, "--commit-every", "1000", "--poll", "0.05"])
    assert result.exit_code == 0, result.output
    assert "retrying in" in result.output  # one line per failed try, naming the cause
    assert "Connection refused" in result.output
    with EpisodeLog(migrated_url) as log:
        checkpoint = LearnerStore(log.engine).checkpoint(DEFAULT_POLICY)
        assert checkpoint is not None and checkpoint.learned == 30
        router, n = replay(log, DEFAULT_POLICY)
        assert n == 30
        assert checkpoint.snapshot_version is not None
        assert learned_model(log.get_snapshot(checkpoint.snapshot_version)) == learned_model(router.snapshot())


def test_learner_once_exits_1_with_one_line_when_the_database_is_down(
    migrated_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with EpisodeLog(migrated_url) as log:
        log_final(log, 5)

    def down(self: Learner, **kwargs: Any) -> Any:
        raise _outage()

    monkeypatch.setattr(Learner, "step", down)
    result = runner.invoke(app, ["learner", "--once", "--db", migrated_url])
    assert result.exit_code == 1
    assert "Connection refused" in result.output
    assert "Traceback" not in result.output
