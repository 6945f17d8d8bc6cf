"""A run whose reader stops early still keeps its turn (paused or running: test_stream_reader_gone.py): a UI that stops reading at the approval
request (the ``__interrupt__`` chunk), a stream closed mid-run (the user left), and a run that
raised after it went on here (a hook timed out), and a request a server cancelled. The worker that goes on with the run logs one
whole episode, with the first worker's routing decision and steps."""

from __future__ import annotations

import asyncio
import time
from contextlib import aclosing
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, HumanInTheLoopMiddleware
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from fakes import ScriptedChatModel
from memabra import Budget, CandidateKind, MemabraAgent
from memabra._agent import build_session, create_memabra_agent
from memabra._middleware import MemabraMiddleware
from memabra.router import HybridRouter
from memabra.storage import EpisodeLog

ALL_TOOLS = Budget(max_tokens=4000, slots={CandidateKind.MEMORY: 5, CandidateKind.SKILL: 2, CandidateKind.TOOL: 3})
CONFIG: Any = {"configurable": {"thread_id": "mail", "user_id": "ann"}}
ASK = {"messages": [HumanMessage("Email bob and carol please")]}
APPROVE = Command(resume={"decisions": [{"type": "approve"}]})


@tool
def send_email(to: str) -> str:
    """Send an email to someone."""
    return f"sent to {to}"


def _email(to: str) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": "send_email", "args": {"to": to}, "id": f"call-{to}"}])


def _approvals(log: EpisodeLog, replies: list[Any], saver: InMemorySaver) -> MemabraAgent:
    middleware = MemabraMiddleware(build_session(tools=[send_email], db=log, budget=ALL_TOOLS))
    approvals = HumanInTheLoopMiddleware(interrupt_on={"send_email": True})
    graph = create_agent(
        ScriptedChatModel(replies=replies), tools=[send_email], middleware=[middleware, approvals], checkpointer=saver
    )
    return MemabraAgent(graph, middleware.session)


def _read_until_interrupt(agent: MemabraAgent, payload: Any, how: str) -> None:
    """What a UI does: read the run until it asks for approval, then stop reading."""
    if how == "stream":
        for chunk in agent.stream(payload, CONFIG, stream_mode="updates"):
            if "__interrupt__" in chunk:
                break
        return

    async def read() -> None:
        if how == "astream":
            async with aclosing(agent.astream(payload, CONFIG, stream_mode="updates")) as chunks:
                async for chunk in chunks:
                    if "__interrupt__" in chunk:
                        break
        else:
            async with aclosing(agent.astream_events(payload, CONFIG, version="v2")) as events:
                async for event in events:
                    chunk = event.get("data", {}).get("chunk")
                    if isinstance(chunk, dict) and "__interrupt__" in chunk:
                        break

    asyncio.run(read())


def _only_episode(log: EpisodeLog) -> Any:
    (summary,) = log.list_episodes().items
    return log.get_episode(summary.id)


def _steps(episode: Any) -> list[tuple[str, str | None]]:
    return [(s.name, s.result) for s in episode.steps]


@pytest.mark.parametrize("how", ["stream", "astream", "astream_events"])
def test_a_ui_that_stops_reading_at_the_approval_request_keeps_the_turn(log: EpisodeLog, how: str) -> None:
    saver = InMemorySaver()
    _read_until_interrupt(_approvals(log, [_email("bob")], saver), ASK, how)
    turn_id = saver.get_tuple(CONFIG).checkpoint["channel_values"]["memabra_turn"]  # type: ignore[union-attr]
    kept = log.suspended_turn(turn_id)
    assert kept is not None and kept.paused and [s["name"] for s in kept.document["steps"]] == ["ScriptedChatModel"]
    # the approval goes to another worker, which reads to the next approval request and stops again
    _read_until_interrupt(_approvals(log, [_email("carol")], saver), APPROVE, how)
    done = _approvals(log, [AIMessage("Sent both.")], saver).invoke(APPROVE, CONFIG)
    episode = _only_episode(log)
    assert done["memabra_episode_id"] == episode.id == kept.episode_id
    assert _steps(episode) == [
        ("ScriptedChatModel", None),
        ("send_email", "sent to bob"),
        ("ScriptedChatModel", None),
        ("send_email", "sent to carol"),
        ("ScriptedChatModel", None),
    ]
    assert episode.metadata["pauses"] == 2 and log.suspended_turn(turn_id) is None


