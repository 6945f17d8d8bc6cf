"""Whole processes: a restart serves exactly what was saved, and a learner SIGKILLed at random moments
(at least 20 times) ends with the model a from-scratch replay produces, every reward learned once."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from runtime.learning_log import log_final

from memabra._learner import DEFAULT_POLICY, replay
from memabra.router import learned_model
from memabra.storage import EpisodeLog, LearnerStore

HERE = Path(__file__).resolve().parent
MEMABRA = Path(sys.executable).with_name("memabra")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")])}


def _checkpoint_model(log: EpisodeLog) -> tuple[bytes, int]:
    state = LearnerStore(log.engine).checkpoint(DEFAULT_POLICY)
    assert state is not None and state.snapshot_version is not None
    return learned_model(log.get_snapshot(state.snapshot_version)), state.learned


def _learned(store: LearnerStore) -> int:
    state = store.checkpoint(DEFAULT_POLICY)
    return state.learned if state is not None else 0


@pytest.mark.slow
def test_a_new_process_makes_the_same_decisions_and_relearns_what_the_killed_one_had_not_saved(
    migrated_url: str,
) -> None:
    worker = [sys.executable, str(HERE / "restart_worker.py"), migrated_url]
    first = subprocess.run([*worker, "learn"], capture_output=True, text=True, env=_env(), timeout=300)
    assert first.returncode == -signal.SIGKILL, first.stderr
    before = json.loads(first.stdout.strip().splitlines()[-1])
    second = subprocess.run([*worker, "serve"], capture_output=True, text=True, env=_env(), timeout=300)
    assert second.returncode == 0, second.stderr
    after = json.loads(second.stdout.strip().splitlines()[-1])
    assert after == before  # same version, same draw, same distributions
    # a learner resumes from the last commit and learns the 5 rewards the killed process never saved
    done = subprocess.run(
        # the killed process's lease lapses after its TTL: --once waits for it rather than give up
        [str(MEMABRA), "learner", "--once", "--wait", "30", "--db", migrated_url],
        capture_output=True,
        text=True,
        env=_env(),
    )
    assert done.returncode == 0, done.stderr
    with EpisodeLog(migrated_url) as log:
        model, learned = _checkpoint_model(log)
        router, n = replay(log)
        assert learned == n == 35
        assert model == learned_model(router.snapshot())


_MAX_KILLS = 60


@pytest.mark.slow
def test_a_learner_killed_at_random_moments_ends_equal_to_a_replay(migrated_url: str) -> None:
    rng = random.Random(0)
    learner = [str(MEMABRA), "learner", "--db", migrated_url, "--commit-every", "9", "--commit-interval", "0.05"]
    learner += ["--lease-ttl", "0.5", "--poll", "0.05"]
    kills, mid_learning = 0, 0
    with EpisodeLog(migrated_url) as log:
        store = LearnerStore(log.engine)
        log_final(log, 300)
        written = 300
        # a fast machine's learner catches up on 100 rewards quickly: kill on until enough land mid-way
        while kills < 20 or (mid_learning < 5 and kills < _MAX_KILLS):
            before = _learned(store)
            proc = subprocess.Popen(learner, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 120
            while _learned(store) == before and time.monotonic() < deadline:  # it is learning now
                time.sleep(0.02)
            time.sleep(rng.uniform(0.0, 0.3))  # a random moment of learning: reading, learning, committing
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            kills += 1
            if before < _learned(store) < written:
                mid_learning += 1
            log_final(log, 100, start=written)
            written += 100
        done = subprocess.run(
            [*learner, "--once", "--wait", "30"], env=_env(), capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr
        model, learned = _checkpoint_model(log)
        router, n = replay(log)
        final = store.count_final()  # inside: after the log closes, its engine would open a new pool
    # most kills land before the learner caught up (the rest right after it did)
    assert kills >= 20 and mid_learning >= 5, (kills, mid_learning)
    assert learned == n == written == final
    assert model == learned_model(router.snapshot())
