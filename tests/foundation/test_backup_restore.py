"""Backing up the episode log and restoring it (docs/production.md, "Backups and restores").

SQLite: a plain ``cp`` of the live WAL-mode file misses what sits in ``-wal``; ``memabra db
backup`` copies through SQLite's online backup API while agents keep writing. PostgreSQL: the
command says to use pg_dump. Then what a restore to an earlier point does to the processes still
running: pods, the learner, feedback for episodes the log no longer has."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from runtime.learning_log import log_final
from typer.testing import CliRunner

from factories import episode
from memabra import Feedback
from memabra._cli import app
from memabra._errors import ConfigError, UnknownEpisodeError
from memabra._feedback import RewardService
from memabra._replay import replay
from memabra._serving import PolicyRuntime
from memabra.router import LinearRouter, Similarity, learned_model
from memabra.storage import EpisodeLog, LearnerStore, current_revision, head_revision, make_engine, upgrade
from memabra.storage._backup import backup_sqlite, restore_sqlite

runner = CliRunner(env={"COLUMNS": "200"})


def migrated_sqlite(tmp_path: Path) -> str:
    """A migrated SQLite log, memabra.db in ``tmp_path``."""
    url = f"sqlite:///{tmp_path / 'memabra.db'}"
    upgrade(url)
    return url


@pytest.fixture(name="sqlite_url")
def sqlite_url_fixture(tmp_path: Path) -> str:
    return migrated_sqlite(tmp_path)


def _episode_ids(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {row[0] for row in conn.execute("SELECT id FROM episodes")}


def test_a_plain_copy_of_the_live_file_misses_what_the_wal_holds(sqlite_url: str, tmp_path: Path) -> None:
    with EpisodeLog(sqlite_url) as log:
        logged = [episode(f"u{i}") for i in range(5)]
        log.log_episodes(logged)
        copied = tmp_path / "cp.db"
        shutil.copyfile(tmp_path / "memabra.db", copied)  # what `cp memabra.db` does while agents run
        assert (tmp_path / "memabra.db-wal").stat().st_size > 0
        assert _episode_ids(copied) == set()  # the five committed episodes sit in memabra.db-wal

        backup = backup_sqlite(sqlite_url, tmp_path / "backup.db")
    assert _episode_ids(backup.path) == {e.id for e in logged}
    assert backup.episodes == 5
    assert not (tmp_path / "backup.db-wal").exists()


def test_the_backup_taken_while_writers_run_holds_every_earlier_episode(sqlite_url: str, tmp_path: Path) -> None:
    committed: list[str] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def write(log: EpisodeLog, user: str) -> None:
        n = 0
        try:
            while not stop.is_set():
                record = episode(f"{user}-{n}")
                log.log_episode(record)
                committed.append(record.id)
                n += 1
        except BaseException as exc:  # noqa: BLE001 - the test fails on it below
            errors.append(exc)

    with EpisodeLog(sqlite_url) as one, EpisodeLog(sqlite_url) as two:
        writers = [threading.Thread(target=write, args=(log, user)) for log, user in ((one, "a"), (two, "b"))]
        for writer in writers:
            writer.start()
        try:
            while len(committed) < 40:
                stop.wait(0.01)
            before = set(committed)  # committed before the backup starts
            backup = backup_sqlite(sqlite_url, tmp_path / "backup.db")
            during = len(committed)
            while len(committed) < during + 10:  # the writers kept going after the copy
                stop.wait(0.01)
        finally:
            stop.set()
            for writer in writers:
                writer.join()
    assert not errors
    in_copy = _episode_ids(backup.path)
    assert before <= in_copy
    assert in_copy <= set(committed)
    assert backup.episodes == len(in_copy)

    engine = make_engine(f"sqlite:///{backup.path}")
    try:
        assert current_revision(engine) == head_revision() == backup.revision
    finally:
        engine.dispose()
    status = runner.invoke(app, ["status", "--db", f"sqlite:///{backup.path}", "--json", str(tmp_path / "s.json")])
    assert status.exit_code == 0, status.output
    report = json.loads((tmp_path / "s.json").read_text())
    assert report["healthy"] and report["status"]["episodes"] == len(in_copy)


def test_the_cli_backs_up_sqlite_and_refuses_to_overwrite(sqlite_url: str, tmp_path: Path) -> None:
    with EpisodeLog(sqlite_url) as log:
        log.log_episode(episode())
        out = tmp_path / "nightly.db"
        first = runner.invoke(app, ["db", "backup", "--db", sqlite_url, "--out", str(out)])
        assert first.exit_code == 0, first.output
        assert "1 episodes" in first.output and head_revision() in first.output
        again = runner.invoke(app, ["db", "backup", "--db", sqlite_url, "--out", str(out)])
        assert again.exit_code == 1
        assert "already exists" in again.output and "--overwrite" in again.output
        log.log_episode(episode("u2"))
        replaced = runner.invoke(app, ["db", "backup", "--db", sqlite_url, "--out", str(out), "--overwrite"])
        assert replaced.exit_code == 0, replaced.output
    assert len(_episode_ids(out)) == 2
    assert not list(tmp_path.glob(".*partial"))
    itself = runner.invoke(app, ["db", "backup", "--db", sqlite_url, "--out", str(tmp_path / "memabra.db")])
    assert itself.exit_code == 1 and "the database itself" in itself.output


def test_postgresql_is_backed_up_with_pg_dump(tmp_path: Path) -> None:
    # no server is reached: the URL alone says which tool backs it up
    result = runner.invoke(
        app, ["db", "backup", "--db", "postgresql+psycopg://u@db.invalid/memabra", "--out", str(tmp_path / "x")]
    )
    assert result.exit_code == 1
    assert "pg_dump" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "x").exists()
    with pytest.raises(ConfigError, match="pg_dump"):
        backup_sqlite("postgresql+psycopg://u@db.invalid/memabra", tmp_path / "x")


# ---------------------------------------------------------------------------------- restores


@pytest.fixture
def lexical() -> Similarity:
    return Similarity(encoder=None)


def _runtime(log: EpisodeLog, lexical: Similarity, *, learn: bool = True) -> PolicyRuntime:
    # no polling and no commits of their own: each test says when a pod reloads or a learner commits
    return PolicyRuntime(
        log,
        LinearRouter(similarity=lexical),
        learn=learn,
        commit_every=10_000,
        commit_interval_s=1e9,
        reload_interval_s=1e9,
        listen=False,
    )


def test_a_pod_reloads_a_new_snapshot_that_reuses_a_version_the_restore_lost(
    sqlite_url: str, tmp_path: Path, lexical: Similarity
) -> None:
    with EpisodeLog(sqlite_url) as log:
        log_final(log, 10)
        learner = _runtime(log, lexical)
        learner.step()
        first = learner.commit()
        backup = backup_sqlite(sqlite_url, tmp_path / "backup.db")
        log_final(log, 10, start=10)
        learner.step()
        lost = learner.commit()
        learner.close()
        pod = _runtime(log, lexical, learn=False)
        try:
            assert pod.watcher.loaded_version == lost

            restore_sqlite(backup.path, sqlite_url)
            assert LearnerStore(log.engine).active_version("linear") == first
            # the learner restarts from the restored checkpoint and learns 10 other rewards: its
            # next snapshot is named as the lost one was, with another model in it
            log_final(log, 10, start=100)
            restarted = _runtime(log, lexical)
            restarted.step()
            assert restarted.commit() == lost
            assert not restarted.watcher.refresh(force=True)  # its own snapshot: still the live learner
            restarted.close()
            relearned = log.get_snapshot(lost)

            assert pod.watcher.refresh(force=True), "the pod kept serving the model the restore lost"
            assert learned_model(pod.router.snapshot()) == learned_model(relearned)
            assert not pod.watcher.refresh(force=True)  # the same snapshot is not loaded twice
        finally:
            pod.close()


def test_a_learner_running_across_a_restore_never_commits_rewards_the_log_lost(
    sqlite_url: str, tmp_path: Path, lexical: Similarity
) -> None:
    with EpisodeLog(sqlite_url) as log:
        log_final(log, 10)
        learner = _runtime(log, lexical)
        learner.step()
        learner.commit()
        backup = backup_sqlite(sqlite_url, tmp_path / "backup.db")
        log_final(log, 5, start=10)
        assert learner.step() is not None  # five rewards learned in memory, not committed

        restore_sqlite(backup.path, sqlite_url)
        after = log_final(log, 5, start=50)
        learner.close()  # a graceful stop commits what it learned: rewards the log no longer has
        store = LearnerStore(log.engine)
        checkpoint = store.checkpoint("linear")
        assert checkpoint is not None and checkpoint.learned == 10, "committed a lineage the log lost"

        restarted = _runtime(log, lexical)
        try:
            restarted.step()
            restarted.commit()
        finally:
            restarted.close()
        checkpoint = store.checkpoint("linear")
        assert checkpoint is not None and checkpoint.learned == 15
        assert checkpoint.position.episode_id in after
        replayed, rewards = replay(log, "linear")
        assert rewards == 15
        assert learned_model(log.get_snapshot(checkpoint.snapshot_version or "")) == learned_model(replayed.snapshot())


def test_feedback_for_an_episode_the_restore_lost_is_unknown(sqlite_url: str, tmp_path: Path) -> None:
    with EpisodeLog(sqlite_url) as log:
        kept = episode("u1")
        log.log_episode(kept)
        backup = backup_sqlite(sqlite_url, tmp_path / "backup.db")
        lost = episode("u2")
        log.log_episode(lost)
        key = "retried-by-the-client"
        log.add_feedback(Feedback(lost.id, "explicit", "app", {"correct": True}, idempotency_key=key))

        restore_sqlite(backup.path, sqlite_url)
        with pytest.raises(UnknownEpisodeError, match=lost.id):
            RewardService(log).post_feedback(Feedback(lost.id, "explicit", "app", {"correct": True}))
        # the key the lost feedback used is free again: the client's retry is stored, not dropped
        receipt = log.add_feedback(Feedback(kept.id, "explicit", "app", {"correct": True}, idempotency_key=key))
        assert receipt.status != "duplicate"
        assert len(log.feedback_for(kept.id)) == 1
        again = episode("u2")  # ids are random: a new episode never takes a lost one's id
        log.log_episode(again)
        assert again.id != lost.id and log.count_episodes() == 2


def test_restore_supersedes_a_killed_process_wal_that_cp_would_replay(sqlite_url: str, tmp_path: Path) -> None:
    live = tmp_path / "memabra.db"
    with EpisodeLog(sqlite_url) as log:
        log.log_episodes([episode(f"u{i}") for i in range(3)])
    backup = backup_sqlite(sqlite_url, tmp_path / "backup.db")
    kept = _episode_ids(backup.path)
    killed = (
        "import os, sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parents[1])!r})\n"
        "from factories import episode\n"
        "from memabra.storage import EpisodeLog\n"
        f"log = EpisodeLog({sqlite_url!r})\n"
        "log.log_episodes([episode(f'v{i}') for i in range(20)])\n"
        "os._exit(0)\n"  # killed: no checkpoint, its -wal stays beside the log
    )
    subprocess.run([sys.executable, "-c", killed], check=True)
    assert (tmp_path / "memabra.db-wal").stat().st_size > 0
    wal = (tmp_path / "memabra.db-wal").read_bytes()

    shutil.copyfile(backup.path, live)  # `cp backup.db memabra.db`
    assert len(_episode_ids(live)) == 23  # the killed process's writes came back with the "restore"

    shutil.copyfile(backup.path, live)
    (tmp_path / "memabra.db-wal").write_bytes(wal)  # the same state again, restored the right way
    refused = runner.invoke(app, ["db", "restore", "--from", str(backup.path), "--db", sqlite_url], input="n\n")
    assert refused.exit_code == 1 and "nothing was changed" in refused.output
    restored = runner.invoke(app, ["db", "restore", "--from", str(backup.path), "--db", sqlite_url, "--yes"])
    assert restored.exit_code == 0, restored.output
    assert "3 episodes" in restored.output
    assert _episode_ids(live) == kept
    with EpisodeLog(sqlite_url) as log:
        assert log.count_episodes() == 3
    pg = runner.invoke(
        app, ["db", "restore", "--from", str(backup.path), "--db", "postgresql+psycopg://u@db.invalid/m"]
    )
    assert pg.exit_code == 1 and "pg_restore" in pg.output


def test_the_backup_keeps_the_log_file_permissions_and_no_lease(sqlite_url: str, tmp_path: Path) -> None:
    (tmp_path / "memabra.db").chmod(0o600)
    with EpisodeLog(sqlite_url) as log:
        log_final(log, 2)
        runtime = PolicyRuntime(log, LinearRouter(similarity=Similarity(encoder=None)), listen=False)
        try:
            runtime.step()  # holds the learner lease
            backup = backup_sqlite(sqlite_url, tmp_path / "backup.db")
        finally:
            runtime.close()
    assert backup.path.stat().st_mode & 0o777 == 0o600
    with sqlite3.connect(backup.path) as conn:
        assert conn.execute("SELECT count(*) FROM learner_leases").fetchone()[0] == 0
    not_a_log = tmp_path / "notes.txt"
    not_a_log.write_text("hello")
    with pytest.raises(ConfigError, match="not a SQLite database"):
        restore_sqlite(not_a_log, sqlite_url)
