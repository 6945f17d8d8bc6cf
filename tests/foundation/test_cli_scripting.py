"""The command line as a script, a cron job or a runbook uses it: a result to parse (``--json``,
``-`` for standard output alone), and a command that deletes data asking a person at a terminal
first (``--yes`` skips it) while a script without a terminal runs as it always did."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from factories import episode
from memabra import SQLMemory
from memabra._cli import app
from memabra._feedback import RewardService
from memabra.storage import EpisodeLog, current_revision, head_revision, make_engine

runner = CliRunner(env={"COLUMNS": "200"})


@pytest.fixture
def at_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Standard input is a person's terminal (CliRunner's never is)."""
    monkeypatch.setattr("memabra._cli._common._stdin_is_terminal", lambda: True)


def _ann_and_bob(url: str) -> str:
    ann = episode("ann")
    with EpisodeLog(url) as log:
        RewardService(log).record(ann)
        RewardService(log).record(episode("bob"))
        SQLMemory(log).remember("ann", "I live in Lyon")
        SQLMemory(log).remember("ann", "my dog is called Rex")
    return ann.id


def _counts(url: str) -> tuple[int, int]:
    with EpisodeLog(url) as log:
        return log.count_episodes(), len(SQLMemory(log).list("ann"))


# ----------------------------------------------------------------------------------- --json


def test_db_current_says_in_json_whether_the_schema_is_current(migrated_url: str) -> None:
    result = runner.invoke(app, ["db", "current", "--db", migrated_url, "--json", "-"])
    assert result.exit_code == 0, result.output
    state = json.loads(result.stdout)  # the JSON alone on stdout, the line on stderr
    assert (state["current"], state["head"], state["up_to_date"]) == (head_revision(), head_revision(), True)
    assert state["compatible_from"] is not None
    assert "this memabra needs" in result.stderr


def test_feedback_json_names_the_whole_episode_id_and_the_status(migrated_url: str) -> None:
    episode_id = _ann_and_bob(migrated_url)
    args = ["feedback", episode_id[:6], '{"correct": true}', "--db", migrated_url, "--idempotency-key", "k1"]
    first = runner.invoke(app, [*args, "--json", "-"])
    assert first.exit_code == 0, first.output
    receipt = json.loads(first.stdout)
    assert receipt["episode_id"] == episode_id and receipt["status"] == "stored" and receipt["feedback_id"]
    retried = runner.invoke(app, [*args, "--json", "-"])
    assert retried.exit_code == 0, retried.output
    assert json.loads(retried.stdout) == receipt | {"status": "duplicate"}


def test_rewards_finalize_json_counts_what_it_finalised(migrated_url: str) -> None:
    _ann_and_bob(migrated_url)
    result = runner.invoke(app, ["rewards", "finalize", "--db", migrated_url, "--json", "-"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"finalized": 0, "left_open": 0, "left_open_capped": False}


# ------------------------------------------------------------------------------ questions


def test_a_downgrade_with_no_one_to_answer_says_to_pass_yes_and_asks_on_stderr(migrated_url: str) -> None:
    result = runner.invoke(app, ["db", "downgrade", "base", "--db", migrated_url], input="")
    assert result.exit_code == 1, result.output
    assert result.stdout == ""  # the question is not part of what a pipe reads
    assert "Drop every memabra table" in result.stderr
    assert "no answer to the question" in result.stderr and "pass --yes" in result.stderr
    assert "Aborted" not in result.output
    engine = make_engine(migrated_url)
    try:
        assert current_revision(engine) == head_revision()
    finally:
        engine.dispose()


@pytest.mark.usefixtures("at_a_terminal")
def test_erase_asks_at_a_terminal_and_a_no_erases_nothing(migrated_url: str) -> None:
    _ann_and_bob(migrated_url)
    refused = runner.invoke(app, ["erase", "--user", "ann", "--db", migrated_url], input="n\n")
    assert refused.exit_code == 1, refused.output
    assert "Erase user 'ann'" in refused.stderr and "nothing was erased" in refused.stderr
    assert _counts(migrated_url) == (2, 2)
    agreed = runner.invoke(app, ["erase", "--user", "ann", "--db", migrated_url], input="y\n")
    assert agreed.exit_code == 0, agreed.output
    assert _counts(migrated_url) == (1, 0)


def test_erase_in_a_script_neither_asks_nor_needs_yes(migrated_url: str) -> None:
    _ann_and_bob(migrated_url)
    result = runner.invoke(app, ["erase", "--user", "ann", "--db", migrated_url])
    assert result.exit_code == 0, result.output
    assert "Erase user" not in result.output and _counts(migrated_url) == (1, 0)


@pytest.mark.usefixtures("at_a_terminal")
def test_yes_skips_the_question_at_a_terminal(migrated_url: str) -> None:
    _ann_and_bob(migrated_url)
    result = runner.invoke(app, ["memories", "forget", "--all", "--user", "ann", "--db", migrated_url, "--yes"])
    assert result.exit_code == 0, result.output
    assert "Forget every memory" not in result.output and _counts(migrated_url) == (2, 0)


@pytest.mark.usefixtures("at_a_terminal")
@pytest.mark.parametrize(
    ("args", "question"),
    [
        (["memories", "forget", "--all", "--user", "ann"], "Forget every memory of user 'ann'"),
        (["episodes", "delete", "--user", "ann", "--include-unlearned"], "Delete the episodes of user 'ann'"),
        (["policies", "prune", "--keep", "1"], "Delete the snapshots of every policy"),
    ],
)
def test_every_bulk_delete_asks_at_a_terminal(migrated_url: str, args: list[str], question: str) -> None:
    _ann_and_bob(migrated_url)
    refused = runner.invoke(app, [*args, "--db", migrated_url], input="\n")  # Enter: the default, no
    assert refused.exit_code == 1, refused.output
    assert question in refused.stderr and "nothing was" in refused.stderr
    assert _counts(migrated_url) == (2, 2)


@pytest.mark.usefixtures("at_a_terminal")
def test_a_dry_run_asks_nothing(migrated_url: str) -> None:
    _ann_and_bob(migrated_url)
    result = runner.invoke(
        app, ["episodes", "delete", "--user", "ann", "--include-unlearned", "--dry-run", "--db", migrated_url]
    )
    assert result.exit_code == 0, result.output
    assert "would delete 1 episode(s)" in result.output and _counts(migrated_url) == (2, 2)
