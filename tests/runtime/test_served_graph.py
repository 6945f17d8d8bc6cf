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


@tool
async def slow_lookup(query: str) -> str:
    """Look something up in the slow archive."""
    await asyncio.sleep(5.0)
    return f"found {query}"


@pytest.mark.parametrize("rolled_back", [True, False])
def test_a_turn_whose_cancelled_run_was_rolled_back_is_logged_failed_as_the_thread_goes_on(
    log: EpisodeLog,
    lexical,  # type: ignore[no-untyped-def]
    rolled_back: bool,
) -> None:
    """The Agent Server's ``multitask_strategy="rollback"`` cancels the running run and deletes its
    checkpoints (here once it ended, as a runtime that deletes them after the run's task does):
    no run can go on with its turn, which was kept running and read lost in an hour. The thread's
    next run logs it as failed, rolled back. Where the checkpoints stand (a plain cancel, or
    ``"interrupt"``), the new message supersedes it as before."""
    from memabra._rolled_back import ROLLED_BACK_REASON
    from memabra._superseded import SUPERSEDED_REASON

    search = AIMessage("", tool_calls=[{"name": "slow_lookup", "args": {"query": "contract"}, "id": "s1"}])
    agent = create_memabra_agent(
        ScriptedChatModel(replies=[search, AIMessage("Hello!")]),
        tools=[slow_lookup],
        db=log,
        router=HybridRouter(similarity=lexical),
        budget=ALL_TOOLS,
    )
    saver = InMemorySaver()
    graph = agent.server_graph.copy(update={"checkpointer": saver})

    async def scenario() -> tuple[str, Any]:
        async def first() -> None:
            async for _ in graph.astream({"messages": [HumanMessage("Search the archive")]}, CONFIG, context=USER):
                pass

        task = asyncio.create_task(first())
        for _ in range(200):
            await asyncio.sleep(0.05)
            turn = (await graph.aget_state(CONFIG)).values.get("memabra_turn")
            if turn:
                break
        await asyncio.sleep(0.3)  # into its slow tool call
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        if rolled_back:
            await saver.adelete_thread("mail")
        out = await graph.ainvoke({"messages": [HumanMessage("Hello there")]}, CONFIG, context=USER)
        return turn, out

    turn, out = asyncio.run(scenario())
    earlier = log.get_episode(turn)
    (failed,) = [f for f in earlier.feedback if f.payload.get("accepted") is False]
    assert failed.payload["comment"] == (ROLLED_BACK_REASON if rolled_back else SUPERSEDED_REASON)
    assert earlier.selections and out["memabra_episode_id"] != turn
    assert log.get_episode(out["memabra_episode_id"]).reward is not None
    assert not log.suspended_turns()


def test_a_cancelled_runs_turns_its_subgraphs_checkpoints_name_are_not_taken_for_rolled_back(log: EpisodeLog) -> None:
    """Two memabra agents run as parallel nodes of a served graph; a plain cancel (or
    ``multitask_strategy="interrupt"``) leaves the checkpoints standing, each subgraph's naming its
    turn. Only one of the two was told from the state: the other was logged failed as rolled back,
    and the retry that went on with it logged it a second time."""
    from langgraph.graph import START, MessagesState, StateGraph

    from memabra import MemabraNodes, build_session
    from memabra._nodes import MemabraNodeState
    from memabra._rolled_back import ROLLED_BACK_REASON
    from memabra.router import Similarity

    session = build_session(db=log, router=HybridRouter(similarity=Similarity(encoder=None)))
    nodes = MemabraNodes(session)
    slow = asyncio.Event()

    async def model(state: MemabraNodeState) -> dict[str, Any]:
        await nodes.asystem_prompt(state)
        if not slow.is_set():
            await asyncio.sleep(30)
        return {"messages": [AIMessage("done")]}

    sub = StateGraph(MemabraNodeState)
    sub.add_node("route", nodes.route)
    sub.add_node("model", model)
    sub.add_node("finish", nodes.finish)
    sub.add_edge(START, "route")
    sub.add_edge("route", "model")
    sub.add_edge("model", "finish")
    agent = sub.compile()
    root = StateGraph(MessagesState)
    root.add_node("a", agent)
    root.add_node("b", agent)
    root.add_edge(START, "a")
    root.add_edge(START, "b")
    graph = served_graph(root.compile(), session).copy(update={"checkpointer": InMemorySaver()})

    async def scenario() -> None:
        async def first() -> None:
            async for _ in graph.astream({"messages": [HumanMessage("hello")]}, CONFIG, context=USER):
                pass

        task = asyncio.create_task(first())
        for _ in range(200):  # both routed, both in their slow model call
            await asyncio.sleep(0.05)
            if len(session.running_turns("mail")) == 2:
                break
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert log.count_episodes() == 0  # a retry can go on with both
        slow.set()
        await graph.ainvoke(None, CONFIG, context=USER)  # the retry from the checkpoints

    asyncio.run(scenario())
    episodes = [log.get_episode(e.id) for e in log.list_episodes().items]
    assert [f.payload for e in episodes for f in e.feedback if f.payload.get("comment") == ROLLED_BACK_REASON] == []
    assert len(episodes) == 2 and not log.suspended_turns()
