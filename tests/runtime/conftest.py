from __future__ import annotations

from collections.abc import Iterator

import pytest
from langchain_core.tools import ToolException, tool

from memabra._session import RoutingSession
from memabra.router import HybridRouter, Similarity
from memabra.storage import EpisodeLog


@pytest.fixture
def lexical() -> Similarity:
    """BM25 only: the runtime tests are about the loop, not about embeddings."""
    return Similarity(encoder=None)


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    if not city.strip():
        raise ValueError("city is required")
    return f"sunny and 21C in {city}"


@tool
def convert_units(value: float, unit: str) -> str:
    """Convert a quantity between metric and imperial units."""
    return f"{value} {unit}"


@tool
def get_forecast(city: str) -> str:
    """Weather forecast for a city; reports failures to the model instead of raising."""
    if not city.strip():
        raise ToolException("city is required")
    return f"rain tomorrow in {city}"


get_forecast.handle_tool_error = True


@pytest.fixture
def tools() -> list:  # type: ignore[type-arg]
    return [get_weather, convert_units, get_forecast]


@pytest.fixture
def processes(log: EpisodeLog, lexical: Similarity, tools: list) -> Iterator[tuple[RoutingSession, RoutingSession]]:  # type: ignore[type-arg]
    """Two workers over one log, each with its own turns in flight (a ``RoutingSession`` each)."""
    a, b = (
        RoutingSession.with_tools(tools=tools, router=HybridRouter(similarity=lexical), log=log, learn=False)
        for _ in range(2)
    )
    yield a, b
    a.close()
    b.close()
