"""Runs that end paused where memabra's own nodes and hooks see no interrupt: ``interrupt_before``
/ ``interrupt_after``, and ``HumanInTheLoopMiddleware`` asking for approval in its own hook. The
turn is kept in the log when the run ends, so the worker that resumes it logs one whole episode:
the first worker's routing decision and model call, the approved call, the reply."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from factories import route_model_finish
from fakes import ScriptedChatModel
from memabra import Budget, CandidateKind, MemabraAgent
from memabra._agent import build_session, create_memabra_agent
from memabra._middleware import MemabraMiddleware, MemabraNodes, MemabraNodeState
from memabra.router import HybridRouter
from memabra.storage import EpisodeLog

ALL_TOOLS = Budget(max_tokens=4000, slots={CandidateKind.MEMORY: 5, CandidateKind.SKILL: 2, CandidateKind.TOOL: 3})
CONFIG: Any = {"configurable": {"thread_id": "mail", "user_id": "ann"}}
WHOLE_TURN = [
    ("model", "ScriptedChatModel", "ok", None),
    ("tool", "send_email", "ok", "sent to bob"),
    ("model", "ScriptedChatModel", "ok", None),
]
APPROVE = Command(resume={"decisions": [{"type": "approve"}]})


@tool
def send_email(to: str) -> str:
    """Send an email to someone."""
    return f"sent to {to}"


def _email_call() -> AIMessage:
    return AIMessage("", tool_calls=[{"name": "send_email", "args": {"to": "bob"}, "id": "e1"}])


def _worker(log: EpisodeLog, lexical, replies: list, saver: InMemorySaver) -> MemabraAgent:  # type: ignore[no-untyped-def]
    model = ScriptedChatModel(replies=replies)
    return create_memabra_agent(
        model, tools=[send_email], db=log, router=HybridRouter(similarity=lexical), budget=ALL_TOOLS, checkpointer=saver
    )


def _run(agent: MemabraAgent, payload: Any, how: str, **kwargs: Any) -> dict[str, Any]:
    """The run's final state, by the named method of the agent."""
    if how == "invoke":
        agent.invoke(payload, CONFIG, **kwargs)
    elif how == "ainvoke":
        asyncio.run(agent.ainvoke(payload, CONFIG, **kwargs))
    elif how == "batch":
        agent.batch([payload], [CONFIG], **kwargs)
    elif how == "abatch":
        asyncio.run(agent.abatch([payload], CONFIG, **kwargs))
    elif how == "stream":
        for _ in agent.stream(payload, CONFIG, **kwargs):
            pass
    else:

        async def read_all() -> None:
            async for _ in getattr(agent, how)(payload, CONFIG, **kwargs):
                pass

        asyncio.run(read_all())
    values: dict[str, Any] = agent.get_state(CONFIG).values
    return values


def _only_episode(log: EpisodeLog) -> Any:
    (summary,) = log.list_episodes().items
    return log.get_episode(summary.id)


def _steps(episode: Any) -> list[tuple[Any, ...]]:
    return [(s.kind.value, s.name, s.status, s.result) for s in episode.steps]


@pytest.mark.parametrize("how", ["invoke", "ainvoke", "stream", "astream", "astream_events", "batch", "abatch"])
def test_a_run_stopped_before_its_tools_resumes_whole_in_another_worker(log: EpisodeLog, lexical, how: str) -> None:  # type: ignore[no-untyped-def]
    saver = InMemorySaver()
    first = _worker(log, lexical, [_email_call()], saver)
    paused = _run(first, {"messages": [HumanMessage("Email bob please")]}, how, interrupt_before=["tools"])
    kept = log.suspended_turn(paused["memabra_turn"])
    assert kept is not None and kept.user_id == "ann" and kept.thread_id == "mail"
    other = _worker(log, lexical, [AIMessage("Sent it.")], saver)
    done = _run(other, None, how)
    episode = _only_episode(log)
    assert done["memabra_episode_id"] == episode.id == kept.episode_id
    assert _steps(episode) == WHOLE_TURN
    assert episode.metadata["pauses"] == 1 and "tool:send_email" in episode.selections[0].chosen_ids
    assert log.suspended_turn(paused["memabra_turn"]) is None


def test_a_run_stopped_before_it_is_logged_is_logged_by_the_worker_that_resumes_it(log: EpisodeLog, lexical) -> None:  # type: ignore[no-untyped-def]
    saver = InMemorySaver()
    first = _worker(log, lexical, [AIMessage("Hello.")], saver)
    first.invoke({"messages": [HumanMessage("Hi there")]}, CONFIG, interrupt_after=["agent"])
    assert not log.list_episodes().items
    done = _worker(log, lexical, [], saver).invoke(None, CONFIG)
    episode = _only_episode(log)
    assert done["memabra_episode_id"] == episode.id and episode.answer == "Hello."
    assert [s.kind.value for s in episode.steps] == ["model"]


def test_a_run_resumed_where_it_stopped_takes_the_pause_out_of_its_latency(log: EpisodeLog, lexical) -> None:  # type: ignore[no-untyped-def]
    agent = _worker(log, lexical, [_email_call(), AIMessage("Sent it.")], InMemorySaver())
    paused = agent.invoke({"messages": [HumanMessage("Email bob please")]}, CONFIG, interrupt_before=["tools"])
    turn = agent.session.get_turn(paused["memabra_turn"])
    assert turn.paused_at is not None
    turn.started -= 60.0  # as if the run had waited a minute for someone
    turn.paused_at -= 60.0
    done = agent.invoke(None, CONFIG)
    episode = log.get_episode(done["memabra_episode_id"])
    assert _steps(episode) == WHOLE_TURN and episode.metadata["latency_ms"] < 30_000


