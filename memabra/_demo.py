"""``memabra demo``: seeded simulated users talking to a memabra agent, offline.

Each episode a user asks for something (see :mod:`memabra._demo_world`). The agent routes its
context, answers with the chat model (the offline extractive stand-in unless another model is
given), and the user judges the answer: when it missed a fact the user had already given, the
user's next message restates it ("I already told you: ...") — the runtime picks that up as a
correction of the previous episode — and then the user rates the episode, which closes its
feedback window. Halfway through, users move and change their coffee order, and the task mix
shifts.

The same seeded users and tasks are run once per router, so the learned router and similarity
top-k are compared on identical conversations.
"""

from __future__ import annotations

import itertools
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage

from memabra._agent import create_memabra_agent
from memabra._demo_world import ASSOCIATIONS, SKILLS, SimUser, Task, World, judge, make_tools
from memabra._records import Budget, CandidateKind, utcnow
from memabra._settings import DEMO_EPISODES
from memabra._sql_memory import SQLMemory
from memabra._standin import ExtractiveChatModel, associations_from
from memabra.router import Router
from memabra.storage import EpisodeLog

__all__ = ["DemoEpisode", "DemoSummary", "WindowStats", "demo_budget", "run_demo", "summarize"]


# How far the demo's memory clock moves per write: a run's writes span seconds, as they would live.
_MEMORY_TICK = timedelta(milliseconds=10)


@dataclass(frozen=True, slots=True)
class DemoEpisode:
    index: int
    episode_id: str
    # the task turn's routing decision (a correction turn after it is a decision of its own)
    decision_id: str
    user_id: str
    task: str
    reward: float
    hit_rate: float
    corrected: bool
    tokens: int
    success: float


@dataclass(frozen=True, slots=True)
class WindowStats:
    episodes: int
    reward: float
    hit_rate: float
    corrections_per_100: float
    tokens: float


@dataclass(frozen=True, slots=True)
class DemoSummary:
    router: str
    first: WindowStats
    last: WindowStats
    overall: WindowStats


def demo_budget() -> Budget:
    return Budget(max_tokens=300, slots={CandidateKind.MEMORY: 5, CandidateKind.SKILL: 2, CandidateKind.TOOL: 3})


def standin_model() -> ExtractiveChatModel:
    return ExtractiveChatModel(associations=associations_from(ASSOCIATIONS))


def run_demo(
    *,
    router: Router,
    log: EpisodeLog,
    episodes: int = DEMO_EPISODES,
    seed: int = 0,
    users: int = 10,
    model: BaseChatModel | None = None,
    progress: Callable[[DemoEpisode], None] | None = None,
    tool_search: bool = True,
) -> list[DemoEpisode]:
    """Run ``episodes`` simulated task episodes against an agent with ``router`` logging to ``log``
    (``tool_search``: the model may fetch a tool the router left out with ``find_tools``)."""
    world = World(seed=seed, n_users=users, episodes=episodes)
    now = utcnow()
    # Memories take their times and ids from the run, not the wall clock and os.urandom: both feed
    # the learner's features (age, identity), so a seeded run stores, and chooses, the same each time.
    ticks = itertools.count()
    # a demo run again on the same log must not draw the ids of the first run's memories
    ids = random.Random(f"{seed}:{log.count_episodes()}")
    memory = SQLMemory(
        log,
        clock=lambda: now + next(ticks) * _MEMORY_TICK,
        new_id=lambda: f"{ids.getrandbits(128):032x}",
    )
    agent = create_memabra_agent(
        model or standin_model(),
        tools=make_tools(),
        skills=SKILLS,
        router=router,
        db=log,
        memory=memory,
        budget=demo_budget(),
        snapshot_every=100,
        tool_search=tool_search,
    )
    # What users said before the demo starts was said weeks ago: memories carry their age.
    for user in world.users:
        for k, line in enumerate(user.intro()):
            agent.session.memory.remember(user.id, line, source="onboarding", at=now - timedelta(days=30 + 7 * k))
    results: list[DemoEpisode] = []
    drifted = False
    for index in range(episodes):
        if index == world.drift_at and not drifted:
            drifted = True
            for user in world.users:
                for line in world.drift(user):
                    said = _say(agent, user.id, line, thread=f"{user.id}-drift")
                    # the user says no more in that thread: its reward is final now, not when the
                    # window ends after the run (a log left with open windows fails `memabra status`)
                    agent.feedback(said["memabra_episode_id"], final=True, source="demo-user")
        user, task, query = world.next_task(index)
        thread = f"{user.id}-{index}"
        out = _say(agent, user.id, query, thread=thread)
        episode_id = out["memabra_episode_id"]
        answer = str(out["messages"][-1].content)
        success, missed = judge(user, task, answer)
        if missed:
            reply = _say(agent, user.id, f"I already told you: {missed[0].text}.", thread=thread)
            agent.feedback(reply["memabra_episode_id"], final=True, source="demo-user")
        agent.feedback(episode_id, success=success, final=True, source="demo-user")
        results.append(_measure(agent.log, index, episode_id, user, task, success))
        if progress is not None:
            progress(results[-1])
    agent.session.save_snapshot()
    return results


def _say(agent: Any, user_id: str, text: str, *, thread: str) -> Any:
    return agent.invoke(
        {"messages": [HumanMessage(text)]}, {"configurable": {"thread_id": thread}}, context={"user_id": user_id}
    )


def _measure(log: EpisodeLog, index: int, episode_id: str, user: SimUser, task: Task, success: float) -> DemoEpisode:
    """Hit rate: share of what the task needs (the user's current facts, its tool, its skill)
    that the router injected."""
    ep = log.get_episode(episode_id)
    sel = ep.selections[0]
    chosen = sel.chosen
    memory_texts = [c.text.lower() for c in chosen if c.kind is CandidateKind.MEMORY]
    names = {str(c.metadata.get("name", "")) for c in chosen}
    needs = [any(user.facts[cat].value.lower() in t for t in memory_texts) for cat in task.facts]
    if task.tool is not None:
        needs.append(task.tool in names)
    if task.skill is not None:
        needs.append(task.skill in names)
    return DemoEpisode(
        index=index,
        episode_id=episode_id,
        decision_id=sel.id,
        user_id=user.id,
        task=task.name,
        reward=ep.reward.total if ep.reward is not None else 0.0,
        hit_rate=sum(needs) / len(needs),
        corrected=any(f.payload.get("correction") for f in ep.feedback),
        tokens=sel.tokens_injected,
        success=success,
    )


def _window(rows: Sequence[DemoEpisode]) -> WindowStats:
    if not rows:
        return WindowStats(0, 0.0, 0.0, 0.0, 0.0)
    return WindowStats(
        episodes=len(rows),
        reward=statistics.fmean(r.reward for r in rows),
        hit_rate=statistics.fmean(r.hit_rate for r in rows),
        corrections_per_100=100.0 * sum(r.corrected for r in rows) / len(rows),
        tokens=statistics.fmean(r.tokens for r in rows),
    )


def summarize(router: str, rows: Sequence[DemoEpisode], window: int = 100) -> DemoSummary:
    return DemoSummary(router, _window(rows[:window]), _window(rows[-window:]), _window(rows))
