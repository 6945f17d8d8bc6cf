"""Each run of a ``batch`` / ``abatch`` ends as it would under ``invoke``: with
``return_exceptions=True`` a run whose result is an exception raised (its turn kept running, to
read lost if nobody retries it, never paused as if a person were asked), one whose model raised is
a failed episode, and one out of steps (``GraphRecursionError``) is logged failed, also without a
checkpointer. A failed turn's ``accepted: false`` feedback says why in its ``comment``."""

from __future__ import annotations

import asyncio
import html
import json
import time
from pathlib import Path
from typing import Any

import pytest
from admin.conftest import TOKEN, sign_in
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.errors import GraphRecursionError
from runtime.conftest import get_weather
from runtime.test_nodes_tool_node import _calls
from runtime.test_stream_reader_gone import _agent, _email, _Guardrail
from starlette.testclient import TestClient
from typer.testing import CliRunner

from fakes import ScriptedChatModel
from memabra import MemabraAgent
from memabra._admin import create_app
from memabra._agent import build_session
from memabra._cli import app
from memabra._graph_steps import FAILED_TURN_SOURCE, MAX_FAILURE_REASON, failure_reason
from memabra._middleware import MemabraMiddleware
from memabra.router import HybridRouter, Similarity
from memabra.storage import EpisodeLog

MODEL_DOWN = "model_error (ScriptedChatModel): RuntimeError: provider down"
WHO = ("bob", "carol", "dave")  # asks for approval; raises in a guardrail; its model raises
HOWS = ["invoke", "batch", "abatch"]


def _reply(messages: Any, bound: Any) -> AIMessage:
    asked = str(messages[0].content)
    if "dave" in asked:
        raise RuntimeError("provider down\nresponse body: a second line a reviewer need not see")
    return _email("carol" if "carol" in asked else "bob")


def _run_each(agent: MemabraAgent, inputs: list[Any], configs: list[Any], how: str, **kwargs: Any) -> list[Any]:
    """Each run's outcome: its result, or the exception it raised (``return_exceptions=True``)."""
    if how == "batch":
        return list(agent.batch(inputs, configs, return_exceptions=True, **kwargs))
    if how == "abatch":
        return list(asyncio.run(agent.abatch(inputs, configs, return_exceptions=True, **kwargs)))
    outs: list[Any] = []
    for payload, config in zip(inputs, configs, strict=True):
        try:
            outs.append(agent.invoke(payload, config, **kwargs))
        except Exception as exc:  # noqa: BLE001 - the outcome under test
            outs.append(exc)
    return outs


def _failed_comment(log: EpisodeLog) -> str:
    """The reason the one logged (failed) episode's ``accepted: false`` feedback gives."""
    (summary,) = log.list_episodes().items
    (failed,) = [f for f in log.get_episode(summary.id).feedback if f.source == FAILED_TURN_SOURCE]
    assert failed.payload["accepted"] is False
    comment = failed.payload["comment"]
    assert isinstance(comment, str)
    return comment


@pytest.mark.parametrize("how", HOWS)
def test_each_run_of_a_batch_ends_as_it_would_under_invoke(log: EpisodeLog, how: str) -> None:
    agent = _agent(log, [_reply], InMemorySaver(), extra=[_Guardrail()])
    inputs = [{"messages": [HumanMessage(f"Email {who} please")]} for who in WHO]
    configs: Any = [{"configurable": {"thread_id": who, "user_id": "ann"}} for who in WHO]
    outs = _run_each(agent, inputs, configs, how)
    assert outs[0]["__interrupt__"] and isinstance(outs[1], TimeoutError) and isinstance(outs[2], RuntimeError)
    kept = {k.thread_id: k.paused for k in log.suspended_turns()}
    assert kept == {"bob": True, "carol": False}  # carol's run raised: nobody is asked, it may read lost
    assert _failed_comment(log) == MODEL_DOWN


def test_a_failed_turns_reason_shows_in_episodes_show_its_export_and_the_admin_page(
    migrated_url: str, log: EpisodeLog, tmp_path: Path
) -> None:
    agent = _agent(log, [_reply], InMemorySaver())
    with pytest.raises(RuntimeError, match="provider down"):
        agent.invoke(
            {"messages": [HumanMessage("Email dave please")]}, {"configurable": {"thread_id": "dave", "user_id": "ann"}}
        )
    assert _failed_comment(log) == MODEL_DOWN
    (summary,) = log.list_episodes().items
    runner = CliRunner(env={"COLUMNS": "200"})
    shown = runner.invoke(app, ["episodes", "show", summary.id, "--db", migrated_url])
    assert shown.exit_code == 0, shown.output
    assert MODEL_DOWN in " ".join(shown.output.split())
    document = tmp_path / "episode.json"
    exported = runner.invoke(app, ["episodes", "show", summary.id, "--json", str(document), "--db", migrated_url])
    assert exported.exit_code == 0, exported.output
    (failed,) = [f for f in json.loads(document.read_text())["feedback"] if f["source"] == FAILED_TURN_SOURCE]
    assert failed["payload"] == {"accepted": False, "comment": MODEL_DOWN}
    with TestClient(create_app(log, token=TOKEN), follow_redirects=False) as client:
        assert sign_in(client).status_code == 303
        page = client.get(f"/episodes/{summary.id}")
    assert page.status_code == 200 and MODEL_DOWN in html.unescape(page.text)


