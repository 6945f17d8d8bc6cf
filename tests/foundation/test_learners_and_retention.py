"""Retention with several learners on one log: a final reward stays until every learner whose
checkpoint is in the log has read past it, and a dead learner's claim can be dropped."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from typer.testing import CliRunner

from factories import episode
from memabra import PolicySnapshot, RewardBreakdown, RewardComponents, RewardWeights
from memabra._cli import app
from memabra.storage import EpisodeLog, LearnerBusyError, LearnerLease, LearnerStore
from memabra.storage._learner import START, FinalReward

NOW = datetime.now(UTC)
REWARD = RewardBreakdown(RewardComponents(s=1.0, hm=1.0), RewardWeights())


def _final_episodes(log: EpisodeLog, n: int) -> list[FinalReward]:
    for i in range(n):
        ep = episode("ann", created_at=NOW - timedelta(days=100 + i))
        log.log_episode(ep)
        log.put_reward(ep.id, REWARD, final=True)
    # on PostgreSQL a reward is read once every transaction older than it has ended, anywhere on the
    # server (docs/production.md, "Reading in commit order"): another client's may be open a moment
    deadline = time.monotonic() + 10.0
    while len(finals := LearnerStore(log.engine).read_final()) < n and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(finals) == n
    return finals


def _commit(log: EpisodeLog, policy: str, version: str, previous: FinalReward | None, upto: FinalReward) -> None:
    LearnerStore(log.engine).commit(
        PolicySnapshot(policy, version, b"model"),
        previous=START if previous is None else previous.position,
        position=upto.position,
        learned=1,
    )


def test_an_episode_stays_until_every_learner_has_read_it(log: EpisodeLog) -> None:
    finals = _final_episodes(log, 4)
    _commit(log, "slow", "slow-1", None, finals[0])  # a second learner that has read one reward
    _commit(log, "fast", "fast-1", None, finals[-1])  # the first learner has read them all
    dry = log.delete_episodes(before=NOW, dry_run=True)
    assert (dry.deleted, dry.kept_unlearned) == (1, 3)
    done = log.delete_episodes(before=NOW)
    assert (done.deleted, done.kept_open, done.kept_unlearned) == (1, 0, 3)
    assert log.count_episodes() == 3
    # what the slow learner reads next is all still there
    assert [f.item.episode_id for f in LearnerStore(log.engine).read_final(finals[0].position)] == [
        f.item.episode_id for f in finals[1:]
    ]
    _commit(log, "slow", "slow-2", finals[0], finals[2])
    assert log.delete_episodes(before=NOW).deleted == 2
    _commit(log, "slow", "slow-3", finals[2], finals[3])
    assert log.delete_episodes(before=NOW).deleted == 1
    assert log.count_episodes() == 0


def test_a_dead_learners_claim_can_be_dropped(log: EpisodeLog) -> None:
    finals = _final_episodes(log, 3)
    _commit(log, "gone", "gone-1", None, finals[0])
    _commit(log, "live", "live-1", None, finals[-1])
    assert log.delete_episodes(before=NOW).kept_unlearned == 2
    holds = {h.policy: h for h in log.retention_holds()}
    assert set(holds) == {"gone", "live"}
    assert holds["gone"].behind == 2 and holds["live"].behind == 0
    assert log.forget_learner("gone") is True
    assert log.forget_learner("gone") is False  # nothing left to forget
    assert LearnerStore(log.engine).checkpoint("gone") is None
    assert log.get_snapshot("gone-1").version == "gone-1"  # its snapshots stay
    assert log.delete_episodes(before=NOW).deleted == 2
    assert log.count_episodes() == 0


def test_a_learner_holding_its_lease_cannot_be_forgotten(log: EpisodeLog) -> None:
    finals = _final_episodes(log, 1)
    _commit(log, "busy", "busy-1", None, finals[0])
    lease = LearnerLease(log.engine, "busy")
    assert lease.acquire()
    try:
        with pytest.raises(LearnerBusyError, match="holds the learner lease"):
            log.forget_learner("busy")
    finally:
        lease.release()
    assert log.forget_learner("busy") is True


def test_cli_names_the_learner_a_deletion_waits_for_and_forgets_it(migrated_url: str) -> None:
    with EpisodeLog(migrated_url) as log:
        finals = _final_episodes(log, 2)
        _commit(log, "gone", "gone-1", None, finals[0])
        _commit(log, "live", "live-1", None, finals[-1])
    runner = CliRunner()
    kept = runner.invoke(app, ["episodes", "delete", "--older-than", "30d", "--db", migrated_url])
    assert kept.exit_code == 0, kept.output
    assert "deleted 1 episode(s)" in kept.output
    assert "policy gone has 1 final reward(s) left to read" in kept.output
    assert "memabra policies forget-learner --policy gone" in kept.output and "policy live" not in kept.output
    forgot = runner.invoke(app, ["policies", "forget-learner", "--policy", "gone", "--db", migrated_url])
    assert forgot.exit_code == 0 and "retention no longer waits for it" in forgot.output, forgot.output
    again = runner.invoke(app, ["policies", "forget-learner", "--policy", "gone", "--db", migrated_url])
    assert again.exit_code == 0 and "has no learner checkpoint" in again.output  # a rerun is not a failure
    gone = runner.invoke(app, ["episodes", "delete", "--older-than", "30d", "--db", migrated_url])
    assert gone.exit_code == 0 and "deleted 1 episode(s)" in gone.output, gone.output
