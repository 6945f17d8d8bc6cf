"""Each routing decision in the run's trace: a ``memabra_route`` retriever run under the route
step, for any LangChain callback handler (LangSmith's tracer, Langfuse's, ``astream_events``).

Before, a trace showed the route step's output as a bare turn id: what went into the context, with
which probability and under which snapshot, could only be read in memabra's own log."""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import UUID

from langchain.agents import create_agent
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.messages import AIMessage, HumanMessage

from factories import route_model_finish
from fakes import ScriptedChatModel
from memabra._agent import build_session, create_memabra_agent
from memabra._middleware import MemabraMiddleware, MemabraNodes, MemabraNodeState
from memabra._records import Episode
from memabra.router import HybridRouter, Similarity
from memabra.storage import EpisodeLog

QUESTION = "What is the weather forecast where I live?"


class _Runs(BaseCallbackHandler):
    """Every run a handler is told of: name, parent, metadata, and a retriever's documents."""

    def __init__(self) -> None:
        self.names: dict[UUID, str] = {}
        self.parents: dict[UUID, UUID | None] = {}
        self.metadata: dict[UUID, dict[str, Any]] = {}
        self.documents: dict[UUID, list[Document]] = {}

    def _start(self, name: str | None, run_id: UUID, parent_run_id: UUID | None, metadata: Any) -> None:
        self.names[run_id] = name or "?"
        self.parents[run_id] = parent_run_id
        self.metadata[run_id] = dict(metadata or {})

    def on_chain_start(
        self, serialized: Any, inputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kw: Any
    ) -> None:  # noqa: E501
        self._start(kw.get("name"), run_id, parent_run_id, kw.get("metadata"))

    def on_retriever_start(
        self, serialized: Any, query: str, *, run_id: UUID, parent_run_id: UUID | None = None, **kw: Any
    ) -> None:  # noqa: E501
        self._start(kw.get("name"), run_id, parent_run_id, kw.get("metadata"))
        self.metadata[run_id]["query"] = query

    def on_retriever_end(self, documents: Any, *, run_id: UUID, **kw: Any) -> None:
        self.documents[run_id] = list(documents)

    def routes(self) -> list[UUID]:
        return [run for run, name in self.names.items() if name == "memabra_route"]


def _check_traced(runs: _Runs, route_run: UUID, episode: Episode, route_step: str) -> None:
    """The trace's decision is the log's: same episode, snapshot, chosen candidates and probabilities."""
    parent = runs.parents[route_run]
    assert parent is not None and runs.names[parent] == route_step
    [selection] = episode.selections
    meta = runs.metadata[route_run]
    assert meta["memabra_episode_id"] == episode.id and "memabra_user_id" not in meta
    assert (meta["memabra_policy"], meta["memabra_policy_version"]) == (selection.policy, selection.policy_version)
    assert meta["memabra_propensity"] == selection.propensity and meta["memabra_offered"] == len(selection.offered)
    assert meta["query"] == episode.query
    traced = [
        (d.metadata["id"], d.metadata["kind"], d.metadata["probability"], d.page_content)
        for d in runs.documents[route_run]
    ]
    logged = [
        (d.chosen_id, d.kind.value, d.chosen_probability, selection.scored(d.chosen_id).candidate.text)
        for d in selection.slots
        if d.chosen_id in selection.chosen_ids
    ]
    assert traced == logged and traced


def _replies() -> list[AIMessage]:
    return [
        AIMessage("", tool_calls=[{"name": "get_forecast", "args": {"city": "Lyon"}, "id": "c1"}]),
        AIMessage("Sunny in Lyon."),
    ]