def _looping_agent(log: EpisodeLog, **compile: Any) -> MemabraAgent:
    """An agent whose model asks for the weather in Lyon for ever, and answers anything else."""

    def reply(messages: Any, bound: Any) -> AIMessage:
        return _calls(("get_weather", {"city": "Lyon"})) if "Lyon" in str(messages[0].content) else AIMessage("ok")

    session = build_session(tools=[get_weather], db=log, router=HybridRouter(similarity=Similarity(encoder=None)))
    graph = create_agent(
        ScriptedChatModel(replies=[reply]), tools=[get_weather], middleware=[MemabraMiddleware(session)], **compile
    )
    return MemabraAgent(graph, session)


@pytest.mark.parametrize("checkpointed", [False, True], ids=["no-checkpointer", "checkpointer"])
@pytest.mark.parametrize("how", HOWS)
def test_a_batch_run_out_of_steps_is_logged_failed_with_its_reason(
    log: EpisodeLog, how: str, checkpointed: bool
) -> None:
    agent = _looping_agent(log, checkpointer=InMemorySaver() if checkpointed else None)
    inputs = [{"messages": [HumanMessage(q)]} for q in ("weather in Lyon?", "hello")]
    configs: Any = [
        {"configurable": {"thread_id": thread, "user_id": "ann"}, "recursion_limit": 6} for thread in ("loop", "calm")
    ]
    outs = _run_each(agent, inputs, configs, how)
    assert isinstance(outs[0], GraphRecursionError) and outs[1]["memabra_episode_id"]
    assert not log.suspended_turns() and not agent.session.running_turns("loop")
    failed = [e for e in log.list_episodes().items if e.id != outs[1]["memabra_episode_id"]]
    assert len(failed) == 1
    (reason,) = [f.payload["comment"] for f in log.get_episode(failed[0].id).feedback if f.source == FAILED_TURN_SOURCE]
    assert reason == (
        "recursion_limit: GraphRecursionError: Recursion limit of 6 reached without hitting a stop condition."
        " You can increase the limit by setting the `recursion_limit` config key."
    )


def test_a_failure_reason_is_one_bounded_printable_line() -> None:
    error = "ValueError:\n  first\x00 line\twith  blanks\r\nTraceback (most recent call last): ..."
    assert failure_reason("model_error (m)", error) == "model_error (m): ValueError: first line with blanks"
    long = failure_reason("tool_error (t)", "KeyError: " + "x" * 1000 + "\nsecond line")
    assert len(long) == MAX_FAILURE_REASON and long.endswith("…") and "second" not in long
    assert failure_reason("c", "E: a\x1b[31m red\x07 bell") == "c: E: a [31m red bell"


def test_a_tool_that_raised_behind_the_middleware_is_the_failed_turns_reason(log: EpisodeLog) -> None:
    session = build_session(tools=[get_weather], db=log, router=HybridRouter(similarity=Similarity(encoder=None)))
    model = ScriptedChatModel(replies=[_calls(("get_weather", {"city": ""}))])
    agent = create_agent(model, tools=[get_weather], middleware=[MemabraMiddleware(session)])
    with pytest.raises(ValueError, match="city is required"):
        agent.invoke({"messages": [HumanMessage("weather?")]}, context={"user_id": "ann"})
    assert _failed_comment(log) == "tool_error (get_weather): ValueError: city is required"


@pytest.mark.parametrize("how", ["batch", "abatch"])
def test_a_batch_without_return_exceptions_raises_once_every_run_has_ended(log: EpisodeLog, how: str) -> None:
    """The caller still gets the exception, and each run's turn ends as with
    ``return_exceptions=True``: the run out of steps logged failed, the other one logged whole."""
    agent = _looping_agent(log, checkpointer=InMemorySaver())
    inputs = [{"messages": [HumanMessage(q)]} for q in ("weather in Lyon?", "hello")]
    configs: Any = [
        {"configurable": {"thread_id": thread, "user_id": "ann"}, "recursion_limit": 6} for thread in ("loop", "calm")
    ]
    with pytest.raises(GraphRecursionError):
        if how == "batch":
            agent.batch(inputs, configs)
        else:
            asyncio.run(agent.abatch(inputs, configs))
    assert not log.suspended_turns() and not agent.session.running_turns("loop")
    episodes = log.list_episodes().items
    assert len(episodes) == 2
    reasons = [f.payload.get("comment") for e in episodes for f in log.get_episode(e.id).feedback]
    assert any(str(r).startswith("recursion_limit: GraphRecursionError") for r in reasons)


