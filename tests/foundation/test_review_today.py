"""``memabra db backup`` / ``db restore`` where the file system or another process gets in the way,
and restores of files this memabra cannot run on (docs/production.md, "Backups and restores")."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from foundation.test_backup_restore import _episode_ids, migrated_sqlite
from runtime.learning_log import log_final
from typer.testing import CliRunner

from factories import episode
from memabra._cli import app
from memabra._errors import ConfigError
from memabra._learner import Learner
from memabra._replay import replay
from memabra.router import LinearRouter, Similarity, learned_model
from memabra.storage import EpisodeLog, LearnerStore, _backup, upgrade
from memabra.storage._backup import backup_sqlite, restore_sqlite

runner = CliRunner(env={"COLUMNS": "200"})


@pytest.fixture(name="sqlite_url")
def sqlite_url_fixture(tmp_path: Path) -> str:
    return migrated_sqlite(tmp_path)


# A file-size limit stands in for a full disk: the copy's writes fail part way, as on ENOSPC.
_CLI_UNDER_A_SIZE_LIMIT = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))
from memabra._cli._app import main
sys.argv = ["memabra", "db", *sys.argv[1:]]
main()
"""


def _grow(path: Path) -> None:
    """A log of about 2 MB: more than the size limit lets the copy write."""
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE padding (x TEXT)")
        conn.executemany("INSERT INTO padding VALUES (?)", [("x" * 1000,)] * 2000)


def _cli_under_a_size_limit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _CLI_UNDER_A_SIZE_LIMIT, *args], capture_output=True, text=True, timeout=120
    )


def test_a_backup_that_runs_out_of_disk_says_so_and_leaves_no_file(sqlite_url: str, tmp_path: Path) -> None:
    _grow(tmp_path / "memabra.db")
    out = tmp_path / "backups" / "nightly.db"
    out.parent.mkdir()
    done = _cli_under_a_size_limit("backup", "--db", sqlite_url, "--out", str(out))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "nightly.db" in done.stderr, done.stderr
    # neither the copy, nor the temporary copy, nor its journal is left behind
    assert list(out.parent.iterdir()) == []


def test_a_restore_that_runs_out_of_disk_says_so_and_leaves_no_file(sqlite_url: str, tmp_path: Path) -> None:
    _grow(tmp_path / "memabra.db")
    backup = backup_sqlite(sqlite_url, tmp_path / "backup.db")
    target = tmp_path / "restored"
    target.mkdir()
    done = _cli_under_a_size_limit("restore", "--from", str(backup.path), "--db", f"sqlite:///{target / 'm.db'}")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "m.db" in done.stderr, done.stderr
    assert list(target.iterdir()) == []  # no empty or half-written log where there was none


def _gives_up_while_locked(holder: sqlite3.Connection, work: Callable[[], object]) -> None:
    """``work()`` on a thread while ``holder`` keeps its transaction open: it must fail within the
    (shortened) busy timeout with a ConfigError saying the log is locked, not wait for ever."""
    outcome: list[BaseException | object] = []

    def run() -> None:
        try:
            outcome.append(work())
        except BaseException as exc:  # noqa: BLE001 - asserted below
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    started = time.monotonic()
    worker.start()
    worker.join(10)
    waited = time.monotonic() - started
    holder.execute("ROLLBACK")
    holder.close()
    worker.join(10)
    assert waited < 10, "it waited on the lock for ever, saying nothing"
    assert len(outcome) == 1 and isinstance(outcome[0], ConfigError), outcome
    assert "locked" in str(outcome[0])