def test_the_built_in_agents_decision_is_a_retriever_run_of_its_route_step(log: EpisodeLog, tools, lexical) -> None:  # type: ignore[no-untyped-def]
    agent = create_memabra_agent(
        ScriptedChatModel(replies=_replies()), tools=tools, db=log, router=HybridRouter(similarity=lexical), learn=False
    )
    agent.session.memory.remember("ann", "I live in Lyon")
    runs = _Runs()
    out = agent.invoke(
        {"messages": [HumanMessage(QUESTION)]},
        {"configurable": {"thread_id": "t1"}, "callbacks": [runs]},
        context={"user_id": "ann"},
    )
    agent.close()
    [route_run] = runs.routes()  # one decision, one run: the tools and second model call add none
    episode = log.get_episode(out["memabra_episode_id"])
    _check_traced(runs, route_run, episode, "route")
    assert {d.metadata["kind"] for d in runs.documents[route_run]} == {"memory", "tool"}


def test_astream_events_streams_the_decision_a_chat_ui_can_show(log: EpisodeLog, tools, lexical) -> None:  # type: ignore[no-untyped-def]
    agent = create_memabra_agent(
        ScriptedChatModel(replies=_replies()), tools=tools, db=log, router=HybridRouter(similarity=lexical), learn=False
    )
    agent.session.memory.remember("ann", "I live in Lyon")

    async def events() -> list[dict[str, Any]]:
        found = []
        async for event in agent.astream_events(
            {"messages": [HumanMessage(QUESTION)]},
            {"configurable": {"thread_id": "t1"}},
            context={"user_id": "ann"},
            version="v2",
        ):
            if event["name"] == "memabra_route":
                found.append(event)
        return found

    found = asyncio.run(events())
    agent.close()
    assert [e["event"] for e in found] == ["on_retriever_start", "on_retriever_end"]
    documents = found[1]["data"]["output"]
    assert "I live in Lyon" in [d.page_content for d in documents]
    episode_id = found[1]["metadata"]["memabra_episode_id"]
    assert log.get_episode(episode_id).selections[0].chosen_ids == tuple(d.metadata["id"] for d in documents)


def test_middleware_and_nodes_trace_their_decisions_sync_and_async(log: EpisodeLog, tools, lexical) -> None:  # type: ignore[no-untyped-def]
    session = build_session(tools=tools, db=log, router=HybridRouter(similarity=lexical))
    session.memory.remember("ann", "I live in Lyon")
    agent = create_agent(
        ScriptedChatModel(replies=_replies() * 2), tools=tools, middleware=[MemabraMiddleware(session)]
    )
    nodes = MemabraNodes(session)

    def model_node(state: MemabraNodeState) -> dict[str, Any]:
        return {"messages": [AIMessage(nodes.system_prompt(state)[:20])]}

    graph = route_model_finish(MemabraNodeState, nodes, model_node).compile()
    for runnable, route_step in ((agent, "MemabraMiddleware.before_agent"), (graph, "route")):
        for run_async in (False, True):
            runs = _Runs()
            config: Any = {"callbacks": [runs]}
            request = {"messages": [HumanMessage(QUESTION)]}
            if run_async:
                out = asyncio.run(runnable.ainvoke(request, config, context={"user_id": "ann"}))
            else:
                out = runnable.invoke(request, config, context={"user_id": "ann"})
            [route_run] = runs.routes()
            _check_traced(runs, route_run, log.get_episode(out["memabra_episode_id"]), route_step)


def test_no_decision_is_built_for_a_trace_when_no_handler_listens(log: EpisodeLog, tools, lexical, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import memabra._trace as trace

    def unexpected(*args: object) -> list[Document]:
        raise AssertionError("documents built with no handler to take them")

    monkeypatch.setattr(trace, "_chosen_documents", unexpected)
    agent = create_memabra_agent(
        ScriptedChatModel(replies=[AIMessage("ok")]),
        tools=tools,
        db=log,
        router=HybridRouter(similarity=Similarity(encoder=None)),
        learn=False,
    )
    out = agent.invoke(
        {"messages": [HumanMessage(QUESTION)]}, {"configurable": {"thread_id": "t1"}}, context={"user_id": "ann"}
    )
    agent.close()
    assert log.get_episode(out["memabra_episode_id"]).selections
