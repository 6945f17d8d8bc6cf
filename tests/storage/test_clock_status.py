"""What the operator reads (``memabra status``, the health checks, ``memabra episodes paused
--lost``) is judged by the database's clock, as the feedback windows and the deletion audit trail
are (storage/_clock.py): an admin host whose clock is minutes apart neither raises an overdue alarm
for windows still open, nor hides windows past their end, nor calls a lost turn running.

Skew is simulated by patching the clock a module reads (``utcnow``) for the admin "host", while
the database's clock (PostgreSQL's, or on SQLite the machine's) runs true. On every configured
backend."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from factories import episode
from memabra._cli import app
from memabra._feedback import RewardService
from memabra._health import health_problems
from memabra._records import utcnow
from memabra._reward import RewardConfig
from memabra.storage import RUNNING_TURN_LIMIT, EpisodeLog, SuspendedTurn

WINDOW = timedelta(minutes=2)
SKEW = timedelta(minutes=5)


def _running_turn(turn_id: str, routed_ago: timedelta) -> SuspendedTurn:
    """A turn kept as running, routed ``routed_ago`` by the (true) database clock."""
    at = utcnow() - routed_ago
    return SuspendedTurn(turn_id, f"ep-{turn_id}", "ann", "t-1", at, {"query": "q", "steps": []}, paused=False)


def test_a_status_host_ahead_raises_no_alarm_for_windows_still_open(
    log: EpisodeLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    RewardService(log, RewardConfig(feedback_window=WINDOW)).record(episode())
    with monkeypatch.context() as host:  # the admin host runs five minutes ahead
        host.setattr("memabra.storage._status.utcnow", lambda: utcnow() + SKEW, raising=False)
        state = log.status()
    assert abs(state.checked_at - utcnow()) < timedelta(seconds=30)  # the database's time
    assert (state.open_windows, state.overdue, state.overdue_since) == (1, 0, None)
    assert not [p for p in health_problems(state, max_lag=timedelta(seconds=1)) if "feedback window" in p.message]


def test_a_status_host_behind_still_sees_windows_past_their_end_and_lost_turns(
    log: EpisodeLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    RewardService(log, RewardConfig(feedback_window=WINDOW)).record(episode(created_at=utcnow() - 2 * WINDOW))
    log.suspend_turn(_running_turn("t-lost", RUNNING_TURN_LIMIT + timedelta(minutes=2)))
    with monkeypatch.context() as host:  # the admin host runs five minutes behind
        host.setattr("memabra.storage._status.utcnow", lambda: utcnow() - SKEW, raising=False)
        state = log.status()
    assert state.overdue == 1 and state.overdue_since is not None
    assert state.lost_turns == 1  # routed 62 minutes ago by the log's clock: its process died


def test_episodes_paused_lost_on_a_host_behind_lists_the_turn_the_status_counts(
    log: EpisodeLog, migrated_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    log.suspend_turn(_running_turn("t-lost", RUNNING_TURN_LIMIT + timedelta(minutes=2)))
    log.suspend_turn(_running_turn("t-running", timedelta(minutes=1)))
    out = tmp_path / "lost.json"
    with monkeypatch.context() as host:  # `memabra episodes paused --lost` on a host five minutes behind
        host.setattr("memabra._cli._paused.utcnow", lambda: utcnow() - SKEW, raising=False)
        done = CliRunner().invoke(app, ["episodes", "paused", "--db", migrated_url, "--lost", "--json", str(out)])
    assert done.exit_code == 0, done.output
    listed = json.loads(out.read_text())["paused"]
    assert [(t["turn_id"], t["state"]) for t in listed] == [("t-lost", "lost")]
    assert log.status().lost_turns == 1  # the same turn, by the same clock


def test_the_database_clock_is_the_log_s(log: EpisodeLog, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("memabra.storage._clock.utcnow", lambda: utcnow() + SKEW)  # not read
    assert abs(log.database_now() - utcnow()) < timedelta(seconds=30)
    assert log.database_now().utcoffset() == timedelta(0)
