"""The run's user where LangGraph's Agent Server authenticated the request that created the run
(its custom auth puts the identity in ``configurable["langgraph_auth_user_id"]``): that identity,
never another user named in the run's context or config."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.runtime import Runtime

from memabra import ExtractiveChatModel, create_memabra_agent
from memabra._errors import InvalidRecordError
from memabra._graph_io import AUTH_USER_KEY, run_user_id
from memabra.storage import EpisodeLog


def _runtime(context: Any) -> Runtime[Any]:
    return Runtime(context=context)


@pytest.mark.parametrize(
    ("context", "configurable", "user"),
    [
        ({"user_id": "ann"}, {}, "ann"),
        (None, {"user_id": "ann"}, "ann"),
        (None, {AUTH_USER_KEY: "ann"}, "ann"),
        ({"user_id": "ann"}, {AUTH_USER_KEY: "ann"}, "ann"),
        (None, {"user_id": "ann", AUTH_USER_KEY: "ann"}, "ann"),
        ({"user_id": "ann"}, {AUTH_USER_KEY: ""}, "ann"),  # an unauthenticated request: no identity
        ({"user_id": "ann"}, {AUTH_USER_KEY: None}, "ann"),
    ],
)
def test_the_runs_user(context: Any, configurable: dict[str, Any], user: str) -> None:
    assert run_user_id(_runtime(context), {"configurable": configurable}) == user


@pytest.mark.parametrize(
    ("context", "configurable"),
    [({"user_id": "bob"}, {AUTH_USER_KEY: "ann"}), (None, {"user_id": "bob", AUTH_USER_KEY: "ann"})],
)
def test_another_user_than_the_authenticated_one_is_refused(context: Any, configurable: dict[str, Any]) -> None:
    with pytest.raises(InvalidRecordError, match="names user 'bob' but the server authenticated 'ann'"):
        run_user_id(_runtime(context), {"configurable": configurable})


def test_an_agent_run_for_another_user_routes_nothing(log: EpisodeLog) -> None:
    agent = create_memabra_agent(ExtractiveChatModel(), db=log)
    config: Any = {"configurable": {"thread_id": "t", AUTH_USER_KEY: "ann"}}
    with pytest.raises(InvalidRecordError, match="authenticated 'ann'"):
        agent.invoke({"messages": [HumanMessage("Where do I live?")]}, config, context={"user_id": "bob"})
    assert log.count_episodes() == 0 and not log.suspended_turns()
    out = agent.invoke({"messages": [HumanMessage("Where do I live?")]}, config)
    assert log.get_episode(out["memabra_episode_id"]).user_id == "ann"
