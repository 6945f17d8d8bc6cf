"""What the command line says when a new user gets something wrong, on both databases: one line
that names the problem and how to fix it, never a traceback, and nothing changed."""

from __future__ import annotations

import re
import shlex
import sqlite3
from pathlib import Path

import pytest
from click.testing import Result
from sqlalchemy import text
from typer.testing import CliRunner

from factories import episode
from memabra import CandidateKind, MemoryQuality, RegistryItem, SQLMemory
from memabra._cli import app
from memabra._feedback import RewardService
from memabra.storage import EpisodeLog

runner = CliRunner(env={"COLUMNS": "200"})


def _one_line(result: Result) -> str:
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    return " ".join(result.output.replace("│", " ").split())  # a usage error's box rejoined


# ------------------------------------------------------------------------ erase --checkpointer


def _ann_with_a_thread(log: EpisodeLog) -> None:
    log.log_episodes([episode("ann", thread_id="ann-1"), episode("bob", thread_id="bob-1")])
    SQLMemory(log).remember("ann", "I live in Lyon")


def test_an_unreachable_postgres_checkpointer_is_one_line_and_erases_nothing(migrated_url: str) -> None:
    with EpisodeLog(migrated_url) as log:
        _ann_with_a_thread(log)
    closed = "postgresql://agent:s3cret@127.0.0.1:1/checkpoints?connect_timeout=2"
    result = runner.invoke(app, ["erase", "--user", "ann", "--checkpointer", closed, "--db", migrated_url])
    message = _one_line(result)
    assert result.exit_code == 1, result.output
    assert message.startswith(
        "error: --checkpointer: cannot connect to the checkpointer at postgresql://agent:***@127.0.0.1:1/"
    )
    assert "refused" in message.lower() and "s3cret" not in message
    with EpisodeLog(migrated_url) as log:
        assert log.count_episodes() == 2 and log.deletion_history() == []  # no run was even started
        assert len(SQLMemory(log).list("ann")) == 1


def test_a_sqlite_checkpointer_that_is_no_database_is_refused_before_anything_goes(
    migrated_url: str, tmp_path: Path
) -> None:
    with EpisodeLog(migrated_url) as log:
        _ann_with_a_thread(log)
    garbage = tmp_path / "checkpoints.db"
    garbage.write_text("not a database\n" * 100)
    result = runner.invoke(
        app, ["erase", "--user", "ann", "--checkpointer", f"sqlite:///{garbage}", "--db", migrated_url]
    )
    assert result.exit_code == 1, result.output
    assert "cannot open the checkpointer at" in _one_line(result) and "not a database" in result.output
    with EpisodeLog(migrated_url) as log:
        assert log.count_episodes() == 2 and log.deletion_history() == []


def test_a_checkpointer_failing_part_way_is_one_line_and_leaves_the_run_unfinished(
    migrated_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langgraph.checkpoint.sqlite import SqliteSaver

    with EpisodeLog(migrated_url) as log:
        _ann_with_a_thread(log)
    checkpoints = tmp_path / "checkpoints.db"
    with sqlite3.connect(checkpoints) as conn:
        conn.execute("CREATE TABLE placeholder (x)")
    conn.close()

    def broken(self: SqliteSaver, thread_id: str) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(SqliteSaver, "delete_thread", broken)
    args = ["erase", "--user", "ann", "--checkpointer", f"sqlite:///{checkpoints}", "--db", migrated_url]
    result = runner.invoke(app, args)
    message = _one_line(result)
    assert result.exit_code == 1, result.output
    assert "failed while deleting the user's threads: disk I/O error" in message
    assert "run the same command again" in message
    with EpisodeLog(migrated_url) as log:
        assert log.count_episodes() == 2  # the threads go first: no episode went
        assert len(SQLMemory(log).list("ann")) == 1
        (entry,) = log.deletion_history()
        assert not entry.finished


# ------------------------------------------------------------------------ --db


def test_a_sqlite_file_in_a_missing_folder_names_the_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    url = "sqlite:///nodir/x.db"
    folder = tmp_path / "nodir"
    for args in (["episodes", "list"], ["db", "upgrade"], ["demo", "--episodes", "20"]):
        result = runner.invoke(app, [*args, "--db", url])
        message = _one_line(result)
        assert result.exit_code == 2, (args, result.output)
        assert f"the directory {folder} does not exist" in message, (args, message)
        assert "unable to open database file" not in message
    assert "create the directory first, then run `memabra db upgrade --db sqlite:///nodir/x.db`" in _one_line(
        runner.invoke(app, ["episodes", "list", "--db", url])
    )
    assert "create it first" in _one_line(runner.invoke(app, ["db", "upgrade", "--db", url]))
    from_env = CliRunner(env={"COLUMNS": "200", "MEMABRA_DATABASE_URL": url}).invoke(app, ["db", "upgrade"])
    assert from_env.exit_code == 2 and f"the directory {folder} does not exist" in _one_line(from_env)
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "folder.db").mkdir()
    result = runner.invoke(app, ["db", "upgrade", "--db", "sqlite:///folder.db"])
    assert result.exit_code == 2 and "is a folder, not a SQLite database file" in _one_line(result)


