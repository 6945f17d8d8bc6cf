"""memabra inside an application's own LangGraph graphs: a pydantic state, a subgraph node, Send
fan-out, stream modes, callbacks, two agents on one log, and a run's recursion_limit."""

from __future__ import annotations

import operator
import time
from typing import Annotated, Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Send
from pydantic import BaseModel, Field
from runtime.conftest import get_weather
from typing_extensions import TypedDict

from factories import route_model_finish
from fakes import ScriptedChatModel
from memabra import MemabraNodes, create_memabra_agent
from memabra._agent import build_session
from memabra.router import HybridRouter, Similarity
from memabra.storage import EpisodeLog

USER = {"user_id": "ann"}


def weather_call(n: int = 1) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": "get_weather", "args": {"city": "Lyon"}, "id": f"call-{n}"}])


def _agent(log: EpisodeLog, replies: list[AIMessage], tools: list[Any] | None = None, **kwargs: Any) -> Any:
    model = ScriptedChatModel(replies=replies)
    agent = create_memabra_agent(
        model, tools=tools or [get_weather], db=log, router=HybridRouter(similarity=Similarity(encoder=None)), **kwargs
    )
    return agent, model


class PydanticState(BaseModel):
    messages: Annotated[list[AnyMessage], add_messages] = Field(default_factory=list)
    memabra_turn: str | None = None
    memabra_episode_id: str | None = None
    notes: Annotated[list[str], operator.add] = Field(default_factory=list)


def test_memabra_nodes_serve_a_graph_whose_state_is_a_pydantic_model(log: EpisodeLog) -> None:
    """Your node receives the pydantic model itself, not a dict: the nodes' helpers read it."""
    session = build_session(tools=[get_weather], db=log, router=HybridRouter(similarity=Similarity(encoder=None)))
    session.memory.remember("ann", "I live in Lyon")
    nodes = MemabraNodes(session)
    model = ScriptedChatModel(replies=[AIMessage("Sunny in Lyon")])

    def model_node(state: PydanticState) -> dict[str, Any]:
        bound = model.bind_tools(nodes.tools(state, [get_weather]))
        started = time.perf_counter()
        reply = bound.invoke([SystemMessage(nodes.system_prompt(state)), *state.messages])
        nodes.record_model_call(state, reply, (time.perf_counter() - started) * 1000.0)
        return {"messages": [reply], "notes": ["model"]}

    builder = route_model_finish(PydanticState, nodes, model_node)
    out = builder.compile().invoke({"messages": [HumanMessage("weather where I live?")]}, context=USER)
    episode = log.get_episode(out["memabra_episode_id"])
    assert [s.status for s in episode.steps] == ["ok"] and episode.answer == "Sunny in Lyon"
    assert "I live in Lyon" in str(model.calls[0][0][0].content) and out["notes"] == ["model"]


def test_a_run_out_of_steps_ends_its_turn_logged_instead_of_raising_mid_turn(log: EpisodeLog) -> None:
    """A model that keeps calling tools meets the run's recursion_limit before max_tool_rounds:
    the turn ends at ``finish`` while it still can, its last calls answered and logged as not run."""
    agent, _ = _agent(log, [weather_call(n) for n in range(20)], max_tool_rounds=10)
    config = {"configurable": {"thread_id": "loop"}, "recursion_limit": 8}
    out = agent.invoke({"messages": [HumanMessage("weather in Lyon?")]}, config, context=USER)
    episode = log.get_episode(out["memabra_episode_id"])
    # route, then two rounds (agent, tools), then agent and finish: 8 steps; the third round is not run
    assert [s.status for s in episode.steps if s.kind.value == "tool"] == ["ok", "ok", "error"]
    assert "recursion_limit" in str(episode.steps[-1].error)
    last = out["messages"][-1]
    assert isinstance(last, ToolMessage) and last.status == "error" and "recursion_limit" in str(last.content)
    assert not agent.session.running_turns("loop")


