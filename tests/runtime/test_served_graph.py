"""``agent.server_graph`` in process: the graph LangGraph's Agent Server runs ends its runs as
``MemabraAgent`` does (``tests/runtime/test_agent_server.py`` drives it on a real server), keeps
its class and session through the server's per-run ``copy``, and is refused where it cannot work."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.errors import GraphRecursionError
from langgraph.graph import END, START, MessagesState, StateGraph

from fakes import ScriptedChatModel
from memabra import Budget, CandidateKind, ConfigError, create_memabra_agent
from memabra._served_graph import MemabraServedGraph, served_graph
from memabra.router import HybridRouter
from memabra.storage import EpisodeLog

ALL_TOOLS = Budget(max_tokens=4000, slots={CandidateKind.MEMORY: 5, CandidateKind.SKILL: 2, CandidateKind.TOOL: 3})
CONFIG: Any = {"configurable": {"thread_id": "mail"}}
USER = {"user_id": "ann"}


@tool
def send_email(to: str) -> str:
    """Send an email to someone."""
    return f"sent to {to}"


def _served(log: EpisodeLog, lexical, replies: list[AIMessage]) -> MemabraServedGraph:  # type: ignore[no-untyped-def]
    agent = create_memabra_agent(
        ScriptedChatModel(replies=replies),
        tools=[send_email],
        db=log,
        router=HybridRouter(similarity=lexical),
        budget=ALL_TOOLS,
    )
    # as the server runs it: a per-run copy given the server's checkpointer
    return agent.server_graph.copy(update={"checkpointer": InMemorySaver()})


def test_a_copy_given_a_checkpointer_keeps_a_turn_stopped_at_a_breakpoint_paused(log: EpisodeLog, lexical) -> None:  # type: ignore[no-untyped-def]
    email = AIMessage("", tool_calls=[{"name": "send_email", "args": {"to": "bob"}, "id": "e1"}])
    graph = _served(log, lexical, [email, AIMessage("Sent it.")])
    assert isinstance(graph, MemabraServedGraph)
    paused = graph.invoke(
        {"messages": [HumanMessage("Email bob please")]}, CONFIG, context=USER, interrupt_before=["tools"]
    )
    kept = log.suspended_turn(paused["memabra_turn"])
    assert kept is not None and kept.paused
    done = graph.invoke(None, CONFIG, context=USER)
    assert log.get_episode(done["memabra_episode_id"]).metadata["pauses"] == 1
    assert log.suspended_turn(paused["memabra_turn"]) is None


def test_a_run_out_of_steps_is_logged_failed_through_ainvoke(log: EpisodeLog, lexical) -> None:  # type: ignore[no-untyped-def]
    graph = _served(log, lexical, [AIMessage("Hello.")])
    config = {**CONFIG, "recursion_limit": 2}
    with pytest.raises(GraphRecursionError):
        asyncio.run(graph.ainvoke({"messages": [HumanMessage("Hi there")]}, config, context=USER))
    (summary,) = log.list_episodes().items
    feedback = log.get_episode(summary.id).feedback
    assert [f.payload.get("accepted") for f in feedback] == [False]


def test_as_a_subgraph_it_leaves_the_run_s_end_to_the_parent(log: EpisodeLog, lexical) -> None:  # type: ignore[no-untyped-def]
    inner = _served(log, lexical, [AIMessage("Hello.")])
    reads: list[Any] = []
    inner_get_state = inner.get_state

    def counted(*args: Any, **kwargs: Any) -> Any:
        reads.append(args)
        return inner_get_state(*args, **kwargs)

    inner.get_state = counted  # type: ignore[method-assign]
    builder = StateGraph(MessagesState)
    builder.add_node("agent", inner)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", END)
    parent = builder.compile(checkpointer=InMemorySaver())
    # out of steps inside the subgraph: the parent's run ends, not the subgraph's (no state read there)
    with pytest.raises(GraphRecursionError):
        parent.invoke({"messages": [HumanMessage("Hi")]}, {**CONFIG, "recursion_limit": 2}, context=USER)
    assert not reads
    out = parent.invoke({"messages": [HumanMessage("Hi")]}, {"configurable": {"thread_id": "t2"}}, context=USER)
    assert out["messages"][-1].content == "Hello." and not reads


def test_a_graph_that_is_not_a_compiled_state_graph_is_refused(log: EpisodeLog, lexical) -> None:  # type: ignore[no-untyped-def]
    agent = create_memabra_agent(ScriptedChatModel(), db=log, router=HybridRouter(similarity=lexical))
    with pytest.raises(ConfigError, match="compiled StateGraph.*got StateGraph"):
        served_graph(StateGraph(MessagesState), agent.session)
    assert served_graph(agent.server_graph, agent.session) is agent.server_graph