@tool
def slow_weather(city: str) -> str:
    """Current weather for a city, from a slow service."""
    time.sleep(1.0)
    return f"sunny in {city}"


def _loops_or_answers(messages: list[Any], bound: Any) -> AIMessage:
    """Loops on Lyon's weather where the user says "loop"; else one slow call, then an answer."""
    asked = next(str(m.content) for m in reversed(messages) if isinstance(m, HumanMessage))
    if "loop" in asked:
        return _calls(("get_weather", {"city": "Lyon"}))
    if isinstance(messages[-1], ToolMessage):
        return AIMessage("sunny")
    return _calls(("slow_weather", {"city": "Paris"}))


def _stateless_agent(log: EpisodeLog) -> MemabraAgent:
    """No checkpointer: only the context each run routed its turn in tells the turn apart."""
    tools = [get_weather, slow_weather]
    session = build_session(tools=tools, db=log, router=HybridRouter(similarity=Similarity(encoder=None)))
    graph = create_agent(
        ScriptedChatModel(replies=[_loops_or_answers]), tools=tools, middleware=[MemabraMiddleware(session)]
    )
    return MemabraAgent(graph, session)


def _batch(agent: MemabraAgent, inputs: list[Any], config: Any, how: str, return_exceptions: bool) -> list[Any]:
    if how == "batch":
        return list(agent.batch(inputs, config, return_exceptions=return_exceptions))
    return list(asyncio.run(agent.abatch(inputs, config, return_exceptions=return_exceptions)))


def _failed_reasons(log: EpisodeLog) -> dict[str, str | None]:
    """Each logged episode's query, and the reason it was logged failed (``None``: it was not)."""
    reasons: dict[str, str | None] = {}
    for summary in log.list_episodes().items:
        episode = log.get_episode(summary.id)
        failed = [str(f.payload["comment"]) for f in episode.feedback if f.source == FAILED_TURN_SOURCE]
        assert len(failed) <= 1 and episode.thread_id is None
        reasons[episode.query] = failed[0] if failed else None
    return reasons


OUT_OF_STEPS = "recursion_limit: GraphRecursionError: Recursion limit of 6 reached"


@pytest.mark.parametrize("return_exceptions", [True, False], ids=["return-exceptions", "raise"])
@pytest.mark.parametrize("how", ["batch", "abatch"])
def test_a_batch_of_stateless_runs_out_of_steps_logs_each_turn_failed(
    log: EpisodeLog, how: str, return_exceptions: bool
) -> None:
    """Runs without thread ids, each routed in a context of its own: every run's turn is logged
    failed, none left running to read lost in an hour (and fire the ``turns`` check)."""
    agent = _stateless_agent(log)
    inputs = [{"messages": [HumanMessage(f"loop {i}")]} for i in range(3)]
    config: Any = {"configurable": {"user_id": "ann"}, "recursion_limit": 6}  # one for all, as usual
    if return_exceptions:
        outs = _batch(agent, inputs, config, how, return_exceptions)
        assert all(isinstance(out, GraphRecursionError) for out in outs)
    else:
        with pytest.raises(GraphRecursionError):
            _batch(agent, inputs, config, how, return_exceptions)
    assert not log.suspended_turns()
    reasons = _failed_reasons(log)
    assert sorted(reasons) == ["loop 0", "loop 1", "loop 2"]
    assert all(str(r).startswith(OUT_OF_STEPS) for r in reasons.values()), reasons


@pytest.mark.parametrize("return_exceptions", [True, False], ids=["return-exceptions", "raise"])
@pytest.mark.parametrize("how", ["batch", "abatch"])
def test_a_stateless_batch_run_out_of_steps_never_closes_a_run_still_going_beside_it(
    log: EpisodeLog, how: str, return_exceptions: bool
) -> None:
    """Paris's run is in its slow tool, its turn running, as the two others run out of steps: each
    of those closes its own turn, and Paris's is logged whole as it ends, not failed."""
    agent = _stateless_agent(log)
    asked = ["loop a", "weather in Paris?", "loop b"]
    inputs = [{"messages": [HumanMessage(q)]} for q in asked]
    configs: Any = [{"configurable": {"user_id": "ann"}, "recursion_limit": 50 if "Paris" in q else 6} for q in asked]
    if return_exceptions:
        outs = _batch(agent, inputs, configs, how, return_exceptions)
        assert isinstance(outs[0], GraphRecursionError) and isinstance(outs[2], GraphRecursionError)
        assert outs[1]["messages"][-1].content == "sunny" and outs[1]["memabra_episode_id"]
    else:
        with pytest.raises(GraphRecursionError):
            _batch(agent, inputs, configs, how, return_exceptions)
    assert not log.suspended_turns()
    reasons = _failed_reasons(log)
    assert reasons.pop("weather in Paris?") is None
    assert sorted(reasons) == ["loop a", "loop b"]
    assert all(str(r).startswith(OUT_OF_STEPS) for r in reasons.values()), reasons