class Parent(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    memabra_episode_id: str | None  # shared with the agent's state: the parent's result names the episode
    trail: Annotated[list[str], operator.add]


def test_the_agent_as_a_subgraph_node_streamed_with_subgraphs_logs_each_turn_once(log: EpisodeLog) -> None:
    agent, _ = _agent(log, [weather_call(), AIMessage("Sunny")])
    builder = StateGraph(Parent)
    builder.add_node("before", lambda state: {"trail": ["before"]})
    builder.add_node("memabra", agent.graph)
    builder.add_edge(START, "before")
    builder.add_edge("before", "memabra")
    builder.add_edge("memabra", END)
    parent = builder.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "parent"}}
    chunks = list(
        parent.stream(
            {"messages": [HumanMessage("weather in Lyon?")]},
            config,
            context=USER,
            subgraphs=True,
            stream_mode="updates",
        )
    )
    inner = [next(iter(update)) for namespace, update in chunks if namespace]
    assert inner == ["route", "agent", "tools", "agent", "finish"]
    episode_id = parent.get_state(config).values["memabra_episode_id"]
    assert log.count_episodes() == 1 and [s.status for s in log.get_episode(episode_id).steps] == ["ok"] * 3


def test_send_fan_out_runs_one_logged_turn_per_branch_of_one_thread(log: EpisodeLog) -> None:
    agent, _ = _agent(log, [AIMessage("done")])

    class Fan(TypedDict, total=False):
        questions: list[str]
        episodes: Annotated[list[str], operator.add]

    def ask(branch: dict[str, str], config: RunnableConfig) -> dict[str, Any]:
        out = agent.invoke({"messages": [HumanMessage(branch["question"])]}, config)
        return {"episodes": [out["memabra_episode_id"]]}

    builder = StateGraph(Fan)
    builder.add_node("ask", ask)
    builder.add_conditional_edges(START, lambda s: [Send("ask", {"question": q}) for q in s["questions"]], ["ask"])
    builder.add_edge("ask", END)
    graph = builder.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "fan", "user_id": "ann"}}
    out = graph.invoke({"questions": ["weather in Lyon", "weather in Oslo", "weather in Rome"]}, config)
    assert len(set(out["episodes"])) == 3 == log.count_episodes()
    assert not agent.session.running_turns("fan")


def test_two_agents_on_one_log_offer_only_their_own_tools_and_take_their_own_feedback(log: EpisodeLog) -> None:
    @tool
    def refund(order: str) -> str:
        """Refund an order's payment."""
        return "refunded"

    support, support_model = _agent(
        log, [AIMessage("", tool_calls=[{"name": "refund", "args": {"order": "1"}, "id": "r"}])]
    )
    billing, billing_model = _agent(log, [AIMessage("ok")], tools=[refund])
    question = {"messages": [HumanMessage("refund my order 1 and tell me the weather")]}
    by_support = support.invoke(question, {"configurable": {"thread_id": "s"}}, context=USER)
    by_billing = billing.invoke(question, {"configurable": {"thread_id": "b"}}, context=USER)
    assert {name for _, bound in support_model.calls for name in bound} <= {"get_weather"}
    assert {name for _, bound in billing_model.calls for name in bound} <= {"refund"}
    support_episode = log.get_episode(by_support["memabra_episode_id"])
    assert "not available" in str(support_episode.steps[1].error)  # billing's tool is refused, not run
    billing.feedback(by_billing["memabra_episode_id"], accepted=False)
    assert log.feedback_for(by_billing["memabra_episode_id"]) and not log.feedback_for(by_support["memabra_episode_id"])


class _Tracer(BaseCallbackHandler):
    def __init__(self) -> None:
        self.runs: list[tuple[str, tuple[str, ...], Any]] = []

    def on_chain_start(self, serialized: Any, inputs: Any, **kwargs: Any) -> None:
        self.runs.append(
            (str(kwargs.get("name")), tuple(kwargs.get("tags") or ()), (kwargs.get("metadata") or {}).get("app"))
        )

    def on_chat_model_start(self, serialized: Any, messages: Any, **kwargs: Any) -> None:
        self.runs.append(("chat_model", tuple(kwargs.get("tags") or ()), (kwargs.get("metadata") or {}).get("app")))


def test_a_tracer_callback_sees_memabra_s_nodes_and_the_model_call_with_the_run_s_tags(log: EpisodeLog) -> None:
    agent, _ = _agent(log, [AIMessage("Sunny")])
    tracer = _Tracer()
    config = {"configurable": {"thread_id": "t"}, "callbacks": [tracer], "tags": ["prod"], "metadata": {"app": "x"}}
    agent.invoke({"messages": [HumanMessage("weather?")]}, config, context=USER)
    names = [name for name, _, _ in tracer.runs]
    assert {"route", "agent", "finish", "chat_model"} <= set(names)
    assert all("prod" in tags and app == "x" for _, tags, app in tracer.runs)
