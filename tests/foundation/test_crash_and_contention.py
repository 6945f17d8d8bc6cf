"""Crash and contention tests on every configured backend.

Crash: a forked worker logs episodes (or posts feedback) in a loop and is SIGKILLed at a random
moment, 20 times per phase; afterwards no episode is partial and no stored feedback is missing
from its episode's reward. Contention: three processes write to one SQLite file (more on
PostgreSQL, sharing one user's registry rows) and no caller sees ``database is locked``, a
deadlock or any other error.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time
import traceback
from typing import Any

import pytest
from sqlalchemy import func, select

from factories import candidates, episode, uniform_selection
from memabra import CandidateKind, Episode, Feedback
from memabra._feedback import RewardService
from memabra._records import RegistryItem
from memabra.storage import EpisodeLog
from memabra.storage._models import (
    DecisionCandidateRow,
    DecisionRow,
    DecisionSlotRow,
    EpisodeRow,
    FeedbackRow,
    StepRow,
)

pytestmark = pytest.mark.slow

KILLS = 20
N_CANDIDATES = 5  # factories.episode: one decision of 5 candidates, 3 slot draws, 1 step
# Never 3: its S (0.5) equals the default, which would hide a lost update.
RATINGS = (1, 2, 4, 5)

_fork = multiprocessing.get_context("fork")


def _log_forever(url: str, seed: int) -> None:
    rng = random.Random(seed)
    with EpisodeLog(url) as log:
        svc = RewardService(log)
        while True:
            if rng.random() < 0.5:
                svc.record(episode())
            else:
                log.log_episodes([episode() for _ in range(rng.randint(2, 30))])


def _feedback_forever(url: str, seed: int) -> None:
    """Log an episode, then post its one feedback: a post cut between storing and applying would
    stay visible, since no later post to the same episode recomputes its reward."""
    rng = random.Random(seed)
    with EpisodeLog(url) as log:
        svc = RewardService(log)
        while True:
            ep = episode()
            svc.record(ep)
            svc.post_feedback(Feedback(ep.id, "explicit", "user", {"rating": rng.choice(RATINGS)}))


def _kill_repeatedly(target: Any, args: tuple[Any, ...], rng: random.Random) -> None:
    for _ in range(KILLS):
        proc = _fork.Process(target=target, args=args + (rng.randrange(1 << 30),), daemon=True)
        proc.start()
        time.sleep(rng.uniform(0.15, 0.6))
        assert proc.pid is not None and proc.is_alive(), "the worker died before it was killed"
        os.kill(proc.pid, signal.SIGKILL)
        proc.join()
        assert proc.exitcode == -signal.SIGKILL


def _scalar(log: EpisodeLog, stmt: Any) -> int:
    with log.engine.connect() as conn:
        return int(conn.execute(stmt).scalar() or 0)


def test_sigkill_while_logging_leaves_no_partial_episode(migrated_url: str) -> None:
    _kill_repeatedly(_log_forever, (migrated_url,), random.Random(11))
    with EpisodeLog(migrated_url) as log:
        n = log.count_episodes()
        assert n > KILLS  # the workers did get work done between kills
        counts = {
            DecisionRow: n,
            DecisionCandidateRow: n * N_CANDIDATES,
            DecisionSlotRow: n * 3,
            StepRow: n,
        }
        for model, expected in counts.items():
            assert _scalar(log, select(func.count()).select_from(model)) == expected, model.__tablename__
        # no episode has fewer decisions than it was logged with (the totals could hide a swap)
        per_episode = select(func.count()).select_from(
            select(EpisodeRow.id)
            .outerjoin(DecisionRow, DecisionRow.episode_id == EpisodeRow.id)
            .group_by(EpisodeRow.id)
            .having(func.count(DecisionRow.id) != 1)
            .subquery()
        )
        assert _scalar(log, per_episode) == 0


def test_sigkill_while_posting_feedback_never_leaves_feedback_unapplied(migrated_url: str) -> None:
    _kill_repeatedly(_feedback_forever, (migrated_url,), random.Random(12))
    with EpisodeLog(migrated_url) as log:
        with log.engine.connect() as conn:
            ids = list(conn.execute(select(EpisodeRow.id)).scalars())
        posted = _scalar(log, select(func.count()).select_from(FeedbackRow))
        assert posted > KILLS  # the workers did post between kills
        unapplied = []
        for eid in ids:
            feedback = log.feedback_for(eid)
            reward = log.get_reward(eid)
            assert reward is not None  # logged with its provisional reward, in one transaction
            if not feedback:  # killed between logging and posting: the default stands
                assert reward.components.s == 0.5
                continue
            assert len(feedback) == 1
            rating = feedback[0].signals.explicit.rating
            assert rating is not None
            if reward.components.s != (rating - 1) / 4:
                unapplied.append(eid)
        assert unapplied == []


# ---------------------------------------------------------------- several writers at once


def _writer(url: str, seed: int, turns: int, shared_user: bool, errors: Any) -> None:
    rng = random.Random(seed)
    try:
        with EpisodeLog(url) as log:
            svc = RewardService(log)
            user = "shared" if shared_user else f"user{seed}"
            pool = candidates(n=8)
            for i in range(turns):
                order = rng.sample(pool, len(pool))
                chosen = [c.id for c in order[:3]]
                sel = uniform_selection(user, order, chosen)
                ep = Episode(user_id=user, query=sel.context.query, selections=(sel,), answer="a")
                if i % 5 == 4:
                    batch = [ep] + [
                        Episode(
                            user_id=user, query="q", selections=(uniform_selection(user, rng.sample(pool, 8), chosen),)
                        )
                        for _ in range(4)
                    ]
                    log.log_episodes(batch)
                else:
                    svc.record(ep)
                svc.post_feedback(
                    Feedback(ep.id, "explicit", "user", {"rating": rng.choice(RATINGS), "used_ids": chosen[:1]})
                )
                if i % 10 == 0:
                    svc.finalize_due()
    except BaseException:
        errors.put(traceback.format_exc())
        raise


@pytest.mark.parametrize("processes", [3])
def test_several_processes_write_without_lock_errors(migrated_url: str, processes: int) -> None:
    """Agent-like writers on one log (on PostgreSQL they share a user, so they bump the same
    registry counters): nothing reaches a caller, nothing is lost."""
    postgres = migrated_url.startswith("postgresql")
    n_proc = processes + (3 if postgres else 0)
    turns = 40
    with EpisodeLog(migrated_url) as log:
        log.put_items([RegistryItem(CandidateKind.MEMORY, c.id, "shared", c.text, c.tokens) for c in candidates(n=8)])
    errors = _fork.Queue()
    procs = [_fork.Process(target=_writer, args=(migrated_url, s, turns, postgres, errors)) for s in range(n_proc)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    messages = []
    while not errors.empty():
        messages.append(errors.get())
    assert messages == [] and all(p.exitcode == 0 for p in procs), "\n".join(messages)
    with EpisodeLog(migrated_url) as log:
        per_proc = turns + (turns // 5) * 4
        assert log.count_episodes() == n_proc * per_proc
        assert _scalar(log, select(func.count()).select_from(FeedbackRow)) == n_proc * turns
        if postgres:
            chosen_total = sum(i.times_chosen for i in log.items("shared"))
            assert chosen_total == n_proc * per_proc * 3
