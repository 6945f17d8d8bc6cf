"""What the operator reads from ``memabra erase`` and ``memabra episodes delete``: counts that say
everything an erasure removed, and usage errors that name the option at fault."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from factories import episode
from memabra import SQLMemory
from memabra._cli import app
from memabra._records import utcnow
from memabra.storage import EpisodeLog, SuspendedTurn

runner = CliRunner(env={"COLUMNS": "200"})


def test_an_erasure_reports_the_paused_turns_it_deleted(migrated_url: str, tmp_path: Path) -> None:
    """A paused turn holds the user's words; the erasure deleted it and said nothing about it."""
    with EpisodeLog(migrated_url) as log:
        log.log_episodes([episode("ann"), episode("bob")])
        SQLMemory(log).remember("ann", "I live in Lyon")
        for n in range(2):
            log.suspend_turn(
                SuspendedTurn(f"turn-{n}", f"ep-{n}", "ann", "t-1", utcnow(), {"query": "book me a flight"})
            )
    out = tmp_path / "erased.json"
    result = runner.invoke(app, ["erase", "--user", "ann", "--db", migrated_url, "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert (
        "erased user ann: 1 episode(s) deleted, 1 memories forgotten, 2 unfinished turn(s) deleted (paused, or in flight)"
        in result.output
    )
    assert json.loads(out.read_text())["paused_turns"] == 2
    assert "held nothing" not in result.output
    with EpisodeLog(migrated_url) as log:
        assert log.suspended_turns() == []


def test_erasing_a_user_the_log_never_held_warns_that_nothing_was_found(migrated_url: str) -> None:
    """A typo in the id (``user3`` for ``user-3``) succeeded silently, as if the user were erased."""
    with EpisodeLog(migrated_url) as log:
        log.log_episodes([episode("user-3")])
    result = runner.invoke(app, ["erase", "--user", "user3", "--db", migrated_url])
    assert result.exit_code == 0, result.output
    assert "the log held nothing of user 'user3'" in result.output
    with EpisodeLog(migrated_url) as log:
        assert log.count_episodes() == 1


def test_a_bad_older_than_names_the_option(migrated_url: str) -> None:
    result = runner.invoke(app, ["episodes", "delete", "--older-than", "1y", "--db", migrated_url])
    assert result.exit_code == 2
    assert "Invalid value for '--older-than'" in result.output
    assert "90d, 12h or 30m" in result.output