def test_a_stream_closed_mid_run_keeps_the_turn_for_whoever_goes_on(log: EpisodeLog, lexical) -> None:  # type: ignore[no-untyped-def]
    saver = InMemorySaver()

    def worker(replies: list[Any]) -> MemabraAgent:
        model = ScriptedChatModel(replies=replies)
        return create_memabra_agent(
            model,
            tools=[send_email],
            db=log,
            router=HybridRouter(similarity=lexical),
            budget=ALL_TOOLS,
            checkpointer=saver,
        )

    first = worker([_email("bob")])
    for chunk in first.stream(ASK, CONFIG, stream_mode="updates"):
        if "agent" in chunk:  # the user left after the model's first reply
            break
    assert first.get_state(CONFIG).next == ("tools",)
    turn_id = first.get_state(CONFIG).values["memabra_turn"]
    kept = log.suspended_turn(turn_id)
    assert kept is not None and not kept.paused  # nobody was asked anything: lost in time if nobody goes on
    assert not first.session.running_turns("mail")  # not left running here
    done = worker([AIMessage("Sent it.")]).invoke(None, CONFIG)
    episode = _only_episode(log)
    assert done["memabra_episode_id"] == episode.id
    assert _steps(episode) == [("ScriptedChatModel", None), ("send_email", "sent to bob"), ("ScriptedChatModel", None)]


class _Guardrail(AgentMiddleware):  # type: ignore[type-arg]
    """Checks each reply with a service that times out once."""

    def __init__(self) -> None:
        super().__init__()
        self.failures = 1

    def after_model(self, state: Any, runtime: Any) -> None:
        if self.failures and len(state["messages"]) > 2:
            self.failures -= 1
            raise TimeoutError("guardrail service timed out")


def test_a_run_that_raised_after_going_on_keeps_the_steps_it_took(log: EpisodeLog) -> None:
    """Worker 2 goes on with the approved turn (sends bob's, asks the model again) and raises in a
    hook; worker 3 retries the run from its checkpoint and pauses at the next approval; worker 4
    gets that approval. The steps worker 2 took are in the episode (LangGraph does not run them again)."""
    saver = InMemorySaver()

    def worker(replies: list[Any], guardrail: _Guardrail | None = None) -> MemabraAgent:
        middleware = MemabraMiddleware(build_session(tools=[send_email], db=log, budget=ALL_TOOLS))
        approvals = HumanInTheLoopMiddleware(interrupt_on={"send_email": True})
        graph = create_agent(
            ScriptedChatModel(replies=replies),
            tools=[send_email],
            middleware=[middleware, approvals, guardrail or _Guardrail()],
            checkpointer=saver,
        )
        return MemabraAgent(graph, middleware.session)

    ok = _Guardrail()
    ok.failures = 0
    assert worker([_email("bob")], ok).invoke(ASK, CONFIG)["__interrupt__"]
    second = worker([_email("carol")])
    with pytest.raises(TimeoutError):
        second.invoke(APPROVE, CONFIG)
    assert not second.session.running_turns("mail")  # kept in the log, not left running here
    assert worker([], ok).invoke(None, CONFIG)["__interrupt__"]  # the retry asks for carol's approval
    done = worker([AIMessage("Sent both.")], ok).invoke(APPROVE, CONFIG)
    episode = _only_episode(log)
    assert done["memabra_episode_id"] == episode.id
    assert _steps(episode) == [
        ("ScriptedChatModel", None),
        ("send_email", "sent to bob"),
        ("ScriptedChatModel", None),
        ("send_email", "sent to carol"),
        ("ScriptedChatModel", None),
    ]


def test_a_request_cancelled_mid_run_keeps_the_turn(log: EpisodeLog, lexical, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A server cancels the request whose client went away (anyio cancels each await of the
    cleanup again): the turn is kept all the same, on a real async checkpointer."""
    import anyio
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    def slow_reply(messages: Any, bound: Any) -> AIMessage:
        time.sleep(0.5)  # the model is still answering when the client goes away
        return _email("bob")

    async def serve() -> None:
        async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "checkpoints.db")) as saver:
            model = ScriptedChatModel(replies=[slow_reply])
            agent = create_memabra_agent(
                model,
                tools=[send_email],
                db=log,
                router=HybridRouter(similarity=lexical),
                budget=ALL_TOOLS,
                checkpointer=saver,
            )
            with anyio.move_on_after(0.2):
                async with aclosing(agent.astream(ASK, CONFIG, stream_mode="updates")) as chunks:
                    async for _ in chunks:
                        pass
            for _ in range(50):  # the kept copy is written by a task of its own
                if not agent.session.running_turns("mail"):
                    break
                await asyncio.sleep(0.1)
            state = await agent.aget_state(CONFIG)
            kept = log.suspended_turn(state.values["memabra_turn"])
            assert state.next == ("agent",) and kept is not None and not kept.paused  # cancelled mid-run
            other = create_memabra_agent(
                ScriptedChatModel(replies=[_email("bob"), AIMessage("Sent it.")]),
                tools=[send_email],
                db=log,
                router=HybridRouter(similarity=lexical),
                budget=ALL_TOOLS,
                checkpointer=saver,
            )
            done = await other.ainvoke(None, CONFIG)
            episode = _only_episode(log)
            assert done["memabra_episode_id"] == episode.id == kept.episode_id  # the first worker's decision
            assert _steps(episode) == [
                ("ScriptedChatModel", None),
                ("send_email", "sent to bob"),
                ("ScriptedChatModel", None),
            ]

    anyio.run(serve)
