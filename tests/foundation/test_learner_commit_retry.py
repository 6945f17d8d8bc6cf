"""The learner's commit is one transaction retried whole on a transient conflict (a PostgreSQL
deadlock or serialisation failure, SQLite's busy lock), and ends in a named error when the
conflicts do not stop."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import event, text

from memabra import PolicySnapshot, StorageContentionError
from memabra.storage import EpisodeLog, LearnerStore
from memabra.storage import _tx as tx_module
from memabra.storage._learner import START, ReadPosition


def _fail_snapshot_inserts(log: EpisodeLog, times: int) -> list[int]:
    """Make the next ``times`` snapshot inserts fail as a deadlock would (the driver's own error,
    with PostgreSQL's SQLSTATE); returns the count of inserts tried."""
    tried = [0]

    class Deadlock(Exception):
        sqlstate = "40P01"

    def before(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        if statement.lstrip().upper().startswith("INSERT INTO POLICY_SNAPSHOTS"):
            tried[0] += 1
            if tried[0] <= times:
                raise Deadlock("deadlock detected")

    event.listen(log.engine, "before_cursor_execute", before)
    return tried


def test_a_commit_that_meets_a_deadlock_is_retried_whole(log: EpisodeLog) -> None:
    tried = _fail_snapshot_inserts(log, 2)
    store = LearnerStore(log.engine)
    stored = store.commit(PolicySnapshot("p", "p-1", b"m"), previous=START, position=ReadPosition(3, "e"), learned=3)
    assert tried[0] == 3 and stored.status == "active"
    checkpoint = store.checkpoint("p")
    assert checkpoint is not None and (checkpoint.position, checkpoint.learned) == (ReadPosition(3, "e"), 3)
    with log.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM policy_snapshots")).scalar() == 1


def test_a_commit_that_keeps_conflicting_ends_in_a_named_error_and_writes_nothing(
    log: EpisodeLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tx_module, "MAX_ATTEMPTS", 3)
    _fail_snapshot_inserts(log, 99)
    store = LearnerStore(log.engine)
    with pytest.raises(StorageContentionError, match=r"learner commit of policy 'p' kept conflicting .* 3 attempts"):
        store.commit(PolicySnapshot("p", "p-1", b"m"), previous=START, position=ReadPosition(3, "e"), learned=3)
    assert store.checkpoint("p") is None
    with log.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM policy_snapshots")).scalar() == 0


def test_a_real_postgres_deadlock_in_the_commit_is_retried(log: EpisodeLog) -> None:
    if not log.engine.url.get_backend_name().startswith("postgresql"):
        pytest.skip("PostgreSQL's deadlock detector")
    from factories import episode, readable_final_rewards
    from memabra import RewardBreakdown, RewardComponents, RewardWeights

    ep = episode("ann")
    log.log_episode(ep)
    log.put_reward(ep.id, RewardBreakdown(RewardComponents(s=1.0), RewardWeights()), final=True)
    store = LearnerStore(log.engine)
    store.commit(PolicySnapshot("p", "p-0", b"m"), previous=START, position=START, learned=0)
    (final,) = readable_final_rewards(store)
    at_rewards, other_waits = threading.Event(), threading.Event()
    tried = [0]

    def before(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        if statement.lstrip().upper().startswith("UPDATE REWARDS"):
            tried[0] += 1
            if tried[0] == 1:
                at_rewards.set()  # holds learner_state's row; the other transaction holds the reward's
                other_waits.wait(10)

    def other() -> None:
        with log.engine.connect() as conn:
            conn.execute(text("SET deadlock_timeout = '20s'"))  # so the commit's session is the victim
            conn.execute(text("UPDATE rewards SET computed_at = computed_at WHERE episode_id = :e"), {"e": ep.id})
            at_rewards.wait(10)
            threading.Timer(0.5, other_waits.set).start()
            conn.execute(text("UPDATE learner_state SET learned = learned WHERE policy = 'p'"))
            conn.commit()

    event.listen(log.engine, "before_cursor_execute", before)
    worker = threading.Thread(target=other)
    worker.start()
    stored = store.commit(PolicySnapshot("p", "p-1", b"m"), previous=START, position=final.position, learned=1)
    worker.join(30)
    assert tried[0] == 2 and stored.status == "active"
    checkpoint = store.checkpoint("p")
    assert checkpoint is not None and (checkpoint.position, checkpoint.learned) == (final.position, 1)
