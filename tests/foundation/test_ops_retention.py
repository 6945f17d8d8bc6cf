"""Retention and erasure as an operator runs them, on every configured backend."""

from __future__ import annotations

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from factories import episode
from memabra import InvalidRecordError, erase_user
from memabra._records import utcnow
from memabra.storage import EpisodeLog, SuspendedTurn


def test_a_user_id_longer_than_any_logged_one_is_refused_the_same_way_on_both_backends(log: EpisodeLog) -> None:
    """PostgreSQL refused it only when the audit entry was written, as a raw "value too long"
    driver error; SQLite took it and logged an erasure of a user no episode can name."""
    log.log_episodes([episode("ann")])
    too_long = "u" * 201
    with pytest.raises(InvalidRecordError, match="user_id holds at most 200 characters"):
        log.delete_episodes(user_id=too_long)
    with pytest.raises(InvalidRecordError, match="user_id holds at most 200 characters"):
        erase_user(log, too_long)
    assert log.deletion_history() == [] and log.count_episodes() == 1


def test_an_erasure_keeps_a_thread_where_another_users_turn_is_paused(log: EpisodeLog) -> None:
    """A paused turn lives in its thread's checkpoints until it is resumed: erasing ann deleted the
    thread bob's turn was paused in, as if only ann's episodes named it."""
    from langgraph.checkpoint.memory import InMemorySaver

    saver = InMemorySaver()
    for thread in ("ann-1", "both"):
        saver.put(
            {"configurable": {"thread_id": thread, "checkpoint_ns": ""}},
            empty_checkpoint(),
            {"source": "input", "step": 0},
            {},
        )
    log.log_episodes([episode("ann", thread_id="ann-1"), episode("ann", thread_id="both")])
    log.suspend_turn(SuspendedTurn("turn-bob", "ep-bob", "bob", "both", utcnow(), {"query": "approve it?"}))
    assert log.user_threads("ann") == (("ann-1",), ("both",))
    result = erase_user(log, "ann", checkpointer=saver)
    assert (result.episodes, result.threads, result.shared_threads) == (2, 1, ("both",))
    assert {c.config["configurable"]["thread_id"] for c in saver.list(None)} == {"both"}
    assert [t.turn_id for t in log.suspended_turns()] == ["turn-bob"]


def test_a_retention_run_names_the_unfinished_turns_it_cannot_delete(
    log: EpisodeLog, migrated_url: str, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """A kept turn is no episode: retention leaves it (its decision is not learned yet) and says
    how to log it, so that the text older than the cut-off does not stay unnoticed."""
    import json
    from datetime import timedelta

    from typer.testing import CliRunner

    from memabra._cli import app

    old = utcnow() - timedelta(days=100)
    log.suspend_turn(SuspendedTurn("t-old", "e-old", "ann", "th", old, {"query": "hi"}, paused=False))
    log.suspend_turn(SuspendedTurn("t-new", "e-new", "ann", "th", utcnow(), {"query": "hi"}, paused=False))
    out = tmp_path / "retention.json"
    done = CliRunner().invoke(
        app, ["episodes", "delete", "--older-than", "30d", "--db", migrated_url, "--json", str(out)]
    )
    assert done.exit_code == 0, done.output
    assert "1 unfinished turn(s) routed before the cut-off are kept" in done.output
    assert "memabra episodes paused --before" in done.output
    assert json.loads(out.read_text())["unfinished_turns_kept"] == 1
    assert {k.turn_id for k in log.suspended_turns()} == {"t-old", "t-new"}
    other = CliRunner().invoke(
        app, ["episodes", "delete", "--older-than", "30d", "--user", "bob", "--db", migrated_url]
    )
    assert other.exit_code == 0 and "unfinished" not in other.output


def test_lost_turns_are_found_behind_older_paused_ones(log: EpisodeLog, migrated_url: str) -> None:
    """A cron's `--lost --abandon --limit N` must reach the lost turns however many turns waiting
    on a person were kept before them."""
    from datetime import timedelta

    from typer.testing import CliRunner

    from memabra._cli import app

    now = utcnow()
    for n in range(3):
        log.suspend_turn(SuspendedTurn(f"t-paused-{n}", f"e-p{n}", "ann", "th", now - timedelta(days=3), {}))
    log.suspend_turn(SuspendedTurn("t-lost", "e-lost", "ann", "th", now - timedelta(days=1), {}, paused=False))
    assert [k.turn_id for k in log.suspended_turns(limit=2, lost_at=now)] == ["t-lost"]
    listed = CliRunner().invoke(app, ["episodes", "paused", "--lost", "--limit", "2", "--db", migrated_url])
    assert listed.exit_code == 0 and "t-lost" in listed.output and "t-paused" not in listed.output
