"""A closed episode log leaves nothing alive: its engine, pool and compiled statements go.

A process that opens logs as it goes (a notebook, a job per tenant, a test suite) kept every
engine it ever made: a module-level cache of row plans was keyed by the engine's dialect, whose
event listeners close over the engine. In CI the suite reached three million live objects, and a
full collection of them stalled the process for up to eight seconds.
"""

from __future__ import annotations

import gc
import weakref

from factories import episode
from memabra.storage import EpisodeLog


def _written_and_closed(url: str) -> weakref.ref[object]:
    with EpisodeLog(url) as log:
        logged = episode("ann")
        log.log_episode(logged)  # the bulk insert path, which plans rows per dialect
        assert log.get_episode(logged.id).user_id == "ann"
        return weakref.ref(log.engine)


def test_a_closed_log_frees_its_engine(migrated_url: str) -> None:
    engines = [_written_and_closed(migrated_url) for _ in range(3)]
    gc.collect()
    assert [e() for e in engines] == [None, None, None]


def _agent_run_and_closed(url: str) -> tuple[weakref.ref[object], weakref.ref[object]]:
    from langchain_core.messages import AIMessage, HumanMessage

    from fakes import ScriptedChatModel
    from memabra import create_memabra_agent
    from memabra.router import HybridRouter, Similarity

    router = HybridRouter(similarity=Similarity(encoder=None))
    with create_memabra_agent(ScriptedChatModel(replies=[AIMessage("Hello, Ann.")]), db=url, router=router) as agent:
        agent.session.memory.remember("ann", "My name is Ann")
        out = agent.invoke(
            {"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": "t"}}, context={"user_id": "ann"}
        )
        assert out["messages"][-1].content == "Hello, Ann."
        return weakref.ref(agent.log.engine), weakref.ref(agent)


def test_a_closed_agent_frees_its_engine_and_itself(migrated_url: str) -> None:
    refs = [_agent_run_and_closed(migrated_url) for _ in range(2)]
    gc.collect()
    assert [(engine(), agent()) for engine, agent in refs] == [(None, None), (None, None)]


def test_agents_built_and_closed_on_one_log_leave_it_no_more_to_keep(migrated_url: str) -> None:
    # A graph factory per request over one shared log: each agent registered a close callback on
    # the log, and the log kept one (dead) reference per agent ever built, for the process's life.
    from memabra import ScriptedChatModel, create_memabra_agent
    from memabra.router import LinearRouter, Similarity

    with EpisodeLog(migrated_url) as log:
        for _ in range(30):
            router = LinearRouter(similarity=Similarity(encoder=None))
            create_memabra_agent(ScriptedChatModel([]), db=log, router=router, learn=False).close()
        gc.collect()
        create_memabra_agent(ScriptedChatModel([]), db=log, router=router, learn=False).close()
        assert len(log._on_close) <= 2