def test_a_restore_gives_up_on_a_write_lock_held_past_the_busy_timeout(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with EpisodeLog(sqlite_url) as log:
        backup = backup_sqlite(sqlite_url, tmp_path / "backup.db")
        kept = episode("u1")
        log.log_episode(kept)
    monkeypatch.setattr(_backup, "SQLITE_BUSY_TIMEOUT_S", 0.5)
    # a process (a stuck agent, an sqlite3 shell) holding a write transaction open
    holder = sqlite3.connect(tmp_path / "memabra.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    _gives_up_while_locked(holder, lambda: restore_sqlite(backup.path, sqlite_url))
    assert _episode_ids(tmp_path / "memabra.db") == {kept.id}  # nothing was restored


def test_a_backup_gives_up_on_a_lock_that_blocks_its_read(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log_file = tmp_path / "memabra.db"
    with sqlite3.connect(log_file) as conn:  # a log in rollback-journal mode: writers block readers
        conn.execute("PRAGMA journal_mode=DELETE")
    monkeypatch.setattr(_backup, "SQLITE_BUSY_TIMEOUT_S", 0.5)
    holder = sqlite3.connect(log_file, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    _gives_up_while_locked(holder, lambda: backup_sqlite(sqlite_url, tmp_path / "backup.db"))
    assert [p.name for p in tmp_path.iterdir() if "backup" in p.name] == []


def _at_revision(source: Path, copy: Path, revision: str, *, marker: str | None) -> Path:
    shutil.copyfile(source, copy)
    with sqlite3.connect(copy) as conn:
        conn.execute("UPDATE alembic_version SET version_num = ?", (revision,))
        if marker is None:
            conn.execute("DROP TABLE schema_compatibility")
        else:
            conn.execute("UPDATE schema_compatibility SET oldest_compatible_revision = ?", (marker,))
    return copy


def test_a_restore_refuses_a_schema_this_memabra_cannot_run_on(sqlite_url: str, tmp_path: Path) -> None:
    with EpisodeLog(sqlite_url) as log:
        backup = backup_sqlite(sqlite_url, tmp_path / "backup.db")
        kept = episode("u1")
        log.log_episode(kept)
    # another application's SQLite file that happens to use Alembic too
    foreign = tmp_path / "other-app.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
        conn.execute("INSERT INTO alembic_version VALUES ('3f2a9c81d7e4')")
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
    # a newer memabra's backup whose migrations broke code as old as this one
    newer = _at_revision(backup.path, tmp_path / "newer.db", "9001", marker="9001")
    for refused in (foreign, newer):
        with pytest.raises(ConfigError, match="does not know"):
            restore_sqlite(refused, sqlite_url)
        assert _episode_ids(tmp_path / "memabra.db") == {kept.id}, f"{refused.name} replaced the log"

    # a newer memabra's backup that still accepts this memabra's code is restored (with a warning
    # at every open, as any such log)
    compatible = _at_revision(backup.path, tmp_path / "compatible.db", "9001", marker=backup.revision)
    assert restore_sqlite(compatible, sqlite_url).revision == "9001"
    assert _episode_ids(tmp_path / "memabra.db") == set()


def test_a_restore_of_an_older_memabra_backup_says_to_upgrade_first(tmp_path: Path) -> None:
    older_url = f"sqlite:///{tmp_path / 'older.db'}"
    upgrade(older_url, revision="0016")
    backup = backup_sqlite(older_url, tmp_path / "backup.db")
    assert backup.revision == "0016"
    target = f"sqlite:///{tmp_path / 'memabra.db'}"
    upgrade(target)
    result = runner.invoke(app, ["db", "restore", "--from", str(backup.path), "--db", target, "--yes"])
    assert result.exit_code == 0, result.output
    # every agent started as the message said would refuse the log: it is older than their code
    assert f"memabra db upgrade --db {target}" in " ".join(result.output.split())


def test_a_learner_that_read_on_after_a_restore_never_commits_the_rewards_the_log_lost(
    sqlite_url: str, tmp_path: Path
) -> None:
    lexical = Similarity(encoder=None)
    with EpisodeLog(sqlite_url) as log:
        log_final(log, 10)
        learner = Learner(log, lambda: LinearRouter(similarity=lexical), commit_every=10_000, commit_interval_s=1e9)
        learner.step()
        learner.commit(force=True)
        backup = backup_sqlite(sqlite_url, tmp_path / "backup.db")
        log_final(log, 5, start=10)
        learner.step()  # five rewards learned in memory, not committed, that the restore loses
        assert learner.pending == 5

        restore_sqlite(backup.path, sqlite_url)
        log_final(log, 8, start=50)
        # the restored log numbers its new rewards from the backup's counter on: the learner's
        # next read starts after the lost rewards' numbers, and its last read is a reward the log has
        learner.step()
        learner.close()  # a graceful stop commits
        checkpoint = LearnerStore(log.engine).checkpoint("linear")
        assert checkpoint is not None
        assert checkpoint.learned == 10, "committed a model holding rewards the log lost, skipping some it has"

        restarted = Learner(log, lambda: LinearRouter(similarity=lexical), commit_every=10_000)
        restarted.step()
        restarted.close()
        checkpoint = LearnerStore(log.engine).checkpoint("linear")
        assert checkpoint is not None and checkpoint.learned == 18
        replayed, rewards = replay(log, "linear")
        assert rewards == 18
        assert learned_model(log.get_snapshot(checkpoint.snapshot_version or "")) == learned_model(replayed.snapshot())


def test_a_learner_whose_read_rewards_are_deleted_before_its_commit_learns_the_rest_once(sqlite_url: str) -> None:
    # no restore: an episode deleted (erasure, `episodes delete --include-unlearned`) between the
    # learner's read and its commit refuses that commit once; the next lease holder learns the rest
    lexical = Similarity(encoder=None)
    with EpisodeLog(sqlite_url) as log:
        ids = log_final(log, 6)
        learner = Learner(log, lambda: LinearRouter(similarity=lexical), commit_every=10_000, commit_interval_s=1e9)
        learner.step()
        assert learner.pending == 6
        log.delete_episodes([ids[2]], include_unlearned=True)
        assert learner.commit() is None  # refused: the model holds a reward the log no longer has
        learner.step()  # takes the lease again, from the last commit
        assert learner.commit() is not None
        learner.close()
        checkpoint = LearnerStore(log.engine).checkpoint("linear")
        assert checkpoint is not None and checkpoint.learned == 5
        replayed, rewards = replay(log, "linear")
        assert rewards == 5
        assert learned_model(log.get_snapshot(checkpoint.snapshot_version or "")) == learned_model(replayed.snapshot())
