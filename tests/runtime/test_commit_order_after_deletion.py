"""A reward made final after the newest final rewards were deleted is still learned.

On SQLite a trigger numbered each reward made final one past the largest number still stored, so
deleting the rewards at the top (retention, ``episodes delete``, a user's erasure) gave their
numbers again: the next reward was numbered at or before the learner's position and never read
(and an incremental export's cursor skipped it). The numbers now come from a counter that only
grows (revision 0015); PostgreSQL numbers by transaction id, never given twice."""

from __future__ import annotations

from runtime.learning_log import log_final
from runtime.test_learner import drain, vw
from sqlalchemy import text

from memabra._learner import Learner
from memabra.storage import EpisodeLog, downgrade, make_engine, upgrade


def test_a_reward_made_final_after_the_newest_learned_ones_were_deleted_is_learned(log: EpisodeLog) -> None:
    ids = log_final(log, 4)
    first = Learner(log, vw, commit_every=1)
    drain(first, 4)
    first.close()
    deleted = log.delete_episodes(ids[2:])  # the newest final rewards, learned: retention may take them
    assert deleted.deleted == 2
    log_final(log, 1, start=4)
    second = Learner(log, vw, commit_every=1000)
    assert second.acquire() and second.learned == 4
    drain(second, 5)  # the new reward: before, numbered 3, behind the position (4) and never read
    second.close()


def test_the_upgrade_numbers_on_past_every_stored_number_and_learner_position(migrated_url: str) -> None:
    """A log upgraded from revision 0014, where a number given twice may already sit below a
    learner's position: the counter starts past both, so no new reward lands behind a position."""
    with EpisodeLog(migrated_url) as log:
        log_final(log, 3)
    downgrade(migrated_url, "0014")
    engine = make_engine(migrated_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO learner_state (policy, snapshot_version, position_seq, position_episode, learned, "
                    "published, updated_at) VALUES ('vw', NULL, 40, 'e', 3, NULL, CURRENT_TIMESTAMP)"
                )
            )
    finally:
        engine.dispose()
    upgrade(migrated_url)
    with EpisodeLog(migrated_url) as log:
        [new] = log_final(log, 1, start=3)
        with log.engine.connect() as conn:
            seq = conn.execute(text("SELECT commit_seq FROM rewards WHERE episode_id = :e"), {"e": new}).scalar_one()
        if log.engine.dialect.name == "sqlite":  # PostgreSQL numbers by transaction id
            assert seq == 41
