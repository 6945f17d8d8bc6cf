"""A promote reaching the learner's own process while a turn's learner step is handing serving a
fresh copy of the learner: the promoted snapshot must stay (on PostgreSQL the NOTIFY reload runs on
its own thread, between the step's check and its swap)."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest
from runtime.learning_log import log_final

from logged_world import world
from memabra._serving import PolicyRuntime
from memabra.router import LinearRouter, Router, Similarity
from memabra.storage import EpisodeLog, LearnerStore, SnapshotAudit


def test_a_reload_during_the_learner_step_is_not_undone(
    log: EpisodeLog, lexical: Similarity, caplog: pytest.LogCaptureFixture
) -> None:
    log_final(log, 10)
    runtime = PolicyRuntime(
        log,
        LinearRouter(similarity=lexical),
        commit_every=1000,
        commit_interval_s=1e9,
        reload_interval_s=1e9,
        listen=False,
    )
    try:
        runtime.step()
        published = runtime.commit()
        assert LearnerStore(log.engine).active_version("linear") == published
        other = replace(
            LinearRouter(similarity=lexical, epsilon=0.3).snapshot(),
            version="nightly-1",
            parent=published,
            status="candidate",
        )
        log.save_snapshot(other)

        with caplog.at_level(logging.INFO, logger="memabra"):
            log_final(log, 3, start=10)
            runtime.step()  # follows the learner: a fresher copy of the same line, said at DEBUG only
        assert "serving the live learner" not in caplog.text

        live_router = runtime.learner.live_router  # type: ignore[union-attr]

        def promote_meanwhile(*, similarity: Similarity | None = None) -> Router:
            # the operator's promote and the NOTIFY reload land while the step builds its copy
            SnapshotAudit(log).promote("nightly-1", by="op")
            assert runtime.watcher.refresh(force=True)
            return live_router(similarity=similarity)

        runtime.learner.live_router = promote_meanwhile  # type: ignore[union-attr,method-assign]
        log_final(log, 5, start=13)
        status = runtime.step()
        assert status is not None and status.learned == 5 and status.committed is None
        assert runtime.watcher.loaded_version == "nightly-1"
        ctx, cands, _ = world(0)
        assert runtime.router.choose(ctx, cands).policy_version == "nightly-1"
    finally:
        runtime.close()
