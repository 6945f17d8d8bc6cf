"""Two processes going on with the same kept turn: a double resume (a client's retry, two workers
taking the same thread), or a slow process resuming, or ending a call, after another went on with
the turn and recorded steps. No write may put a process's older steps back over the newer copy
another process wrote since this one read or wrote it; the process that loses reads the log again
and goes on with the newer copy. Each process is a :class:`RoutingSession` of its own over one
log; the interleavings are forced: the loser's read of the copy is wrapped so that the other
process goes on with the turn right after it returns."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from memabra._records import Episode
from memabra._session import RoutingSession
from memabra._turns import Turn
from memabra.storage import EpisodeLog, SuspendedTurn

QUERY = "weather in Lyon?"


def _paused_in(session: RoutingSession) -> Turn:
    """A turn routed, run and paused by an interrupt in ``session``: its copy reads paused."""
    t = session.begin(user_id="ann", query=QUERY, thread_id="th")
    assert t.selection is not None  # a decision to keep: the copy is written
    session.record_tool_call(t.id, "get_weather", {"city": "Lyon"}, result="sunny")
    session.suspend(t.id)
    return t


def _went_on_and_paused_again(session: RoutingSession, turn_id: str) -> None:
    """``session`` goes on with the turn from the log, records a step and pauses it again."""
    t = session.resume(turn_id, user_id="ann", query=QUERY, thread_id="th")
    session.record_tool_call(t.id, "get_forecast", {"city": "Lyon"}, result="rain (by b)")
    session.suspend(t.id)


def _copy(log: EpisodeLog, turn_id: str) -> SuspendedTurn:
    kept = log.suspended_turn(turn_id)
    assert kept is not None
    return kept


def _step_names(kept: SuspendedTurn) -> list[str]:
    return [s["name"] for s in kept.document["steps"]]


def _after_the_next_read(log: EpisodeLog, monkeypatch: pytest.MonkeyPatch, meanwhile: Callable[[], None]) -> None:
    """Run ``meanwhile`` right after the next read of a copy returns, as another process would."""
    read = log.suspended_turn
    pending = [meanwhile]

    def racing(turn_id: str) -> SuspendedTurn | None:
        kept = read(turn_id)
        if pending:
            pending.pop()()
        return kept

    monkeypatch.setattr(log, "suspended_turn", racing)


def test_a_resume_whose_copy_went_on_meanwhile_goes_on_with_the_newer_copy(
    log: EpisodeLog, processes: tuple[RoutingSession, RoutingSession], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = processes
    t = _paused_in(a)
    _after_the_next_read(log, monkeypatch, lambda: _went_on_and_paused_again(b, t.id))
    going_on = a.unpause(t)
    monkeypatch.undo()
    assert going_on is not None and going_on.paused_at is None
    # b's step and pause, not the older copy a read before b went on
    assert [s.name for s in going_on.steps] == ["get_weather", "get_forecast"] and going_on.pauses == 2
    kept = _copy(log, t.id)
    assert _step_names(kept) == ["get_weather", "get_forecast"] and kept.document["pauses"] == 2
    assert not kept.paused  # running in a now


def test_a_resume_whose_turn_was_logged_meanwhile_needs_a_new_turn(
    log: EpisodeLog, processes: tuple[RoutingSession, RoutingSession], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = processes

    def finished_by_b() -> None:
        b.resume(t.id, user_id="ann", query=QUERY, thread_id="th")
        b.finish(t.id, "Sunny (by b).")

    t = _paused_in(a)
    _after_the_next_read(log, monkeypatch, finished_by_b)
    assert a.unpause(t) is None  # not run on as if its episode were still to log
    monkeypatch.undo()
    assert log.suspended_turn(t.id) is None
    assert log.get_episode(t.episode_id).answer == "Sunny (by b)."


def test_two_retries_resuming_one_kept_turn_at_once_keep_the_newer_copy(
    log: EpisodeLog, processes: tuple[RoutingSession, RoutingSession], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = processes
    t = _paused_in(a)
    a.abandon(t.id)  # a restarted: the turn is in flight nowhere, only its copy is kept
    _after_the_next_read(log, monkeypatch, lambda: _went_on_and_paused_again(b, t.id))
    going_on = a.resume(t.id, user_id="ann", query=QUERY, thread_id="th")
    monkeypatch.undo()
    assert [s.name for s in going_on.steps] == ["get_weather", "get_forecast"] and going_on.pauses == 2
    kept = _copy(log, t.id)
    assert _step_names(kept) == ["get_weather", "get_forecast"] and kept.document["pauses"] == 2


def test_a_call_ending_after_another_process_went_on_does_not_put_older_steps_back(
    log: EpisodeLog, processes: tuple[RoutingSession, RoutingSession], caplog: pytest.LogCaptureFixture
) -> None:
    a, b = processes
    t = _paused_in(a)
    _went_on_and_paused_again(b, t.id)
    newer = _copy(log, t.id)
    # a sibling call in a ends after a's interrupt paused the turn: written as steps only
    caplog.set_level("INFO", "memabra")
    a.record_tool_call(t.id, "convert_units", {"value": 3, "unit": "km"}, result="1.9 mi")
    assert _copy(log, t.id) == newer  # b's pause stands
    assert "the newer copy stands" in caplog.text
    going_on = a.unpause(t)  # resumed here later: b's pause is the newer one
    assert going_on is not None and [s.name for s in going_on.steps] == ["get_weather", "get_forecast"]


def test_steps_recorded_after_a_pause_here_are_still_kept(
    log: EpisodeLog, processes: tuple[RoutingSession, RoutingSession]
) -> None:
    a, _ = processes
    t = _paused_in(a)
    a.record_tool_call(t.id, "convert_units", {"value": 3, "unit": "km"}, result="1.9 mi")
    a.record_tool_call(t.id, "get_forecast", {"city": "Lyon"}, result="rain")
    kept = _copy(log, t.id)
    assert _step_names(kept) == ["get_weather", "convert_units", "get_forecast"] and kept.paused
    going_on = a.unpause(t)
    assert going_on is t and not _copy(log, t.id).paused
    assert a.finish(t.id, "Sunny.") == t.episode_id
    episode: Episode = log.get_episode(t.episode_id)
    assert [s.name for s in episode.steps] == ["get_weather", "convert_units", "get_forecast"]
    assert log.suspended_turn(t.id) is None


def test_a_copy_whose_stamp_was_written_by_hand_can_still_be_replaced(log: EpisodeLog, migrated_url: str) -> None:
    """An operator's fix-up (or another tool) may store the stamp in another text format: the
    guarded write compares the stamps read, not the stored text (SQLite compares text)."""
    from dataclasses import replace
    from datetime import timedelta

    from sqlalchemy import text

    from memabra._records import utcnow
    from memabra._turn_document import turn_document
    from memabra.storage import make_engine

    t = Turn("t-by-hand", "ann", "th", 0, QUERY, None, "", ())
    log.suspend_turn(SuspendedTurn(t.id, t.episode_id, "ann", "th", utcnow(), turn_document(t, 1.0), paused=False))
    engine = make_engine(migrated_url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE suspended_turns SET suspended_at = :at"), {"at": utcnow() - timedelta(hours=2)})
    engine.dispose()
    read = _copy(log, t.id)
    paused = replace(read, suspended_at=utcnow(), paused=True)
    assert log.suspend_turn(paused, replacing=read) is True
    assert _copy(log, t.id) == paused
