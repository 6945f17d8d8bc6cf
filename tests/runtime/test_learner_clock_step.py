"""A learner's lease and a clock that jumps: no reward is learned twice or skipped.

On PostgreSQL the lease is an advisory lock, held for as long as its transaction is, whatever any
clock says. On SQLite it is a row that lapses by the host's clock: a clock stepped forward past
the lease's time to live (an NTP step, a VM resumed) lets a standby take it while the holder is
still learning. That holder's commit is then refused (the commit is guarded by the read position
it started from), so the two never both commit the same rewards. Skew is simulated by patching the
clock the lease reads."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from runtime.learning_log import log_final

from memabra._learner import Learner
from memabra._records import utcnow
from memabra.router import VWRouter
from memabra.storage import EpisodeLog, LearnerStore


def vw() -> VWRouter:
    return VWRouter(seed=0)


def _learn(learner: Learner, expected: int, timeout_s: float = 30.0) -> None:
    """Step until ``learner`` has learned ``expected`` (on PostgreSQL a reward is readable once
    every older transaction on the server ended)."""
    deadline = time.monotonic() + timeout_s
    while learner.learned < expected:
        assert time.monotonic() < deadline, f"learned {learner.learned} of {expected}"
        if not learner.step().learned:
            time.sleep(0.05)


def test_a_clock_stepped_past_the_lease_never_lets_two_learners_commit_the_same_rewards(
    log: EpisodeLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    log_final(log, 6)
    holder = Learner(log, vw, commit_every=1000)
    _learn(holder, 6)  # learned, not committed yet
    standby = Learner(log, vw, commit_every=1000)
    with monkeypatch.context() as clock:  # the clock steps an hour forward as the standby tries
        clock.setattr("memabra.storage._learner_lease.utcnow", lambda: utcnow() + timedelta(hours=1))
        took = standby.acquire()
    sqlite = log.engine.dialect.name == "sqlite"
    assert took == sqlite  # PostgreSQL's lock reads no clock
    if took:
        _learn(standby, 6)
        assert standby.commit() is not None
        assert holder.commit() is None and not holder.holds_lease  # refused: it stands by
    else:
        assert holder.commit() is not None
    checkpoint = LearnerStore(log.engine).checkpoint("vw")
    assert checkpoint is not None and checkpoint.learned == 6  # each reward once, none skipped
    for learner in (holder, standby):
        learner.close()
