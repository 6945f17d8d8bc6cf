"""An agent given tools around a chat model that cannot bind them (LangChain's fake chat models, in
an application's tests) is refused when it is built, naming the model and the stand-in that can,
instead of failing mid-turn with a bare NotImplementedError once the router chooses a tool."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.tools import tool

from memabra import ConfigError, create_memabra_agent
from memabra.router import LinearRouter, Similarity


@tool
def get_weather(city: str) -> str:
    """Weather forecast for a city."""
    return f"Sunny in {city}"


def _router() -> LinearRouter:
    return LinearRouter(similarity=Similarity())


def test_tools_around_a_model_without_bind_tools_are_refused_before_the_database_is_made(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    with pytest.raises(ConfigError, match=r"FakeListChatModel does not implement bind_tools") as caught:
        create_memabra_agent(FakeListChatModel(responses=["hi"]), tools=[get_weather], db=f"sqlite:///{db}")
    assert "memabra.ScriptedChatModel" in str(caught.value)
    assert not db.exists()


def test_tool_search_alone_needs_bind_tools_too() -> None:
    with pytest.raises(ConfigError, match=r"bind_tools"):
        create_memabra_agent(FakeListChatModel(responses=["hi"]), tool_search=True, db="sqlite://", router=_router())


@pytest.mark.parametrize("tools_kwargs", [{}, {"tools": [get_weather], "max_tool_rounds": 0}])
def test_a_model_without_bind_tools_still_runs_an_agent_that_binds_none(tools_kwargs: dict[str, object]) -> None:
    model = FakeListChatModel(responses=["Hello."])
    with create_memabra_agent(model, db="sqlite://", router=_router(), **tools_kwargs) as agent:  # type: ignore[arg-type]
        out = agent.invoke(
            {"messages": [("user", "Weather in Oslo?")]},
            {"configurable": {"thread_id": "t"}},
            context={"user_id": "ann"},
        )
    assert out["messages"][-1].content == "Hello."
