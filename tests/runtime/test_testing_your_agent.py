"""What an application's own tests of an agent embedding memabra need (docs/configuration.md,
"Testing your agent"): a scripted chat model that can take tools, an in-memory log, a forced
routing choice, and agents built in parallel threads of one process."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage
from langchain_core.tools import tool

import memabra
from memabra import ConfigError, ScriptedCall, ScriptedChatModel, build_session, create_memabra_agent
from memabra.router import FixedListRouter, LinearRouter, Similarity


@tool
def get_weather(city: str) -> str:
    """Weather forecast for a city."""
    return f"Sunny in {city}"


def _ask(agent: memabra.MemabraAgent, text: str, thread: str = "t-1", user: str = "ann") -> dict[str, object]:
    out: dict[str, object] = agent.invoke(
        {"messages": [("user", text)]}, {"configurable": {"thread_id": thread}}, context={"user_id": user}
    )
    return out


def test_a_scripted_model_calls_the_tool_the_router_was_made_to_choose() -> None:
    call = {"name": "get_weather", "args": {"city": "Oslo"}, "id": None}  # an id is made up for it
    model = ScriptedChatModel(responses=[AIMessage("", tool_calls=[call]), "Sunny in Oslo."])
    router = FixedListRouter(["tool:get_weather"], similarity=Similarity())
    with create_memabra_agent(model, tools=[get_weather], db="sqlite://", router=router) as agent:
        out = _ask(agent, "Weather in Oslo tomorrow?")
        episode = agent.log.get_episode(str(out["memabra_episode_id"]))
    assert [(s.kind.value, s.name, s.error) for s in episode.steps] == [
        ("model", "memabra-scripted", None),
        ("tool", "get_weather", None),
        ("model", "memabra-scripted", None),
    ]
    assert "tool:get_weather" in episode.used_ids
    assert [c.tools for c in model.calls] == [("get_weather",), ("get_weather",)]
    assert all(isinstance(c, ScriptedCall) for c in model.calls)


def test_the_calls_show_what_was_injected_and_feedback_is_learned_in_memory() -> None:
    model = ScriptedChatModel(responses=["You live in Oslo."])
    router = LinearRouter(seed=0, similarity=Similarity())
    with create_memabra_agent(model, db="sqlite://", router=router) as agent:
        agent.session.memory.remember("ann", "I live in Oslo")
        out = _ask(agent, "Where do I live?")
        assert "- I live in Oslo" in model.calls[0].system
        agent.feedback(str(out["memabra_episode_id"]), success=1.0, final=True)
        reward = agent.log.get_episode(str(out["memabra_episode_id"])).reward
        assert reward is not None and reward.components.s == 1.0
        assert agent.router.policy_version.endswith("+1")
    assert agent.log.closed


def test_a_call_past_the_script_is_refused_naming_it() -> None:
    model = ScriptedChatModel(responses=["one"])
    with create_memabra_agent(model, db="sqlite://", router=LinearRouter(similarity=Similarity())) as agent:
        _ask(agent, "hello")
        with pytest.raises(ConfigError, match=r"got call 2 but was given 1 responses"):
            _ask(agent, "hello again", thread="t-2")
    with pytest.raises(ConfigError, match="strings or AIMessages"):
        ScriptedChatModel(responses=[{"content": "hi"}])


def test_each_in_memory_log_is_a_database_of_its_own() -> None:
    with (
        build_session(db="sqlite://", router=LinearRouter(similarity=Similarity())) as one,
        build_session(db="sqlite:///:memory:", router=LinearRouter(similarity=Similarity())) as two,
    ):
        one.memory.remember("ann", "I live in Oslo")
        assert [m.text for m in one.memory.list("ann")] == ["I live in Oslo"]
        assert list(two.memory.list("ann")) == []


def test_agents_built_at_once_on_threads_each_get_their_schema(tmp_path: Path) -> None:
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def build(i: int, db: str) -> None:
        try:
            barrier.wait()
            model = ScriptedChatModel(responses=["ok"])
            with create_memabra_agent(model, db=db, router=LinearRouter(similarity=Similarity())) as agent:
                _ask(agent, "hello", thread=f"t-{i}", user=f"u{i}")
        except BaseException as exc:  # noqa: BLE001 - reported below, with the database it came from
            errors.append(exc)

    dbs = [f"sqlite:///{tmp_path / f'{i}.db'}" for i in range(4)]
    threads = [threading.Thread(target=build, args=(i, db)) for i, db in enumerate(dbs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