def test_a_run_that_ends_as_usual_reads_no_state(log: EpisodeLog, lexical) -> None:  # type: ignore[no-untyped-def]
    agent = _worker(log, lexical, [AIMessage("Hello.")], InMemorySaver())
    agent.graph.get_state = None  # a state read would raise
    assert agent.invoke({"messages": [HumanMessage("Hi there")]}, CONFIG)["memabra_episode_id"]


def test_a_state_that_cannot_be_read_leaves_the_paused_run_to_this_process(log: EpisodeLog, lexical, caplog) -> None:  # type: ignore[no-untyped-def]
    agent = _worker(log, lexical, [_email_call(), AIMessage("Sent it.")], InMemorySaver())
    graph_get_state = agent.graph.get_state

    def unreadable(config: Any) -> Any:
        raise ConnectionError("checkpointer down")

    agent.graph.get_state = unreadable
    paused = agent.invoke({"messages": [HumanMessage("Email bob please")]}, CONFIG, interrupt_before=["tools"])
    assert "could not read the run's state" in caplog.text
    kept = log.suspended_turn(paused["memabra_turn"])  # the copy written when it was routed: not paused
    assert kept is not None and not kept.paused and kept.document["steps"] == []
    agent.graph.get_state = graph_get_state
    done = agent.invoke(None, CONFIG)
    assert _steps(log.get_episode(done["memabra_episode_id"])) == WHOLE_TURN


def test_a_graph_of_your_own_paused_before_finish_is_logged_where_it_resumes(log: EpisodeLog, lexical) -> None:  # type: ignore[no-untyped-def]
    saver = InMemorySaver()

    def worker() -> MemabraAgent:
        nodes = MemabraNodes(build_session(tools=[send_email], db=log, router=HybridRouter(similarity=lexical)))

        def model_node(state: MemabraNodeState) -> dict[str, Any]:
            reply = AIMessage("Hello Ann")
            nodes.record_model_call(state, reply, 1.0)
            return {"messages": [reply]}

        builder = route_model_finish(MemabraNodeState, nodes, model_node)
        return MemabraAgent(builder.compile(checkpointer=saver, interrupt_before=["finish"]), nodes.session)

    worker().invoke({"messages": [HumanMessage("Hi there")]}, CONFIG)
    done = worker().invoke(None, CONFIG)
    episode = _only_episode(log)
    assert done["memabra_episode_id"] == episode.id and episode.answer == "Hello Ann"
    assert [s.kind.value for s in episode.steps] == ["model"] and episode.metadata["pauses"] == 1


def _middleware_worker(  # type: ignore[type-arg]
    log: EpisodeLog, replies: list, saver: InMemorySaver, *, approvals_first: bool = False, **approval: Any
) -> MemabraAgent:
    middleware = MemabraMiddleware(build_session(tools=[send_email], db=log, budget=ALL_TOOLS))
    approvals = HumanInTheLoopMiddleware(interrupt_on={"send_email": True}, **approval)
    order = [approvals, middleware] if approvals_first else [middleware, approvals]
    graph = create_agent(ScriptedChatModel(replies=replies), tools=[send_email], middleware=order, checkpointer=saver)
    return MemabraAgent(graph, middleware.session)


@pytest.mark.parametrize("how", ["invoke", "astream"])
def test_an_approval_asked_by_another_middleware_resumes_whole_in_another_worker(log: EpisodeLog, how: str) -> None:
    saver = InMemorySaver()
    paused = _run(
        _middleware_worker(log, [_email_call()], saver), {"messages": [HumanMessage("Email bob please")]}, how
    )
    assert log.suspended_turn(paused["memabra_turn"]) is not None
    other = _middleware_worker(log, [AIMessage("Sent it.")], saver)
    done = _run(other, APPROVE, how)
    episode = _only_episode(log)
    assert done["memabra_episode_id"] == episode.id and _steps(episode) == WHOLE_TURN
    assert other.feedback(episode.id, success=1.0).applied


@pytest.mark.skipif(
    "interrupt_mode" not in inspect.signature(HumanInTheLoopMiddleware).parameters,
    reason="this langchain asks for approval only in after_model",
)
def test_an_approval_asked_per_call_inside_memabra_s_hook_needs_no_wrapper(log: EpisodeLog) -> None:
    saver = InMemorySaver()
    first = _middleware_worker(log, [_email_call()], saver, interrupt_mode="per_call").graph
    second = _middleware_worker(log, [AIMessage("Sent it.")], saver, interrupt_mode="per_call").graph
    assert first.invoke({"messages": [HumanMessage("Email bob please")]}, CONFIG)["__interrupt__"]
    done = second.invoke(Command(resume={"type": "approve"}), CONFIG)
    episode = _only_episode(log)
    assert done["memabra_episode_id"] == episode.id and _steps(episode) == WHOLE_TURN


def test_with_approvals_listed_first_the_log_holds_the_call_a_reviewer_edited(log: EpisodeLog) -> None:
    saver = InMemorySaver()
    first = _middleware_worker(log, [_email_call()], saver, approvals_first=True)
    first.invoke({"messages": [HumanMessage("Email bob please")]}, CONFIG)
    edit = {"type": "edit", "edited_action": {"name": "send_email", "args": {"to": "dan"}}}
    done = _middleware_worker(log, [AIMessage("Sent it.")], saver, approvals_first=True).invoke(
        Command(resume={"decisions": [edit]}), CONFIG
    )
    episode = log.get_episode(done["memabra_episode_id"])
    (sent,) = [s for s in episode.steps if s.name == "send_email"]
    assert dict(sent.arguments) == {"to": "dan"} and sent.result is not None and "sent to dan" in sent.result
