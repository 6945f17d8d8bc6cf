"""A turn paused by an ``interrupt`` is kept in the log until its episode is: any process goes on
with the same selection and steps, the pause is not the turn's latency, a newer pause taken
elsewhere wins over a stale copy, the document round-trips exactly, and erasing the user takes it."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command, interrupt

from fakes import ScriptedChatModel
from memabra import Budget, CandidateKind, erase_user
from memabra._agent import create_memabra_agent
from memabra._records import Feedback, FeedbackKind
from memabra._turn_document import turn_document, turn_from_document
from memabra._turns import Turn, tool_step
from memabra.router import HybridRouter, LinearRouter
from memabra.storage import EpisodeLog

ALL_TOOLS = Budget(max_tokens=4000, slots={CandidateKind.MEMORY: 5, CandidateKind.SKILL: 2, CandidateKind.TOOL: 3})


@tool
def send_email(to: str) -> str:
    """Send an email to someone, once a person has approved it."""
    return f"sent to {to}" if interrupt({"approve": to}) else "cancelled"


def _email(to: str) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": "send_email", "args": {"to": to}, "id": f"call-{to}"}])


def _agent(log: EpisodeLog, lexical, replies: list, saver: InMemorySaver):  # type: ignore[no-untyped-def]
    model = ScriptedChatModel(replies=replies)
    return create_memabra_agent(
        model, tools=[send_email], db=log, router=HybridRouter(similarity=lexical), budget=ALL_TOOLS, checkpointer=saver
    )


# A person deciding whether to send: long enough that a loaded CI runner's own turn time (which
# reached 400 ms there) never comes near it.
PERSON_DECIDING_S = 2.0


def test_a_pause_is_not_the_turns_latency(log: EpisodeLog, lexical) -> None:  # type: ignore[no-untyped-def]
    config = {"configurable": {"thread_id": "t", "user_id": "ann"}}
    agent = _agent(log, lexical, [_email("bob"), AIMessage("Sent.")], InMemorySaver())
    paused = agent.invoke({"messages": [HumanMessage("Email bob please")]}, config)
    assert log.suspended_turn(paused["memabra_turn"]) is not None
    status = log.status()
    assert status.paused_turns == 1 and status.paused_since is not None
    time.sleep(PERSON_DECIDING_S)
    out = agent.invoke(Command(resume=True), config)
    ep = log.get_episode(out["memabra_episode_id"])
    latency = ep.metadata["latency_ms"]
    # the turn's own work stays well under the pause, even on a loaded runner
    assert isinstance(latency, float) and latency < PERSON_DECIDING_S * 1000 * 0.75, latency
    assert ep.metadata["pauses"] == 1
    assert [s.name for s in ep.steps] == ["ScriptedChatModel", "send_email", "ScriptedChatModel"]
    assert log.suspended_turn(paused["memabra_turn"]) is None and log.status().paused_turns == 0


def test_a_newer_pause_taken_elsewhere_wins_over_a_stale_copy(log: EpisodeLog, lexical) -> None:  # type: ignore[no-untyped-def]
    saver = InMemorySaver()
    config = {"configurable": {"thread_id": "two", "user_id": "ann"}}
    first = _agent(log, lexical, [_email("bob"), AIMessage("Sent both.")], saver)
    assert first.invoke({"messages": [HumanMessage("Email bob and carol")]}, config)["__interrupt__"]
    second = _agent(log, lexical, [_email("carol")], saver)
    # the second worker sends bob's, asks the model again and pauses on carol's
    assert second.invoke(Command(resume=True), config)["__interrupt__"]
    out = first.invoke(Command(resume=True), config)  # the first worker still holds its first pause
    ep = log.get_episode(out["memabra_episode_id"])
    assert [(s.name, s.result) for s in ep.steps] == [
        ("ScriptedChatModel", None),
        ("send_email", "sent to bob"),
        ("ScriptedChatModel", None),
        ("send_email", "sent to carol"),
        ("ScriptedChatModel", None),
    ]
    assert len(log.list_episodes().items) == 1


def test_the_interrupt_still_pauses_when_the_log_cannot_keep_the_turn(
    log: EpisodeLog, lexical, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:  # type: ignore[no-untyped-def]
    def unavailable(turn: Any) -> None:
        raise RuntimeError("database unavailable")

    monkeypatch.setattr(log, "suspend_turn", unavailable)
    config = {"configurable": {"thread_id": "t", "user_id": "ann"}}
    agent = _agent(log, lexical, [_email("bob"), AIMessage("Sent.")], InMemorySaver())
    with caplog.at_level(logging.WARNING, logger="memabra"):
        paused = agent.invoke({"messages": [HumanMessage("Email bob please")]}, config)
    assert paused["__interrupt__"] and "only this process can resume it" in caplog.text
    out = agent.invoke(Command(resume=True), config)  # this process still can
    assert [s.name for s in log.get_episode(out["memabra_episode_id"]).steps][-1] == "ScriptedChatModel"


def test_erasing_a_user_takes_their_paused_turns_and_threads(log: EpisodeLog, lexical) -> None:  # type: ignore[no-untyped-def]
    saver = InMemorySaver()
    config = {"configurable": {"thread_id": "secret", "user_id": "ann"}}
    paused = _agent(log, lexical, [_email("bob")], saver).invoke({"messages": [HumanMessage("Email bob")]}, config)
    assert log.user_threads("ann") == (("secret",), ())  # a thread with no episode yet
    erased = erase_user(log, "ann", checkpointer=saver)
    assert erased.threads == 1
    assert log.suspended_turn(paused["memabra_turn"]) is None


def test_the_document_round_trips_a_turn_exactly(lexical) -> None:  # type: ignore[no-untyped-def]
    from memabra import Candidate, RoutingContext

    candidates = [
        Candidate("m1", CandidateKind.MEMORY, "Ann lives in Lyon", 5, {"owner": "ann", "tags": ["home", 1]}),
        Candidate("t1", CandidateKind.TOOL, "Weather forecast for a city", 6),
        Candidate("t2", CandidateKind.TOOL, "Convert units", 3),
    ]
    router = LinearRouter(similarity=lexical, seed=3)
    context = RoutingContext("weather where I live?", "ann", "th", 2, budget=ALL_TOOLS)
    selection = router.choose(context, candidates)
    turn = Turn("turn-1", "ann", "th", 2, "weather where I live?", selection, "You know: Ann lives in Lyon", ("t1",))
    turn.steps.append(
        tool_step("t1", {"city": "Lyon", "days": [1, 2.5]}, result="rain", status="ok", error=None, latency_ms=12.25)
    )
    turn.feedback.append(Feedback(turn.episode_id, FeedbackKind.IMPLICIT, "memabra.test", {"useful_ids": ["m1"]}))
    turn.pauses = 2
    stored = json.loads(json.dumps(turn_document(turn, 1234.5)))  # what a JSON column gives back
    back = turn_from_document(stored, started=100.0)
    assert back.selection == selection and back.steps == turn.steps and back.feedback == turn.feedback
    assert (back.id, back.episode_id, back.user_id, back.thread_id, back.turn, back.query) == (
        turn.id,
        turn.episode_id,
        "ann",
        "th",
        2,
        turn.query,
    )
    assert back.system_prompt == turn.system_prompt and back.tool_names == ("t1",) and back.pauses == 2
    assert back.started == pytest.approx(100.0 - 1.2345)
    assert back.selection is not None and back.selection.propensity == selection.propensity
    with pytest.raises(Exception, match="document version 99"):
        turn_from_document({**stored, "version": 99}, started=0.0)


def test_an_operator_abandons_a_paused_turn_and_its_decision_stays_in_the_log(
    migrated_url: str, log: EpisodeLog, lexical, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    from typer.testing import CliRunner

    from memabra._cli import app

    runner = CliRunner(env={"COLUMNS": "240"})
    config = {"configurable": {"thread_id": "t", "user_id": "ann"}}
    agent = _agent(log, lexical, [_email("bob"), AIMessage("Hello again.")], InMemorySaver())
    paused = agent.invoke({"messages": [HumanMessage("Email bob please")]}, config)
    listed = runner.invoke(app, ["episodes", "paused", "--db", migrated_url])
    assert listed.exit_code == 0, listed.output
    assert paused["memabra_turn"] in listed.output and "Email bob please" in listed.output
    out = tmp_path / "paused.json"
    done = runner.invoke(app, ["episodes", "paused", "--db", migrated_url, "--abandon", "--json", str(out)])
    assert done.exit_code == 0, done.output
    (row,) = json.loads(out.read_text())["paused"]
    ep = log.get_episode(row["logged_as"])
    assert ep.selections and [s.name for s in ep.steps] == ["ScriptedChatModel"]
    assert ep.reward is not None and ep.reward.components.s == 0.0 and ep.metadata["pauses"] == 1
    assert ep.metadata["abandoned_by"].startswith("cli") and ep.metadata["abandoned_from"]  # who gave up on it
    assert log.suspended_turn(paused["memabra_turn"]) is None and log.status().paused_turns == 0
    # the worker that paused it still holds the turn: its run goes on as a new turn, not a duplicate
    resumed = agent.invoke(Command(resume=True), config)
    assert resumed["memabra_episode_id"] != ep.id and len(log.list_episodes().items) == 2
