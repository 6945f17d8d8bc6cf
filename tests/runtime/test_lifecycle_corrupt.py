"""A promote of a snapshot that does not restore (corrupted bytes, another policy's model under
this policy's name, unusable arguments) must not take serving down: running processes keep
serving what they had, with one clear log line, and a process starting then still starts."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest
from runtime.learning_log import log_final

from logged_world import world
from memabra._learner import Learner, fresh_router
from memabra._records import PolicySnapshot
from memabra._serving import PolicyRuntime
from memabra.router import LinearRouter, Similarity, VWRouter
from memabra.storage import EpisodeLog, LearnerStore, SnapshotAudit


def _learned(log: EpisodeLog) -> str:
    log_final(log, 10)
    learner = Learner(log, lambda: fresh_router("linear"), commit_every=10)
    learner.step()
    learner.close()
    active = LearnerStore(log.engine).active_version("linear")
    assert active is not None
    return active


def _broken(good: PolicySnapshot, how: str) -> PolicySnapshot:
    broken = {
        "truncated": {"model": good.model[: len(good.model) // 2]},
        "vw bytes": {"model": VWRouter(similarity=Similarity(encoder=None)).snapshot().model},
        "arguments": {"learner_args": {"epsilon": "x"}},
    }[how]
    return replace(good, version=f"broken-{how.replace(' ', '-')}", parent=good.version, status="candidate", **broken)


@pytest.mark.parametrize("how", ["truncated", "vw bytes", "arguments"])
def test_a_running_process_keeps_serving_and_says_so_once(
    log: EpisodeLog, lexical: Similarity, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    good = _learned(log)
    runtime = PolicyRuntime(log, LinearRouter(similarity=lexical), learn=False, reload_interval_s=0.0, listen=False)
    try:
        fetched: list[str] = []
        get_snapshot = log.get_snapshot

        def counting(version: str) -> PolicySnapshot:
            fetched.append(version)
            return get_snapshot(version)

        log.get_snapshot = counting  # type: ignore[method-assign]
        bad = _broken(get_snapshot(good), how)
        log.save_snapshot(bad)
        SnapshotAudit(log).promote(bad.version, by="op")
        ctx, cands, _ = world(0)
        with caplog.at_level(logging.ERROR, logger="memabra"):
            for _ in range(5):
                assert runtime.router.choose(ctx, cands).policy_version == good
        said = [r for r in caplog.records if bad.version in r.getMessage()]
        assert len(said) == 1 and "cannot be restored" in said[0].getMessage()
        assert fetched == [bad.version]  # its model bytes are not read again at every interval
        assert runtime.watcher.refused_version == bad.version

        # the operator puts the good one back: it is what this process serves already
        SnapshotAudit(log).promote(good, by="op")
        assert runtime.router.choose(ctx, cands).policy_version == good
        assert runtime.watcher.refused_version == bad.version  # the active is what it serves: nothing to load
    finally:
        log.get_snapshot = get_snapshot  # type: ignore[method-assign]
        runtime.close()


def test_a_process_starting_under_a_broken_active_snapshot_serves_the_learners_last_one(
    log: EpisodeLog, lexical: Similarity, caplog: pytest.LogCaptureFixture
) -> None:
    good = _learned(log)
    bad = _broken(log.get_snapshot(good), "truncated")
    log.save_snapshot(bad)
    SnapshotAudit(log).promote(bad.version, by="op")
    with caplog.at_level(logging.ERROR, logger="memabra"):
        runtime = PolicyRuntime(log, LinearRouter(similarity=lexical), reload_interval_s=0.0, listen=False)
    try:
        assert runtime.router.policy_version == good
        assert any(bad.version in r.getMessage() and f"serving {good}" in r.getMessage() for r in caplog.records), (
            caplog.text
        )
        ctx, cands, _ = world(1)
        assert runtime.router.choose(ctx, cands).policy_version == good
        runtime.step()  # the in-process learner takes the lease and keeps its own line as candidates
        assert LearnerStore(log.engine).active_version("linear") == bad.version
    finally:
        runtime.close()
