"""A promote that lands while a learner commits is never lost: the transactions that change which
snapshot of a policy is active run one at a time (PostgreSQL's READ COMMITTED let a learner's
commit retire a promote that committed between its read of the active snapshot and its retire)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from runtime.learning_log import log_final
from sqlalchemy import event

from factories import readable_final_rewards
from memabra._learner import Learner, fresh_router
from memabra.storage import EpisodeLog, LearnerStore, SnapshotAudit


@pytest.mark.postgres
def test_a_promote_during_a_learner_commit_is_not_retired_by_it(log: EpisodeLog, migrated_url: str) -> None:
    if log.engine.dialect.name != "postgresql":
        pytest.skip("PostgreSQL only: SQLite runs one writer at a time")
    log_final(log, 10)
    # on PostgreSQL a reward is readable once every older transaction on the server ended (another
    # test's may be open): the learner must find every one, or it commits nothing to race with
    readable_final_rewards(LearnerStore(log.engine), at_least=10)
    learner = Learner(log, lambda: fresh_router("linear"), commit_every=5)
    learner.step()  # +5, then +10 active
    target = log.list_snapshots("linear")[0].version
    log_final(log, 5, start=10)
    readable_final_rewards(LearnerStore(log.engine), at_least=15)
    operator: list[threading.Thread] = []

    def promote() -> None:
        with EpisodeLog(migrated_url) as other:
            SnapshotAudit(other).promote(target, by="op")

    def just_before_the_retire(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.lstrip().upper().startswith("UPDATE POLICY_SNAPSHOTS") and not operator:
            operator.append(threading.Thread(target=promote))
            operator[0].start()
            operator[0].join(1.0)  # it waits for the commit: it used to land here, then be retired

    event.listen(log.engine, "before_cursor_execute", just_before_the_retire)
    try:
        learner.step()
    finally:
        event.remove(log.engine, "before_cursor_execute", just_before_the_retire)
    operator[0].join(10)
    assert not operator[0].is_alive()
    assert LearnerStore(log.engine).active_version("linear") == target
    assert [s.version for s in log.list_snapshots("linear") if s.status == "active"] == [target]
    learner.close()