def test_no_db_and_no_variable_names_the_default_not_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    unset = CliRunner(env={"COLUMNS": "200", "MEMABRA_DATABASE_URL": None})
    message = _one_line(unset.invoke(app, ["memories", "list", "--user", "ann"]))
    assert "the default database sqlite:///memabra.db" in message
    assert "$MEMABRA_DATABASE_URL is not set" in message and "Invalid value for $MEMABRA_DATABASE_URL" not in message
    # set but empty (an unfilled secret) is refused, not read as unset: see test_configuration.py
    empty = CliRunner(env={"COLUMNS": "200", "MEMABRA_DATABASE_URL": ""})
    assert "$MEMABRA_DATABASE_URL is set but empty" in _one_line(empty.invoke(app, ["episodes", "list"]))
    given = CliRunner(env={"COLUMNS": "200", "MEMABRA_DATABASE_URL": "sqlite:///elsewhere.db"})
    message = _one_line(given.invoke(app, ["memories", "list", "--user", "ann"]))
    assert "Invalid value for $MEMABRA_DATABASE_URL (no --db given): no database at elsewhere.db" in message
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("given", "hint"),
    [
        ("sqlite:/tmp/x.db", "a SQLite file is written sqlite:////tmp/x.db (four slashes before an absolute path)"),
        ("sqlite:x.db", "a SQLite file is written sqlite:///x.db"),
        ("sqlite3:data/x.db", "a SQLite file is written sqlite:///data/x.db"),
        ("/tmp/x.db", "a SQLite file is written sqlite:////tmp/x.db (four slashes before an absolute path)"),
        ("x.db", "a SQLite file is written sqlite:///x.db"),
        ("postgresql:mydb", "a database URL is written sqlite:///FILE or postgresql+psycopg://USER@HOST/NAME"),
    ],
)
def test_a_malformed_url_gets_a_suggestion_that_works(given: str, hint: str) -> None:
    result = runner.invoke(app, ["episodes", "list", "--db", given])
    message = _one_line(result)
    assert result.exit_code == 2 and hint in message, message
    assert "sqlite:///sqlite" not in message and "sqlite:///postgresql" not in message


# ------------------------------------------------------------------------ memories by id prefix


def _put(memory: SQLMemory, user: str, memory_id: str, text: str) -> None:
    memory.put(RegistryItem(kind=CandidateKind.MEMORY, id=memory_id, owner=user, text=text, tokens=4))


