"""A learner that runs across ``memabra db restore`` (docs/production.md, "Backups and restores")
and finds nothing to commit: its read position is past the restored log's newest reward, so no
commit comes to be refused. It must still notice that the log's checkpoint is no longer its own and
resume from the restored one, rather than keep (and, in-process, serve) the model the restore lost
and skip the rewards logged after the restore, which are numbered again from the backup's counter."""

from __future__ import annotations

from pathlib import Path

import pytest
from runtime.learning_log import log_final

from memabra import _learner, _serving
from memabra._learner import Learner
from memabra._replay import replay
from memabra._serving import PolicyRuntime
from memabra.router import LinearRouter, Similarity, learned_model
from memabra.storage import EpisodeLog, LearnerStore, upgrade
from memabra.storage._backup import backup_sqlite, restore_sqlite


@pytest.fixture(name="sqlite_url")
def sqlite_url_fixture(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'memabra.db'}"
    upgrade(url)
    return url


@pytest.fixture(autouse=True)
def _no_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    # every step looks at the checkpoint, and a runtime that stood by takes the lease again at once
    monkeypatch.setattr(_learner, "CHECKPOINT_RECHECK_S", 0.0)
    monkeypatch.setattr(_serving, "LEASE_RETRY_S", 0.0)


def _runtime(log: EpisodeLog) -> PolicyRuntime:
    # no polling and no commits of its own: the test says when the learner commits
    return PolicyRuntime(
        log,
        LinearRouter(similarity=Similarity(encoder=None)),
        commit_every=10_000,
        commit_interval_s=1e9,
        reload_interval_s=1e9,
        listen=False,
    )


def test_an_in_process_learner_past_the_restored_log_serves_and_learns_from_the_restored_checkpoint(
    sqlite_url: str, tmp_path: Path
) -> None:
    with EpisodeLog(sqlite_url) as log:
        log_final(log, 10)
        runtime = _runtime(log)
        try:
            runtime.step()
            first = runtime.commit()
            backup = backup_sqlite(sqlite_url, tmp_path / "backup.db")
            log_final(log, 10, start=10)
            runtime.step()
            runtime.commit()  # committed past the backup: nothing left to commit

            restore_sqlite(backup.path, sqlite_url)
            for _ in range(3):
                runtime.step()
            restored = learned_model(log.get_snapshot(first))
            assert learned_model(runtime.router.snapshot()) == restored, "serves the model the restore lost"

            # numbered from the backup's counter, so behind the position the learner had read to
            after = log_final(log, 3, start=50)
            runtime.step()
            runtime.commit()
        finally:
            runtime.close()
        checkpoint = LearnerStore(log.engine).checkpoint("linear")
        assert checkpoint is not None and checkpoint.learned == 13, "the rewards logged after the restore were skipped"
        assert checkpoint.position.episode_id == after[-1]
        replayed, rewards = replay(log, "linear")
        assert rewards == 13
        assert learned_model(log.get_snapshot(checkpoint.snapshot_version or "")) == learned_model(replayed.snapshot())


def test_the_learner_process_resumes_from_a_restored_checkpoint_with_nothing_to_commit(
    sqlite_url: str, tmp_path: Path
) -> None:
    with EpisodeLog(sqlite_url) as log:
        log_final(log, 4)
        learner = Learner(log, lambda: LinearRouter(similarity=Similarity(encoder=None)), commit_every=1)
        try:
            learner.step()
            backup = backup_sqlite(sqlite_url, tmp_path / "backup.db")
            log_final(log, 4, start=4)
            assert learner.step().committed is not None
            restore_sqlite(backup.path, sqlite_url)
            log_final(log, 2, start=40)
            for _ in range(3):  # one step stands by (it drops the lease), the next resumes
                if learner.step().learned:
                    break
            assert learner.learned == 6 and learner.pending == 0
        finally:
            learner.close()
        replayed, rewards = replay(log, "linear")
        checkpoint = LearnerStore(log.engine).checkpoint("linear")
        assert rewards == 6 and checkpoint is not None and checkpoint.learned == 6
        assert learned_model(log.get_snapshot(checkpoint.snapshot_version or "")) == learned_model(replayed.snapshot())
