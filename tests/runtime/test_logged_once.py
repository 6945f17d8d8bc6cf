"""One turn, one episode: a run that goes on after its logging node ran is never logged twice.

``Command(goto="finish")`` (or the middleware's ``after_agent`` node) sent to a run paused at an
interrupt runs the logging node beside the pending node; the pending node still runs when the
interrupt is answered, and the run reaches the logging node again. The second time logs nothing
and names the first episode (with a warning); the turn is never routed a second decision.

And a run retried from its checkpoint after its process died: the steps the dead process made
since the turn's copy was written (model replies, tool calls and their errors) are read back from
the checkpointed messages, so the episode's reward keeps its tool-error penalty."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import ToolException, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command, interrupt
from runtime.test_lost_turns_edges import ASK, CONFIG, Killed, _builtin, _die, _kept, _middleware, _one_episode

EMAIL = AIMessage("", tool_calls=[{"name": "send_email", "args": {"to": "bob"}, "id": "c1"}])
LOGGING_NODE = {"agent": "finish", "middleware": "MemabraMiddleware.after_agent"}


@tool("send_email")
def send_email_approved(to: str) -> str:
    """Send an email to someone, once a person has approved it."""
    return f"sent to {to}" if interrupt({"approve": to}) else "not sent"


@tool("send_email")
def send_email_down(to: str) -> str:
    """Send an email to someone; reports failures to the model instead of raising."""
    raise ToolException("smtp down")


send_email_down.handle_tool_error = True


def _resume(build: Any) -> Any:
    return Command(resume={"decisions": [{"type": "approve"}]}) if build is _middleware else Command(resume=True)


@pytest.mark.parametrize("build", [_builtin, _middleware], ids=["agent", "middleware"])
def test_a_logging_node_sent_to_a_paused_run_logs_the_turn_once(
    log: Any, lexical: Any, build: Any, caplog: Any
) -> None:
    saver = InMemorySaver()
    agent = build(log, lexical, [EMAIL, AIMessage("Sent."), AIMessage("Sent again.")], saver, send_email_approved)
    paused = agent.invoke(ASK, CONFIG)
    assert paused["__interrupt__"]
    turn_id = paused["memabra_turn"]
    name = "agent" if build is _builtin else "middleware"
    jumped = agent.invoke(Command(goto=LOGGING_NODE[name]), CONFIG)
    (first,) = log.list_episodes().items
    assert jumped["memabra_episode_id"] == first.id == turn_id
    assert not log.suspended_turns()  # no copy outlives the episode (the pending node paused again)

    caplog.set_level(logging.WARNING, "memabra")
    out = agent.invoke(_resume(build), CONFIG)
    assert [e.id for e in log.list_episodes().items] == [first.id]  # no second decision, no second episode
    assert out["memabra_episode_id"] == first.id and "not logged again" in caplog.text
    assert not log.suspended_turns() and log.status().lost_turns == 0


@pytest.mark.parametrize("build", [_builtin, _middleware], ids=["agent", "middleware"])
def test_a_retry_keeps_the_steps_its_dead_process_made_and_their_tool_errors(
    log: Any, lexical: Any, build: Any
) -> None:
    """The process dies at the second model call, after a tool failed: the retry's episode holds
    the first reply and the failed call (read back from the checkpoint), then the retried reply."""
    saver = InMemorySaver()
    with pytest.raises(Killed):
        build(log, lexical, [EMAIL, _die], saver, send_email_down).graph.invoke(ASK, CONFIG, durability="sync")
    kept = _kept(log)
    assert kept.document["steps"] == []  # the copy written when the turn was routed
    out = build(log, lexical, [AIMessage("Could not send it.")], saver, send_email_down).invoke(
        None, CONFIG, durability="sync"
    )
    episode = _one_episode(log, kept)
    assert out["memabra_episode_id"] == episode.id
    assert [(s.kind.value, s.name, s.status) for s in episode.steps] == [
        ("model", "model", "ok"),  # its reply names no model: the name the retry cannot know
        ("tool", "send_email", "error"),
        ("model", "ScriptedChatModel", "ok"),
    ]
    failed = episode.steps[1]
    assert "smtp down" in (failed.error or "") and dict(failed.arguments) == {"to": "bob"}
    assert episode.reward is not None and episode.reward.components.e > 0  # the tool error's penalty


def test_a_turn_failed_by_its_model_is_still_retried_as_a_new_decision(log: Any, lexical: Any) -> None:
    """A turn logged as failed (its model raised) was closed by the exception, not by its logging
    node: the retry routes a new decision, logged as a second episode, as before."""
    saver = InMemorySaver()

    def raises(messages: Any, tools: Any) -> Any:
        raise RuntimeError("provider 500")

    agent = _builtin(log, lexical, [raises, AIMessage("Sent it."), AIMessage("Sent it again.")], saver)
    with pytest.raises(RuntimeError):
        agent.invoke({"messages": [HumanMessage("Email bob please")]}, CONFIG)
    out = agent.invoke(None, CONFIG)
    ids = {e.id for e in log.list_episodes().items}
    assert len(ids) == 2 and out["memabra_episode_id"] in ids and out["memabra_turn"] in ids
