"""A learner that runs across ``memabra db restore`` (docs/production.md, "Backups and restores")
and finds nothing to commit: its read position is past the restored log's newest reward, so no
commit comes to be refused. It must still notice that the log's checkpoint is no longer its own and
resume from the restored one, rather than keep (and, in-process, serve) the model the restore lost
and skip the rewards logged after the restore, which are numbered again from the backup's counter."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from runtime.learning_log import log_final
from sqlalchemy import make_url

from memabra import _learner, _serving
from memabra._learner import Learner
from memabra._replay import replay
from memabra._serving import PolicyRuntime
from memabra.router import LinearRouter, Similarity, learned_model
from memabra.storage import EpisodeLog, LearnerStore, resolve_url, upgrade
from memabra.storage._backup import backup_sqlite, restore_sqlite
from pg_schema import pg_schema


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


@pytest.mark.skipif(not os.environ.get("MEMABRA_TEST_DATABASE_URL"), reason="pg_dump needs a PostgreSQL server")
@pytest.mark.skipif(not (shutil.which("pg_dump") and shutil.which("pg_restore")), reason="no pg_dump / pg_restore")
def test_pg_restore_in_place_under_a_running_learner(tmp_path: Path) -> None:
    """docs/production.md's PostgreSQL restore (`pg_dump --schema`, then `pg_restore --clean
    --if-exists --single-transaction` over the live schema) while a learner holds its lease and
    pooled connections on it: the restore is not blocked by them, the log reads as the dump, and the
    learner resumes from the restored checkpoint, its snapshots equal to a replay of the restored log."""
    base = resolve_url(os.environ["MEMABRA_TEST_DATABASE_URL"])
    libpq = make_url(base).set(drivername="postgresql").render_as_string(hide_password=False)
    with pg_schema(base, pooled=False) as url:
        schema = parse_qs(urlsplit(url).query)["options"][0].removeprefix("-csearch_path=")
        upgrade(url)
        dump = tmp_path / "memabra.dump"
        with EpisodeLog(url) as log:
            log_final(log, 6)
            learner = Learner(log, lambda: LinearRouter(similarity=Similarity(encoder=None)), commit_every=1)
            try:
                learner.step()
                at_backup = LearnerStore(log.engine).checkpoint("linear")
                subprocess.run(
                    ["pg_dump", "--format=custom", f"--schema={schema}", f"--file={dump}", libpq], check=True
                )
                log_final(log, 5, start=6)
                assert learner.step().committed is not None
                assert log.count_episodes() == 11
                subprocess.run(
                    ["pg_restore", "--clean", "--if-exists", "--single-transaction", f"--dbname={libpq}", str(dump)],
                    check=True,
                    timeout=120,
                )
                assert log.count_episodes() == 6
                restored = LearnerStore(log.engine).checkpoint("linear")
                assert restored is not None and at_backup is not None and restored.learned == at_backup.learned == 6
                log_final(log, 2, start=40)
                for _ in range(3):  # one step stands by (it drops its model and lease), the next resumes
                    if learner.step().learned:
                        break
                assert learner.learned == 8 and learner.pending == 0
            finally:
                learner.close()
            replayed, rewards = replay(log, "linear")
            checkpoint = LearnerStore(log.engine).checkpoint("linear")
            assert rewards == 8 and checkpoint is not None and checkpoint.learned == 8
            assert learned_model(log.get_snapshot(checkpoint.snapshot_version or "")) == learned_model(
                replayed.snapshot()
            )