def test_memory_commands_take_a_unique_start_of_the_users_memory_id(migrated_url: str) -> None:
    with EpisodeLog(migrated_url) as log:
        memory = SQLMemory(log)
        _put(memory, "ann", "mem:91c3aa0000000000", "I live in Lyon")
        _put(memory, "ann", "mem:91c3bb0000000000", "My dog is called Rex")
        _put(memory, "ann", "mem:7e2f000000000000", "I am vegetarian")
        _put(memory, "bob", "mem:5d5d000000000000", "I live in Oslo")

    def run(*args: str) -> Result:
        return runner.invoke(app, ["memories", *args, "--db", migrated_url])

    updated = run("update", "mem:91c3a", "I live in Paris", "--user", "ann")
    assert updated.exit_code == 0 and "updated mem:91c3aa0000000000: I live in Paris" in updated.output
    assert run("history", "91c3aa", "--user", "ann").exit_code == 0  # "mem:" may be left out
    retired = run("retire", "mem:7e2f", "--user", "ann")
    assert retired.exit_code == 0 and "retired mem:7e2f000000000000" in retired.output
    restored = run("restore", "mem:7e2f", "--user", "ann")
    assert restored.exit_code == 0 and "restored mem:7e2f000000000000" in restored.output
    ambiguous = run("update", "mem:91c3", "x", "--user", "ann")
    message = _one_line(ambiguous)
    assert ambiguous.exit_code == 1
    assert "'mem:91c3' is the start of several memory ids of user 'ann'" in message
    assert "mem:91c3aa0000000000, mem:91c3bb0000000000" in message
    short = _one_line(run("forget", "mem:91", "--user", "ann"))
    assert "give the whole id" in short and "see `memabra memories list --user ann`" in short
    other = _one_line(run("forget", "mem:5d5d", "--user", "ann"))  # bob's, not ann's
    assert "user 'ann' has no memory 'mem:5d5d' or one whose id starts with it" in other
    assert run("forget", "mem:91c3b", "--user", "ann").exit_code == 0
    with EpisodeLog(migrated_url) as log:
        assert sorted(r.id for r in SQLMemory(log).list("ann")) == ["mem:7e2f000000000000", "mem:91c3aa0000000000"]
        assert [r.id for r in SQLMemory(log).list("bob")] == ["mem:5d5d000000000000"]


# ------------------------------------------------------------------------ train, rewards, --version


def test_a_forced_training_names_the_promote_command(migrated_url: str) -> None:
    from logged_world import log_world
    from memabra.router import RandomRouter, Similarity

    with EpisodeLog(migrated_url) as log:
        log_world(log, RandomRouter(similarity=Similarity(encoder=None), seed=1), 200)
    zero = "ws=0,wr=0,we=0,wc=0,wl=0,wx=0,wu=0"
    args = ["train", "--from-log", "--learner", "random", "--weights", zero, "--force", "--db", migrated_url]
    trained = runner.invoke(app, args)
    assert trained.exit_code == 0, trained.output
    assert "admin view or the API" not in trained.output
    found = re.search(r"promote it with: (memabra policies promote .*)$", trained.output, re.M)
    assert found is not None, trained.output
    command = shlex.split(found.group(1))
    assert command[-2:] == ["--db", migrated_url]
    promoted = runner.invoke(app, command[1:])
    assert promoted.exit_code == 0 and f"promoted {command[3]}" in promoted.output, promoted.output


def test_recompute_with_mempo_says_when_no_label_was_stored(migrated_url: str) -> None:
    with EpisodeLog(migrated_url) as log:
        ep = episode()
        RewardService(log).record(ep)
    args = ["rewards", "recompute", "--weights", "wc=1.0", "--use-mempo", "--db", migrated_url]
    result = runner.invoke(app, args)
    assert result.exit_code == 0 and "recomputed 1 rewards" in result.output
    assert "no MemPO labels stored: recomputed without them" in _one_line(result)
    with EpisodeLog(migrated_url) as log:
        log.store_memory_scores([MemoryQuality(ep.selections[0].id, "mempo:test", 0.9, 0.8, 0.1, 1, 3)])
    labelled = runner.invoke(app, args)
    assert labelled.exit_code == 0 and "no MemPO labels" not in labelled.output
    plain = runner.invoke(app, args[:-3] + ["--db", migrated_url])
    assert plain.exit_code == 0 and "MemPO" not in plain.output


def test_recompute_says_when_it_re_totals_rewards_a_learner_already_learned(migrated_url: str) -> None:
    """The learner reads a final reward once: re-totalling it afterwards leaves the model on the old
    total, and the replay check differs from then on; the command says so instead of nothing."""
    with EpisodeLog(migrated_url) as log:
        first, second = episode(), episode()
        RewardService(log).record(first)
        RewardService(log).record(second)
    args = ["rewards", "recompute", "--weights", "wc=1.0", "--db", migrated_url]
    assert "already learned" not in runner.invoke(app, args).output
    with EpisodeLog(migrated_url) as log, log.engine.begin() as conn:
        conn.execute(text("UPDATE rewards SET learned_at = CURRENT_TIMESTAMP WHERE episode_id = :e"), {"e": first.id})
    result = _one_line(runner.invoke(app, args))
    assert "recomputed 2 rewards" in result
    assert "1 of these rewards were already learned under their old totals" in result
    assert "memabra learner --replay" in result


def test_version_prints_the_package_version() -> None:
    from memabra import __version__

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"memabra {__version__}"
