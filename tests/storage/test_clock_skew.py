"""Hosts whose wall clocks differ share one log: what they decide between them is judged by the
database's clock, never by the clock of whichever host wrote a time or reads it.

Skew is simulated by patching the host clock a storage module reads (``utcnow``) for one "host",
while the database's clock (PostgreSQL's, or on SQLite the machine's) runs true. On every
configured backend."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import pytest

from factories import episode
from memabra import Feedback
from memabra._feedback import RewardService
from memabra._records import utcnow
from memabra._reward import RewardConfig
from memabra.storage import AdminQueries, EpisodeLog
from memabra.storage._deletion_log import start_deletion

WINDOW = timedelta(minutes=2)
SKEW = timedelta(minutes=5)


def _skewed(by: timedelta) -> Callable[[], datetime]:
    return lambda: utcnow() + by


def _service(log: EpisodeLog) -> RewardService:
    return RewardService(log, RewardConfig(feedback_window=WINDOW))


def _verdict(episode_id: str) -> Feedback:
    return Feedback(episode_id, "explicit", "user", {"correct": False, "correction": True})


def test_an_agent_host_whose_clock_is_behind_gives_its_episodes_the_whole_window(
    log: EpisodeLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent five minutes behind the database stamps its episode five minutes early: its window,
    put on the database's clock as it is written, still runs its two minutes from the turn."""
    svc = _service(log)
    behind = _skewed(-SKEW)
    ep = episode(created_at=behind())
    with monkeypatch.context() as host:  # the agent host writes the episode
        host.setattr("memabra.storage._clock.utcnow", behind)
        svc.record(ep)
    stored = log.get_episode(ep.id)
    assert stored.created_at == ep.created_at  # the record keeps the time it was given
    # the learner (a true clock) closes no window that has not run its course
    assert svc.finalize_due() == 0 and log.get_episode(ep.id).finalized_at is None
    # a verdict a minute after the turn is in time: applied, not refused as late
    assert svc.post_feedback(_verdict(ep.id)).status == "stored"
    reward = log.get_reward(ep.id)
    assert reward is not None and reward.components.c == 1.0
    # the window still closes, WINDOW after the turn on the database's clock
    assert svc.finalize_due(utcnow() + WINDOW + timedelta(seconds=1)) == 1


def test_a_host_whose_clock_is_ahead_neither_refuses_feedback_nor_closes_windows_early(
    log: EpisodeLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    svc = _service(log)
    ep, other = episode(), episode()
    svc.record(ep)
    svc.record(other)
    ahead = _skewed(SKEW)
    with monkeypatch.context() as host:  # a learner host five minutes ahead runs its finalise pass
        host.setattr("memabra.storage._log.utcnow", ahead, raising=False)
        host.setattr("memabra.storage._rewards.utcnow", ahead, raising=False)
        assert svc.finalize_due() == 0
        # the feedback endpoint on a host five minutes ahead takes a verdict given in time
        assert svc.post_feedback(_verdict(ep.id)).status == "stored"
    assert log.get_episode(ep.id).finalized_at is None and log.get_episode(other.id).finalized_at is None
    # once the database's clock passes the deadline, the windows close and feedback is late
    with monkeypatch.context() as db:
        db.setattr("memabra.storage._rewards.database_now", lambda _s: utcnow() + WINDOW + timedelta(seconds=1))
        assert svc.post_feedback(_verdict(other.id)).status == "late"
        assert svc.finalize_due() == 1  # ep (other was made final by its late feedback)
    assert log.get_episode(ep.id).finalized_at is not None


def test_a_deletion_run_stamped_by_a_clock_ahead_does_not_hide_a_later_run_that_died(
    log: EpisodeLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A later finished run covers an unfinished one; which came later is the database's call. An
    erasure's finished run from an admin host ten minutes ahead must not read as later than a run
    started after it elsewhere that died part way: that one stays reported, to be run again."""
    log.log_episodes([episode("ann") for _ in range(3)])
    with monkeypatch.context() as host:
        host.setattr("memabra.storage._deletion_log.utcnow", _skewed(timedelta(minutes=10)), raising=False)
        log.delete_episodes(user_id="ann", include_unlearned=True, actor="cli:ahead")
    log.log_episodes([episode("ann") for _ in range(2)])  # ann came back meanwhile
    died = start_deletion(
        log.transactions,
        actor="cli:true-clock",
        client=None,
        episode_ids=None,
        user_id="ann",
        created_before=None,
        include_unlearned=True,
        kept=0,
    )
    assert [e.id for e in log.status().unfinished_deletions] == [died]
    history = log.deletion_history()
    assert [e.actor for e in history] == ["cli:true-clock", "cli:ahead"]  # newest first, by one clock


def test_a_stall_after_reading_the_database_clock_is_not_taken_for_skew(
    log: EpisodeLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hosts whose clocks agree: a three-second stall between the database reading its clock and
    this host reading its own (a busy server's reply, a thread waiting for the GIL) is no skew,
    and the window stays whole, not three seconds short."""
    from memabra.storage import _clock

    read_database = _clock.database_now
    read: list[datetime] = []

    def database_now(bind: object) -> datetime:
        read.append(read_database(bind))  # type: ignore[arg-type]
        return read[-1]

    monkeypatch.setattr(_clock, "database_now", database_now)
    monkeypatch.setattr(_clock, "utcnow", lambda: utcnow() + (timedelta(seconds=3) if read else timedelta(0)))
    ep = episode()
    _service(log).record(ep)
    assert read  # the offset was measured
    due = AdminQueries(log).episode_summary(ep.id)
    assert due is not None and due.feedback_due_at == ep.created_at + WINDOW
