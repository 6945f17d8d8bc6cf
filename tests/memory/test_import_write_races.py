"""An import (``remember_many``, what ``memabra memories import`` runs per user and chunk) while
the user's agent keeps writing: the import's facts that supersede nothing were inserted without
checking that the user's memories had not changed since the import read them, so an agent's "I
live in Hobart" stored meanwhile stayed current beside the import's "I live in Perth", the same
fact stored by both was current twice, and a fact the agent had retired meanwhile came back.
Now that insert commits only on an unchanged read, and a stale chunk is read and decided again.

The agent's write lands between the import's read and its write, deterministically: the import's
backend has the agent write once it has read the user's known texts (after its read of the active
memories), once; on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from sqlalchemy import event
from typer.testing import CliRunner

from memabra import MemoriesChangedError, SQLMemory
from memabra._cli import app
from memabra.storage import EpisodeLog

USER = "ann"
runner = CliRunner(env={"COLUMNS": "200"})


class _AgentWritesDuringRead(SQLMemory):
    """An importer whose first read of the user's known texts is followed by ``agent``'s writes:
    they land after the import's reads (its active memories, then its known texts), before its
    write."""

    def __init__(self, log: EpisodeLog, agent: Callable[[], None], *, times: int = 1) -> None:
        super().__init__(log)
        self._agent, self._times = agent, times

    def _known_texts(self, user_id: str) -> list[str]:
        known = super()._known_texts(user_id)
        if self._times > 0:
            self._times -= 1
            self._agent()
        return known


def _current(memory: SQLMemory, user: str = USER) -> list[str]:
    return sorted(r.text for r in memory.list(user, include_retired=False))


def _import_while_agent_writes(url: str, agent_texts: Sequence[str], imported: Sequence[str]) -> SQLMemory:
    with EpisodeLog(url) as agent_log, EpisodeLog(url) as import_log:
        agent = SQLMemory(agent_log)

        def agent_writes() -> None:
            for text in agent_texts:
                agent.remember(USER, text)

        _AgentWritesDuringRead(import_log, agent_writes).remember_many(USER, imported)
    return SQLMemory(EpisodeLog(url))


def test_a_new_value_the_agent_stored_meanwhile_is_not_left_current_beside_the_imports(migrated_url: str) -> None:
    memory = _import_while_agent_writes(migrated_url, ["I live in Hobart"], ["I like tea", "I live in Perth"])
    try:
        # before: ["I like tea", "I live in Hobart", "I live in Perth"], two current cities
        assert _current(memory) == ["I like tea", "I live in Perth"]
        hobart = next(r for r in memory.list(USER) if r.text == "I live in Hobart")
        # (the import's time was taken before the agent wrote: its retirement may sort first)
        assert sorted(c.action.value for c in memory.history(USER, hobart.id)) == ["created", "retired"]
    finally:
        memory.log.close()


def test_a_fact_both_stored_at_once_is_stored_once(migrated_url: str) -> None:
    memory = _import_while_agent_writes(
        migrated_url, ["I am allergic to nuts"], ["I am allergic to nuts", "I like tea"]
    )
    try:
        assert _current(memory) == ["I am allergic to nuts", "I like tea"]  # before: the allergy twice
    finally:
        memory.log.close()


def test_a_fact_the_agent_retired_meanwhile_is_not_made_current_again(migrated_url: str) -> None:
    memory = _import_while_agent_writes(migrated_url, ["I live in Lyon", "I moved to Hobart"], ["I live in Lyon"])
    try:
        # an import skips the texts a user's memories had (an import run again must not bring a
        # superseded fact back): the agent's Lyon, retired by its Hobart, counts as one
        assert _current(memory) == ["I moved to Hobart"]  # before: Lyon current again beside Hobart
    finally:
        memory.log.close()


def test_the_imports_later_facts_on_the_agents_subject_supersede_in_file_order(migrated_url: str) -> None:
    imported = ["I live in Perth", "I like tea", "I moved to Sydney", "I am vegetarian"]
    memory = _import_while_agent_writes(migrated_url, ["I live in Hobart", "I eat meat"], imported)
    try:
        assert _current(memory) == ["I am vegetarian", "I like tea", "I moved to Sydney"]  # before: "I eat meat" too
        assert sum(1 for r in memory.list(USER) if r.text == "I like tea") == 1
    finally:
        memory.log.close()


def test_two_imports_of_one_user_at_once_store_each_fact_once(migrated_url: str) -> None:
    export = ["I live in Lyon", "I like tea", "My dog is called Rex", "I moved to Hobart", "I am vegetarian"]
    with EpisodeLog(migrated_url) as other_log, EpisodeLog(migrated_url) as import_log:
        other = SQLMemory(other_log)
        _AgentWritesDuringRead(import_log, lambda: other.remember_many(USER, export)).remember_many(USER, export)
        memory = SQLMemory(import_log)
        assert _current(memory) == ["I am vegetarian", "I like tea", "I moved to Hobart", "My dog is called Rex"]
        assert sorted(r.text for r in memory.list(USER)) == sorted(export)  # before: each of them twice


def test_an_import_of_a_user_written_without_pause_elsewhere_is_refused_naming_it(migrated_url: str) -> None:
    with EpisodeLog(migrated_url) as agent_log, EpisodeLog(migrated_url) as import_log:
        agent = SQLMemory(agent_log)
        likes = iter(f"I like band{i}" for i in range(100))
        importer = _AgentWritesDuringRead(import_log, lambda: agent.remember(USER, next(likes)), times=100)
        with pytest.raises(MemoriesChangedError, match="'ann''s memories changed since the read this import"):
            importer.remember_many(USER, ["I like tea", "I live in Perth"])
        assert not {"I like tea", "I live in Perth"} & set(_current(importer))  # nothing half-written


def test_two_first_writes_of_a_new_user_do_not_both_commit(migrated_url: str) -> None:
    """A user with no memory yet has no generation row: the conditional write inserts it, and one
    that finds it inserted meanwhile must fail. On PostgreSQL it did not (the driver reports the
    INSERT ... ON CONFLICT DO NOTHING's row count as -1), so both cities stayed current."""
    with EpisodeLog(migrated_url) as agent_log, EpisodeLog(migrated_url) as writer_log:
        agent = SQLMemory(agent_log)
        pending = ["I live in Paris"]

        def new_id() -> str:  # asked for the new memory's id after the read: the agent writes first
            while pending:
                agent.remember(USER, pending.pop())
            return uuid.uuid4().hex

        writer = SQLMemory(writer_log, new_id=new_id)
        writer.remember(USER, "I live in Hobart")
        assert _current(writer) == ["I live in Hobart"]  # before, on PostgreSQL: Hobart and Paris


def test_a_cli_import_paused_between_its_read_and_its_write_while_the_agent_writes(
    migrated_url: str, tmp_path: Path
) -> None:
    """The command itself, in a thread, held after its read of the user's history until the agent
    (this thread, its own connection) has written: a real interleaving, not a hook in memabra."""
    path = tmp_path / "mem0.jsonl"
    path.write_text('{"user_id": "ann", "memory": "I live in Perth"}\n{"user_id": "ann", "memory": "I like tea"}\n')
    read, written = threading.Event(), threading.Event()
    importer = threading.current_thread()
    outcome: list[object] = []

    def hold(conn, cursor, statement: str, *args: object) -> None:  # type: ignore[no-untyped-def]
        if threading.current_thread() is not importer and "FROM memory_history" in statement and not read.is_set():
            read.set()
            assert written.wait(30)

    def run_import() -> None:
        outcome.append(runner.invoke(app, ["memories", "import", str(path), "--db", migrated_url]))

    from sqlalchemy.engine import Engine

    event.listen(Engine, "after_cursor_execute", hold)
    try:
        thread = threading.Thread(target=run_import)
        thread.start()
        assert read.wait(30), "the import never read the user's history"
        with EpisodeLog(migrated_url) as agent_log:
            SQLMemory(agent_log).remember(USER, "I live in Hobart")
        written.set()
        thread.join(60)
    finally:
        event.remove(Engine, "after_cursor_execute", hold)
    result = outcome[0]
    assert getattr(result, "exit_code", None) == 0, getattr(result, "output", result)
    with EpisodeLog(migrated_url) as log:
        assert _current(SQLMemory(log)) == ["I like tea", "I live in Perth"]  # before: Hobart and Perth
