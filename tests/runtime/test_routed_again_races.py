"""Two processes routing one turn afresh (two retries of a run that no process holds and whose
turn the log neither keeps nor has logged: its first process died before its copy was written, or
the log could not take it), and a first copy the log refuses because the turn was logged
meanwhile. One decision per turn: the copy the log keeps is the one the first process went on
with, steps included, and a process never goes on as if a copy were kept where none was written.
Each process is a :class:`RoutingSession` of its own over one log; the interleavings are forced
by wrapping the loser's read (the seam of ``test_resume_races``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from runtime.test_resume_races import QUERY, _after_the_next_read, _copy, _step_names

from memabra._records import new_id
from memabra._session import RoutingSession
from memabra._turns import Turn
from memabra.storage import EpisodeLog


def _after_the_next_episode_read(
    log: EpisodeLog, monkeypatch: pytest.MonkeyPatch, meanwhile: Callable[[], None]
) -> None:
    """Run ``meanwhile`` right after the next read of an episode returns (a resume's look for the
    turn's logged decision), as another process would."""
    read = log.get_episode
    pending = [meanwhile]

    def racing(episode_id: str) -> Any:
        try:
            return read(episode_id)
        finally:
            if pending:
                pending.pop()()

    monkeypatch.setattr(log, "get_episode", racing)


def test_two_retries_routing_one_turn_afresh_keep_the_first_ones_copy_and_steps(
    log: EpisodeLog, processes: tuple[RoutingSession, RoutingSession], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = processes
    turn_id = new_id()  # a run's turn that no process holds, and the log neither keeps nor logged
    first: list[Turn] = []

    def a_routes_runs_and_pauses() -> None:
        first.append(a.resume(turn_id, user_id="ann", query=QUERY, thread_id="th", bind=["ask_human"]))
        a.record_tool_call(turn_id, "get_weather", {"city": "Lyon"}, result="sunny")
        a.suspend(turn_id)

    # b finds no copy, then routes while a routes, runs a tool and pauses the same turn
    _after_the_next_read(log, monkeypatch, a_routes_runs_and_pauses)
    going_on = b.resume(turn_id, user_id="ann", query=QUERY, thread_id="th", bind=["approve"])
    monkeypatch.undo()
    (routed_by_a,) = first
    assert routed_by_a.selection is not None
    assert "ask_human" in routed_by_a.tool_names  # the calls still to run are bound, either way
    assert {"ask_human", "approve"} <= set(going_on.tool_names)
    # before: b's first copy, written over none, replaced a's: a's step gone, b's decision kept
    kept = _copy(log, turn_id)
    assert _step_names(kept) == ["get_weather"]
    assert going_on.selection == routed_by_a.selection and [s.name for s in going_on.steps] == ["get_weather"]
    assert not kept.paused  # b goes on with it now
    assert b.finish(turn_id, "Sunny.") == turn_id
    episode = log.get_episode(turn_id)
    assert episode.selections == (routed_by_a.selection,) and [s.name for s in episode.steps] == ["get_weather"]
    assert log.suspended_turn(turn_id) is None and log.count_episodes() == 1


def test_a_turn_routed_afresh_and_logged_elsewhere_meanwhile_goes_on_with_that_decision(
    log: EpisodeLog,
    processes: tuple[RoutingSession, RoutingSession],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    a, b = processes
    turn_id = new_id()
    finished: list[Turn] = []

    def a_routes_and_finishes() -> None:
        finished.append(a.resume(turn_id, user_id="ann", query=QUERY, thread_id="th"))
        a.finish(turn_id, "Sunny (by a).")

    # b finds the decision not logged, then a routes and logs it under the same decision id
    _after_the_next_episode_read(log, monkeypatch, a_routes_and_finishes)
    caplog.set_level("INFO", "memabra")
    going_on = b.resume(turn_id, user_id="ann", query=QUERY, thread_id="th")
    monkeypatch.undo()
    # before: the log skipped b's copy, b took it as kept and went on with a decision of its own
    assert "was logged meanwhile" in caplog.text
    assert going_on.logged and going_on.copy is None
    assert going_on.selection == finished[0].selection
    assert b.finish(turn_id, "Sunny (by b).") == turn_id  # logs nothing
    assert log.get_episode(turn_id).answer == "Sunny (by a)." and log.count_episodes() == 1
    assert log.suspended_turn(turn_id) is None


def test_a_first_copy_the_log_refuses_is_not_taken_for_kept(
    log: EpisodeLog, processes: tuple[RoutingSession, RoutingSession]
) -> None:
    a, b = processes
    t = a.begin(user_id="ann", query=QUERY, thread_id="th")
    a.abandon(t.id)
    b.resume(t.id, user_id="ann", query=QUERY, thread_id="th")
    b.finish(t.id, "Sunny (by b).")
    # a's copy of the turn, as if its first write had failed: the next one is written over none
    t.copy, t.kept_in_log = None, False
    saved = a._paused.keep_running(t)
    assert saved.value == "logged"  # before: "written", and the turn believed kept
    assert t.copy is None and not t.kept_in_log
    assert log.suspended_turn(t.id) is None
