"""Erasing a user (episodes and memories, one audited run), on every configured backend."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from sqlalchemy import update
from typer.testing import CliRunner

from factories import episode
from memabra import SQLMemory, erase_user
from memabra._cli import app
from memabra._records import utcnow
from memabra.storage import EpisodeLog
from memabra.storage._deletion_log import DeletionRow

runner = CliRunner(env={"COLUMNS": "200"})
PG_ENV = "MEMABRA_TEST_DATABASE_URL"


def _ann_and_bob(log: EpisodeLog) -> None:
    log.log_episodes([episode("ann") for _ in range(5)] + [episode("bob") for _ in range(2)])
    memory = SQLMemory(log)
    memory.remember("ann", "I live in Lyon")
    memory.remember("ann", "My dog is called Rex")
    memory.remember("bob", "I live in Oslo")


def test_erasure_takes_the_users_episodes_and_memories_and_leaves_one_finished_entry(log: EpisodeLog) -> None:
    _ann_and_bob(log)
    seen: list[int] = []
    result = erase_user(log, "ann", actor="dpo", client="ticket-7", progress=seen.append)
    assert (result.episodes, result.memories) == (5, 2) and seen[-1] == 5
    assert {e.user_id for e in log.list_episodes(limit=50).items} == {"bob"}
    memory = SQLMemory(log)
    assert memory.list("ann") == [] and len(memory.list("bob")) == 1
    (entry,) = log.deletion_history()
    assert entry.id == result.audit_id and entry.finished and entry.erasure
    assert (entry.actor, entry.client, entry.user_id, entry.deleted, entry.memories_forgotten) == (
        "dpo",
        "ticket-7",
        "ann",
        5,
        2,
    )
    assert entry.describe() == "user ann: episodes and memories (erasure)"
    assert entry.rerun_command() == "memabra erase --user ann"
    again = erase_user(log, "ann")
    assert (again.episodes, again.memories) == (0, 0)


def _checkpoint(saver: object, *threads: str) -> None:
    """One checkpointed turn in each thread, as an agent compiled with ``saver`` leaves it."""
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph

    class State(TypedDict):
        said: str

    graph = StateGraph(State)
    graph.add_node("echo", lambda state: {"said": state["said"] + "!"})
    graph.add_edge(START, "echo")
    graph.add_edge("echo", END)
    app = graph.compile(checkpointer=saver)  # type: ignore[arg-type]
    for thread in threads:
        app.invoke({"said": f"hello from {thread}"}, {"configurable": {"thread_id": thread}})


def _threads_in(saver: object) -> set[str]:
    return {c.config["configurable"]["thread_id"] for c in saver.list(None)}  # type: ignore[attr-defined]


def test_an_erasure_deletes_the_users_checkpointer_threads_and_keeps_shared_ones(log: EpisodeLog) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    saver = InMemorySaver()
    _checkpoint(saver, "ann-1", "ann-2", "both", "bob-1")
    log.log_episodes(
        [
            episode("ann", thread_id="ann-1"),
            episode("ann", thread_id="ann-2"),
            episode("ann", thread_id="both"),
            episode("bob", thread_id="both"),
            episode("bob", thread_id="bob-1"),
        ]
    )
    assert log.user_threads("ann") == (("ann-1", "ann-2"), ("both",))
    result = erase_user(log, "ann", checkpointer=saver)
    assert (result.episodes, result.threads, result.shared_threads) == (3, 2, ("both",))
    assert _threads_in(saver) == {"both", "bob-1"}
    (entry,) = log.deletion_history()
    assert entry.threads_deleted == 2 and "2 checkpointer thread(s)" in entry.describe()
    assert entry.rerun_command() == "memabra erase --user ann --checkpointer URL"


def test_a_checkpointer_that_cannot_delete_threads_is_refused_before_anything_goes(log: EpisodeLog) -> None:
    from langgraph.checkpoint.base import BaseCheckpointSaver

    from memabra import InvalidRecordError

    class ReadOnly(BaseCheckpointSaver[str]):
        pass

    _ann_and_bob(log)
    with pytest.raises(InvalidRecordError, match="ReadOnly cannot delete threads"):
        erase_user(log, "ann", checkpointer=ReadOnly())
    assert log.count_episodes() == 7 and log.deletion_history() == []


def test_an_erasure_that_died_before_the_memories_is_flagged_until_erased_again(log: EpisodeLog) -> None:
    from memabra import health_problems

    _ann_and_bob(log)

    def dies() -> int:
        raise KeyboardInterrupt  # the process stops between the episodes and the memories

    with pytest.raises(KeyboardInterrupt):
        log.erase_user("ann", dies, actor="cli:ops")
    assert len(SQLMemory(log).list("ann")) == 2  # the memories are still there
    (entry,) = log.status().unfinished_deletions
    assert entry.erasure and entry.deleted == 5 and entry.memories_forgotten == 0
    with log.engine.begin() as conn:
        conn.execute(update(DeletionRow).values(progressed_at=utcnow().replace(year=2025)))
    (problem,) = health_problems(log.status())
    assert "`memabra erase --user ann`" in problem.message
    # a deletion of ann's episodes alone does not finish an erasure: her memories would stay
    log.delete_episodes(user_id="ann", include_unlearned=True)
    assert [e.id for e in log.status().unfinished_deletions] == [entry.id]
    erase_user(log, "ann")
    assert log.status().unfinished_deletions == () and SQLMemory(log).list("ann") == []


def test_bad_erasures_are_refused_before_anything_is_deleted(log: EpisodeLog) -> None:
    from memabra import InvalidRecordError

    _ann_and_bob(log)
    with pytest.raises(InvalidRecordError, match="user_id is empty"):
        erase_user(log, " ")
    with pytest.raises(InvalidRecordError, match="actor is empty"):
        erase_user(log, "ann", actor="")
    assert log.count_episodes() == 7 and log.deletion_history() == []


def test_cli_erases_a_user_and_the_history_lists_it(migrated_url: str, tmp_path: Path) -> None:
    with EpisodeLog(migrated_url) as log:
        _ann_and_bob(log)
    out = tmp_path / "erased.json"
    result = runner.invoke(app, ["erase", "--user", "ann", "--db", migrated_url, "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "erased user ann: 5 episode(s) deleted, 2 memories forgotten" in result.output
    report = json.loads(out.read_text())
    assert (report["user"], report["episodes"], report["memories"]) == ("ann", 5, 2)
    listing = runner.invoke(app, ["episodes", "deletions", "--db", migrated_url])
    assert "user ann: episodes and memories (erasure)" in listing.output
    assert runner.invoke(app, ["erase", "--user", " ", "--db", migrated_url]).exit_code == 1
    assert runner.invoke(app, ["erase", "--db", migrated_url]).exit_code == 2


def test_cli_erases_the_users_threads_from_a_sqlite_checkpointer(migrated_url: str, tmp_path: Path) -> None:
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    checkpoints = tmp_path / "checkpoints.db"
    with SqliteSaver.from_conn_string(str(checkpoints)) as saver:
        _checkpoint(saver, "ann-1", "bob-1")
    with EpisodeLog(migrated_url) as log:
        log.log_episodes([episode("ann", thread_id="ann-1"), episode("bob", thread_id="bob-1")])
    url = f"sqlite:///{checkpoints}"
    result = runner.invoke(app, ["erase", "--user", "ann", "--checkpointer", url, "--db", migrated_url])
    assert result.exit_code == 0, result.output
    assert "1 checkpointer thread(s) deleted" in result.output
    with sqlite3.connect(checkpoints) as conn:
        assert {t for (t,) in conn.execute("SELECT DISTINCT thread_id FROM checkpoints")} == {"bob-1"}
    for bad, message in (
        ("sqlite:///" + str(tmp_path / "none.db"), "no checkpointer database at"),
        ("redis://localhost", "--checkpointer takes sqlite:///FILE or postgresql://"),
        ("::nonsense", "--checkpointer takes sqlite:///FILE or postgresql://"),
    ):
        out = runner.invoke(app, ["erase", "--user", "bob", "--checkpointer", bad, "--db", migrated_url])
        assert out.exit_code == 1 and message in out.output, (bad, out.output)
    with EpisodeLog(migrated_url) as log:
        assert log.count_episodes() == 1  # bob's: a bad --checkpointer erased nothing
    admin = runner.invoke(app, ["admin", "--db", migrated_url, "--checkpointer", "redis://localhost"])
    assert admin.exit_code == 1 and "--checkpointer takes sqlite:///FILE" in admin.output  # before it serves


@pytest.mark.skipif(not os.environ.get(PG_ENV), reason=f"PostgreSQL checkpointer: set {PG_ENV}")
def test_cli_erases_the_users_threads_from_a_postgres_checkpointer(migrated_url: str) -> None:
    from langgraph.checkpoint.postgres import PostgresSaver

    from pg_schema import pg_schema

    with pg_schema(os.environ[PG_ENV]) as checkpoints_url:
        conninfo = checkpoints_url.replace("postgresql+psycopg://", "postgresql://")
        with PostgresSaver.from_conn_string(conninfo) as saver:
            saver.setup()
            _checkpoint(saver, "ann-1", "bob-1")
        with EpisodeLog(migrated_url) as log:
            log.log_episodes([episode("ann", thread_id="ann-1"), episode("bob", thread_id="bob-1")])
        args = ["erase", "--user", "ann", "--checkpointer", checkpoints_url, "--db", migrated_url]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        assert "1 checkpointer thread(s) deleted" in result.output
        with PostgresSaver.from_conn_string(conninfo) as saver:
            assert _threads_in(saver) == {"bob-1"}


def test_cli_erases_the_users_threads_through_a_transaction_pooling_pgbouncer(
    migrated_url: str, pooled_url: str
) -> None:
    """The checkpointer's connection never prepares a statement: PostgresSaver.from_conn_string's
    prepares every one, which a transaction pooler hands to a server connection that lacks it."""
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    conninfo = pooled_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.Connection.connect(conninfo, autocommit=True, prepare_threshold=None, row_factory=dict_row) as conn:
        saver = PostgresSaver(conn)  # type: ignore[arg-type]
        saver.setup()
        _checkpoint(saver, "ann-1", "bob-1", "ann-2", "bob-2")
    with EpisodeLog(migrated_url) as log:
        log.log_episodes(
            [episode("ann", thread_id=t) for t in ("ann-1", "ann-2")] + [episode("bob", thread_id="bob-1")]
        )
    result = runner.invoke(app, ["erase", "--user", "ann", "--checkpointer", pooled_url, "--db", migrated_url])
    assert result.exit_code == 0, result.output
    assert "2 checkpointer thread(s) deleted" in result.output
    with psycopg.Connection.connect(conninfo, autocommit=True, prepare_threshold=None, row_factory=dict_row) as conn:
        assert _threads_in(PostgresSaver(conn)) == {"bob-1", "bob-2"}  # type: ignore[arg-type]
