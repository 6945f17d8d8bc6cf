"""Changing the reward weights on a live log: every writer reads the same configuration, a process
scoring under weights other than the ones a reward was stored with says so, and `rewards recompute`
counts the rewards a learner had learned before it re-totalled them, not only before it started."""

from __future__ import annotations

import logging
import socket
from datetime import timedelta
from typing import Any

import pytest
from runtime.learning_log import log_final
from runtime.test_learner import drain, vw
from typer import Typer
from typer.testing import CliRunner

import memabra._feedback as feedback_module
from factories import episode
from memabra import Feedback, RewardWeights
from memabra._cli import app
from memabra._config import parse_weights
from memabra._errors import ConfigError
from memabra._feedback import RewardService
from memabra._learner import Learner
from memabra._reward import RewardConfig
from memabra.storage import EpisodeLog
from memabra.storage import _retotal as retotal_module

runner = CliRunner()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture(autouse=True)
def _nothing_warned_yet(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each warning is said once per process: each test starts as a new process would."""
    monkeypatch.setattr(feedback_module, "_warned", set(), raising=False)


def _warnings(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and text in r.getMessage()]


def test_the_admin_scores_feedback_under_the_configured_weights(
    monkeypatch: pytest.MonkeyPatch, log: EpisodeLog
) -> None:
    """`memabra admin` gave its app no reward configuration, so feedback an operator recorded there
    re-totalled the episode under the spec's weights whatever memabra.toml or the variable said."""
    pytest.importorskip("uvicorn")
    import uvicorn

    from memabra._cli._admin import admin

    monkeypatch.setenv("MEMABRA_ADMIN_TOKEN", "an-admin-token-1")
    monkeypatch.setenv("MEMABRA_REWARD_WEIGHTS", "wl=0.45,wx=0.05")
    monkeypatch.setenv("MEMABRA_FEEDBACK_WINDOW_SECONDS", "1200")
    served: list[Any] = []
    monkeypatch.setattr(uvicorn.Server, "run", lambda server, sockets: served.append(server.config.app))
    cli = Typer()
    cli.command()(admin)
    url = log.engine.url.render_as_string(hide_password=False)
    result = runner.invoke(cli, ["--db", url, "--port", str(_free_port())])
    assert result.exit_code == 0, result.output
    config = served[0].state.admin.reward_config
    assert config is not None and config.weights == RewardWeights(wl=0.45, wx=0.05)
    assert config.feedback_window == timedelta(seconds=1200)

    monkeypatch.setenv("MEMABRA_REWARD_WEIGHTS", "wl=0.45,wz=0.1")
    refused = runner.invoke(cli, ["--db", url, "--port", str(_free_port())])
    assert refused.exit_code == 1 and "MEMABRA_REWARD_WEIGHTS" in refused.output and "wz" in refused.output
    assert len(served) == 1  # refused before anything was served


def test_an_admin_app_built_in_python_scores_under_the_configured_weights(
    monkeypatch: pytest.MonkeyPatch, log: EpisodeLog
) -> None:
    """`create_app` given no reward configuration used the spec's weights, where an agent given no
    `reward=` reads memabra.toml and the environment."""
    from memabra import create_admin_app

    monkeypatch.setenv("MEMABRA_REWARD_WEIGHTS", "wl=0.45,wx=0.05")
    app = create_admin_app(log, token="an-admin-token-1")
    assert app.state.admin.reward_config.weights == RewardWeights(wl=0.45, wx=0.05)
    monkeypatch.setenv("MEMABRA_REWARD_WEIGHTS", "wz=0.1")
    with pytest.raises(ConfigError, match="wz"):
        create_admin_app(log, token="an-admin-token-1")


def test_a_process_scoring_under_other_weights_than_the_stored_reward_warns_once(
    log: EpisodeLog, caplog: pytest.LogCaptureFixture
) -> None:
    old = RewardService(log, RewardConfig(weights=RewardWeights(wl=0.13)))
    new = RewardService(log, RewardConfig(weights=RewardWeights(wl=0.31)))
    first, second = episode(), episode()
    old.record(first)
    old.record(second)
    caplog.set_level(logging.WARNING, logger="memabra")
    old.post_feedback(Feedback(first.id, "explicit", "user", {"rating": 4}))
    assert not _warnings(caplog, "totalled under weights")  # one weighting: nothing to say

    new.post_feedback(Feedback(first.id, "explicit", "user", {"rating": 5}))
    [warning] = _warnings(caplog, "totalled under weights")
    assert first.id in warning and "'wl': 0.13" in warning and "'wl': 0.31" in warning
    stored = log.get_reward(first.id)
    assert stored is not None and stored.weights == RewardWeights(wl=0.31)  # the whole reward re-totalled

    new.finalize(second.id)  # the same two weightings again: already said
    assert len(_warnings(caplog, "totalled under weights")) == 1


def test_weights_beyond_the_range_the_learners_clip_to_warn(log: EpisodeLog, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="memabra")
    RewardService(log, RewardConfig(weights=RewardWeights(wl=0.33, wx=0.41)))  # said when it is made
    RewardService(log, RewardConfig(weights=RewardWeights(wc=0.2)))  # inside the range
    [warning] = _warnings(caplog, "clip")
    assert "[-2.29, 1.60]" in warning and "[-1.90, 1.60]" in warning


def test_a_weight_named_twice_is_refused() -> None:
    with pytest.raises(ConfigError, match="weight wc is given twice"):
        parse_weights("wc=0.5,wl=0.2,wc=0.8")


def test_recompute_counts_rewards_learned_while_it_ran(
    log: EpisodeLog, migrated_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It counted learned rewards before it started: those a learner committed while it worked
    through the log, before their page, were learned under their old totals and went unmentioned."""
    log_final(log, 4)
    monkeypatch.setattr(retotal_module, "RETOTAL_PAGE", 2)
    learner = Learner(log, vw, commit_every=1)

    class LearnBetweenPages(logging.Handler):
        """The learner runs beside the recompute: it catches up once the first page is committed."""

        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith("re-totalled 2 rewards so far"):
                drain(learner, 4)
                learner.close()

    memabra_logger = logging.getLogger("memabra")
    handler = LearnBetweenPages(logging.DEBUG)
    memabra_logger.addHandler(handler)
    monkeypatch.setattr(memabra_logger, "level", logging.DEBUG)
    try:
        result = runner.invoke(app, ["rewards", "recompute", "--weights", "wc=0.9", "--db", migrated_url])
    finally:
        memabra_logger.removeHandler(handler)
    assert result.exit_code == 0, result.output
    assert learner.learned == 4
    flat = " ".join(result.output.split())
    assert "recomputed 4 rewards" in flat
    assert "2 of these rewards were already learned under their old totals" in flat


def test_a_reward_re_totalled_between_a_learners_read_and_its_commit_is_learned_again(
    log: EpisodeLog, migrated_url: str
) -> None:
    """A learner that read rewards before `rewards recompute` re-totalled them committed after it:
    its model held the old totals while the log marked them learned at the new ones (a replay
    differed, and nothing said so). Its commit is refused now and it learns them again."""
    from runtime.test_learner import checkpoint_model

    from memabra._replay import replay
    from memabra.router import learned_model

    log_final(log, 6)
    learner = Learner(log, vw, commit_every=1000)
    try:
        drain(learner, 6)  # read, not committed
        result = runner.invoke(app, ["rewards", "recompute", "--weights", "wc=0.9,wx=0.05", "--db", migrated_url])
        assert result.exit_code == 0, result.output
        assert learner.commit() is None  # refused: the totals it learned are no longer the log's
        learned_again = sum(learner.step().learned for _ in range(3))  # takes the lease back, resumes
    finally:
        learner.close()
    assert learned_again == 6 and learner.learned == 6
    router, rewards = replay(log, "vw")
    assert rewards == 6
    assert checkpoint_model(log) == learned_model(router.snapshot())
