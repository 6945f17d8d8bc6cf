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
