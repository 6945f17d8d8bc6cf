"""Erasing a user (episodes and memories, one audited run), on every configured backend."""

from __future__ import annotations

import json
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
