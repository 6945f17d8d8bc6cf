"""Many turns at once through one agent, as a server runs it: a worker pool of threads calling
``invoke``, or one event loop awaiting ``ainvoke`` (LangGraph runs the sync route and finish nodes
in its executor). Every turn is logged whole, every final reward is learned exactly once, and the
model the process committed is the one a replay of the log in commit order gives."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage

from factories import readable_final_rewards
from fakes import ScriptedChatModel
from memabra import CandidateKind
from memabra._agent import build_session, create_memabra_agent
from memabra._learner import replay
from memabra._middleware import MemabraMiddleware
from memabra.router import LinearRouter, learned_model
from memabra.storage import EpisodeLog, LearnerStore

USERS = [f"user-{k}" for k in range(6)]
TURNS_PER_USER = 8
WORKERS = 6


def _request(user: str, i: int) -> tuple[dict[str, object], dict[str, object], dict[str, str]]:
    return (
        {"messages": [HumanMessage("Where do I live, and what is the weather there?")]},
        {"configurable": {"thread_id": f"{user}-{i}"}},
        {"user_id": user},
    )


@pytest.mark.parametrize("mode", ["threads", "asyncio", "middleware"])
def test_turns_served_at_once_lose_no_decision_and_no_reward(migrated_url: str, tools, lexical, mode: str) -> None:  # type: ignore[no-untyped-def]
    model = ScriptedChatModel(replies=[AIMessage("Noted.")])
    router = LinearRouter(seed=0, similarity=lexical)
    jobs = [(user, i) for i in range(TURNS_PER_USER) for user in USERS]
    if mode == "middleware":  # langchain's create_agent, the same session behind MemabraMiddleware
        session = build_session(tools=tools, db=migrated_url, router=router, snapshot_every=7)
        agent: Any = create_agent(model, tools=tools, middleware=[MemabraMiddleware(session)])
    else:
        agent = create_memabra_agent(
            model, tools=tools, db=migrated_url, router=router, snapshot_every=7, tool_search=True
        )
        session = agent.session
    with session:
        for user in USERS:
            session.memory.remember(user, f"I live in the town of {user.replace('-', '')}ville")
            session.memory.remember(user, "My cat is called Miso")

        def rate(episode_id: str, i: int) -> str:
            session.feedback(episode_id, success=1.0 if i % 3 else 0.0, final=True)
            return episode_id

        if mode == "asyncio":

            async def aturn(job: tuple[str, int]) -> str:
                inp, config, context = _request(*job)
                out = await agent.ainvoke(inp, config, context=context)
                return rate(out["memabra_episode_id"], job[1])

            async def all_turns() -> list[str]:
                return list(await asyncio.gather(*(aturn(job) for job in jobs)))

            episode_ids = asyncio.run(all_turns())
        else:

            def turn(job: tuple[str, int]) -> str:
                inp, config, context = _request(*job)
                return rate(agent.invoke(inp, config, context=context)["memabra_episode_id"], job[1])

            with ThreadPoolExecutor(WORKERS) as pool:
                episode_ids = list(pool.map(turn, jobs))
        # the last ratings came after the last turn's learning step; on PostgreSQL a reward is
        # readable once every older transaction on the server ended (another test's may be open)
        readable_final_rewards(LearnerStore(session.log.engine), at_least=len(jobs))
        session.learn_pending()
        version = session.save_snapshot()

    assert len(set(episode_ids)) == len(jobs)
    with EpisodeLog(migrated_url) as log:
        for episode_id, (user, _) in zip(episode_ids, jobs, strict=True):
            episode = log.get_episode(episode_id)
            assert episode.user_id == user and len(episode.selections) == 1
            assert episode.reward is not None and episode.finalized_at is not None
            offered = {sc.candidate.id for sc in episode.selections[0].offered}
            # a turn is offered its own user's memories, and only those, however the turns interleaved
            assert {c for c in offered if c.startswith("mem:")} == _memory_ids(log, user)
        store = LearnerStore(log.engine)
        assert store.count_final() == len(jobs)
        replayed, learned = replay(log, "linear")
        assert learned == len(jobs)
        assert learned_model(log.get_snapshot(version)) == learned_model(replayed.snapshot())


def _memory_ids(log: EpisodeLog, user: str) -> set[str]:
    return {item.id for item in log.items(user, CandidateKind.MEMORY)}
