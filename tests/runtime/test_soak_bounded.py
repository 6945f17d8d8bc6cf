"""One agent serving many turns holds no more after them than before (benchmarks/soak.py measures it).

A pod runs one agent for days. Anything it keeps per turn -- an id per routing decision, a turn,
a listener -- is a slow leak that only an OOM kill ends. Here the same users ask the same
questions in the same threads again and again, so every cache keyed by text, user or thread is
full after the warm-up: any container reachable from the agent that still grows afterwards holds
something per turn.

Found this way: every decision's id was kept twice, by the serving router's pending buffer and by
the snapshot watcher's record of which router made it, for a ``learn`` call that never comes (the
session learns from the log). Each filled to ``max_pending`` (100,000): about 25 MiB per agent,
reached after days of traffic.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from langchain_core.messages import HumanMessage

from memabra import RouterError, create_memabra_agent
from memabra._demo_world import ASSOCIATIONS, SKILLS, make_tools
from memabra._standin import ExtractiveChatModel, associations_from
from memabra.router import HybridRouter, LinearRouter, Router, Similarity

SOAK = Path(__file__).resolve().parents[2] / "benchmarks" / "soak.py"
_QUESTIONS = ("What should I cook for dinner tonight?", "Do I need an umbrella tomorrow?", "Order my usual drink")


def _load_soak() -> ModuleType:
    spec = importlib.util.spec_from_file_location("soak_benchmark", SOAK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


# the benchmark's walk over what an agent holds: what it reports is what this test bounds
container_sizes = _load_soak().container_sizes


def _turns(agent: object, start: int, count: int) -> None:
    for i in range(start, start + count):
        user = f"user-{i % 4}"
        out = agent.invoke(  # type: ignore[attr-defined]
            {"messages": [HumanMessage(_QUESTIONS[i % len(_QUESTIONS)])]},
            {"configurable": {"thread_id": f"{user}-{i % 2}"}},
            context={"user_id": user},
        )
        if i % 3 == 0:
            agent.feedback(out["memabra_episode_id"], success=1.0, final=True)  # type: ignore[attr-defined]


@pytest.mark.parametrize("learn", [True, False], ids=["learner-in-process", "serving-only"])
@pytest.mark.parametrize("router_kind", [LinearRouter, HybridRouter])
def test_recurring_traffic_leaves_no_container_growing(migrated_url: str, learn: bool, router_kind: type) -> None:
    router: Router = router_kind(similarity=Similarity(encoder=None))
    model = ExtractiveChatModel(associations=associations_from(ASSOCIATIONS))
    with create_memabra_agent(
        model, tools=make_tools(), skills=SKILLS, router=router, db=migrated_url, learn=learn, tool_search=True
    ) as agent:
        for k in range(4):
            agent.session.memory.remember(f"user-{k}", "I live in Lyon and I follow a vegan diet")
        _turns(agent, 0, 24)  # every user, thread and question seen: the caches keyed by them are full
        before = container_sizes(agent, depth=8)
        _turns(agent, 24, 36)
        after = container_sizes(agent, depth=8)
    grew = {path: (before.get(path, 0), size) for path, size in after.items() if size > before.get(path, 0)}
    assert grew == {}


def test_a_session_router_says_to_give_feedback_instead_of_learn(migrated_url: str) -> None:
    model = ExtractiveChatModel(associations=associations_from(ASSOCIATIONS))
    router = LinearRouter(similarity=Similarity(encoder=None))
    with create_memabra_agent(model, tools=make_tools(), router=router, db=migrated_url) as agent:
        out = agent.invoke({"messages": [HumanMessage("Do I need an umbrella?")]}, context={"user_id": "ann"})
        selection = agent.log.get_episode(out["memabra_episode_id"]).selections[0]
        with pytest.raises(RouterError, match=r"agent\.feedback"):
            agent.router.learn(selection, 1.0)
