"""``create_memabra_agent``: a LangGraph agent that routes its own context.

The graph::

    START -> route -> agent <-> tools
                        |
                        v
                      finish -> END

``route`` asks the router which memories, skills and tools enter the context; ``agent`` calls the
chat model with the chosen memories and skill instructions in its system prompt and only the
chosen tools bound; ``tools`` runs the model's tool calls, recording arguments, result, error and
latency; ``finish`` logs the episode with its immediate reward terms and learns from every reward
that has become final. The per-run user comes through LangGraph's ``Runtime`` context
(``context={"user_id": ...}``); the thread id from ``config["configurable"]["thread_id"]``, as
checkpointers expect.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, TypedDict

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.tools import BaseTool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.runtime import Runtime
from langgraph.store.base import BaseStore
from langgraph.types import Checkpointer

from memabra._build import build_session, resolve_model
from memabra._catalog import Skill, as_tools, tool_items
from memabra._errors import InvalidRecordError
from memabra._graph_io import message_text, run_thread_id, run_user_id, token_usage
from memabra._memory import FactExtractor, LLMFactExtractor, MemoryBackend
from memabra._records import Budget, FeedbackKind, FeedbackReceipt
from memabra._reward import RewardConfig
from memabra._session import RoutingSession
from memabra._settings import SessionSettings
from memabra._tool_search import FIND_TOOLS, ToolSearch
from memabra.router import Router
from memabra.storage import EpisodeLog

__all__ = ["MemabraAgent", "MemabraContext", "MemabraState", "build_session", "create_memabra_agent"]


@dataclass(frozen=True, slots=True)
class MemabraContext:
    """Per-run context: whose turn this is."""

    user_id: str


class MemabraState(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    memabra_turn: str
    memabra_episode_id: str
    memabra_tool_rounds: int


def _bind(turn: Any, names: Sequence[str]) -> None:
    """Tools fetched by ``find_tools`` are bound for the rest of the turn."""
    turn.tool_names = tuple(dict.fromkeys((*turn.tool_names, *names)))


class _Graph:
    """The nodes, bound to one session, model and tool set."""

    def __init__(
        self,
        session: RoutingSession,
        model: BaseChatModel,
        tools: Sequence[BaseTool],
        system_prompt: str,
        max_tool_rounds: int,
        tool_search: bool = False,
    ) -> None:
        self.session = session
        self.tool_search = (
            ToolSearch(tool_items(tools), session.encoder, session.missing_tools) if tool_search and tools else None
        )
        self.model = model
        self.tools = {t.name: t for t in tools}
        self.system_prompt = system_prompt
        self.max_tool_rounds = max_tool_rounds
        self.model_name = getattr(model, "model_name", None) or getattr(model, "model", None) or type(model).__name__

    # --- route
    def route(self, state: MemabraState, config: RunnableConfig, runtime: Runtime[MemabraContext]) -> dict[str, Any]:
        messages = state.get("messages", [])
        humans = [m for m in messages if isinstance(m, HumanMessage)]
        if not humans:
            raise InvalidRecordError("memabra routes on the user's message: the input holds no HumanMessage")
        turn = self.session.begin(
            user_id=run_user_id(runtime, config),
            query=message_text(humans[-1]),
            thread_id=run_thread_id(config),
            turn=len(humans) - 1,
        )
        return {"memabra_turn": turn.id, "memabra_tool_rounds": 0}

    # --- agent
    def _prepare(self, state: MemabraState) -> tuple[Any, list[AnyMessage]]:
        turn = self.session.get_turn(state["memabra_turn"])
        system = "\n\n".join(p for p in (self.system_prompt, turn.system_prompt) if p)
        chosen = [self.tools[name] for name in turn.tool_names if name in self.tools]
        if self.tool_search is not None:
            chosen.append(self.tool_search.tool(turn.id, turn.tool_names, lambda names: _bind(turn, names)))
        bound = self.model.bind_tools(chosen) if chosen else self.model
        conversation = [m for m in state.get("messages", []) if not isinstance(m, SystemMessage)]
        return bound, ([SystemMessage(system)] if system else []) + conversation

    def _record_model(self, state: MemabraState, reply: AIMessage, started: float) -> None:
        inp, out = token_usage(reply)
        self.session.record_model_call(
            state["memabra_turn"],
            str(self.model_name),
            (time.perf_counter() - started) * 1000.0,
            input_tokens=inp,
            output_tokens=out,
        )

    def agent(self, state: MemabraState) -> dict[str, Any]:
        bound, messages = self._prepare(state)
        started = time.perf_counter()
        reply = bound.invoke(messages)
        self._record_model(state, reply, started)
        return {"messages": [reply]}

    async def aagent(self, state: MemabraState) -> dict[str, Any]:
        bound, messages = self._prepare(state)
        started = time.perf_counter()
        reply = await bound.ainvoke(messages)
        self._record_model(state, reply, started)
        return {"messages": [reply]}

    # --- tools
    def _calls(self, state: MemabraState) -> list[dict[str, Any]]:
        last = state["messages"][-1]
        return list(getattr(last, "tool_calls", []) or [])

    def _tool(self, state: MemabraState, name: str) -> BaseTool:
        if name == FIND_TOOLS and self.tool_search is not None:
            turn = self.session.get_turn(state["memabra_turn"])
            return self.tool_search.tool(turn.id, turn.tool_names, lambda names: _bind(turn, names))
        return self.tools[name]

    def _unavailable(self, state: MemabraState, call: dict[str, Any]) -> ToolMessage | None:
        turn = self.session.get_turn(state["memabra_turn"])
        name = call["name"]
        if (name in turn.tool_names and name in self.tools) or (name == FIND_TOOLS and self.tool_search is not None):
            return None
        error = f"tool {name!r} is not available in this turn"
        self.session.record_tool_call(turn.id, name, call.get("args") or {}, result=None, status="error", error=error)
        return ToolMessage(content=f"Error: {error}", tool_call_id=call["id"], name=name, status="error")

    def _done(self, state: MemabraState, call: dict[str, Any], output: Any, started: float) -> ToolMessage:
        text = output if isinstance(output, str) else json.dumps(output, default=str)
        ms = (time.perf_counter() - started) * 1000.0
        self.session.record_tool_call(
            state["memabra_turn"], call["name"], call.get("args") or {}, result=text, latency_ms=ms
        )
        if self.tool_search is not None:
            turn = self.session.get_turn(state["memabra_turn"])
            self.tool_search.used(turn.id, turn.episode_id, call["name"], turn.feedback)
        return ToolMessage(content=text, tool_call_id=call["id"], name=call["name"])

    def _failed(self, state: MemabraState, call: dict[str, Any], exc: Exception, started: float) -> ToolMessage:
        # A failing tool is an outcome to log and show the model, not a crash.
        error = f"{type(exc).__name__}: {exc}"
        ms = (time.perf_counter() - started) * 1000.0
        self.session.record_tool_call(
            state["memabra_turn"],
            call["name"],
            call.get("args") or {},
            result=None,
            status="error",
            error=error,
            latency_ms=ms,
        )
        return ToolMessage(content=f"Error: {error}", tool_call_id=call["id"], name=call["name"], status="error")

    # run_tools and arun_tools differ only in ``invoke`` vs ``await ainvoke`` (a deliberate repeat:
    # one loop for both would need a generator protocol that reads worse than the two copies).
    def run_tools(self, state: MemabraState) -> dict[str, Any]:
        results = []
        for call in self._calls(state):
            refused = self._unavailable(state, call)
            if refused is not None:
                results.append(refused)
                continue
            started = time.perf_counter()
            try:
                output = self._tool(state, call["name"]).invoke(call.get("args") or {})
            except Exception as exc:
                results.append(self._failed(state, call, exc, started))
            else:
                results.append(self._done(state, call, output, started))
        return {"messages": results, "memabra_tool_rounds": state.get("memabra_tool_rounds", 0) + 1}

    async def arun_tools(self, state: MemabraState) -> dict[str, Any]:
        results = []
        for call in self._calls(state):
            refused = self._unavailable(state, call)
            if refused is not None:
                results.append(refused)
                continue
            started = time.perf_counter()
            try:
                output = await self._tool(state, call["name"]).ainvoke(call.get("args") or {})
            except Exception as exc:
                results.append(self._failed(state, call, exc, started))
            else:
                results.append(self._done(state, call, output, started))
        return {"messages": results, "memabra_tool_rounds": state.get("memabra_tool_rounds", 0) + 1}

    def after_agent(self, state: MemabraState) -> str:
        if self._calls(state) and state.get("memabra_tool_rounds", 0) < self.max_tool_rounds:
            return "tools"
        return "finish"

    # --- finish
    def finish(self, state: MemabraState) -> dict[str, Any]:
        last = state["messages"][-1]
        answer = message_text(last) if isinstance(last, AIMessage) else ""
        if self.tool_search is not None:
            self.tool_search.end(state["memabra_turn"])
        episode_id = self.session.finish(state["memabra_turn"], answer)
        return {"memabra_episode_id": episode_id}


class MemabraAgent:
    """A compiled LangGraph agent plus memabra's feedback API.

    ``invoke`` / ``ainvoke`` / ``stream`` / ``astream`` / ``get_state`` behave as on the compiled
    graph (``graph``); the result's ``memabra_episode_id`` names the logged episode.
    """

    # Deliberate repeats: the feedback, learning and close methods below forward to the session's
    # with the same signatures, so an application holds one object (``duplicates`` pairs them).

    def __init__(self, graph: Any, session: RoutingSession) -> None:
        self.graph = graph
        self.session = session

    @property
    def router(self) -> Router:
        return self.session.router

    @property
    def log(self) -> EpisodeLog:
        return self.session.log

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        return self.graph.invoke(input, config, **kwargs)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        return await self.graph.ainvoke(input, config, **kwargs)

    def stream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Iterator[Any]:
        chunks: Iterator[Any] = self.graph.stream(input, config, **kwargs)
        return chunks

    def astream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> AsyncIterator[Any]:
        chunks: AsyncIterator[Any] = self.graph.astream(input, config, **kwargs)
        return chunks

    def get_state(self, config: RunnableConfig, **kwargs: Any) -> Any:
        return self.graph.get_state(config, **kwargs)

    def close(self) -> None:
        """Save what was learned since the last snapshot and release the learner lease."""
        self.session.close()

    def __enter__(self) -> MemabraAgent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def feedback(
        self,
        episode_id: str,
        *,
        kind: FeedbackKind | str = FeedbackKind.EXPLICIT,
        source: str = "api",
        idempotency_key: str | None = None,
        **payload: Any,
    ) -> FeedbackReceipt:
        """Explicit feedback on an episode, e.g. ``agent.feedback(eid, correct=False, correction="I'm vegan")``.
        Keys are those of :data:`memabra.FEEDBACK_KEYS`."""
        return self.session.feedback(episode_id, kind=kind, source=source, idempotency_key=idempotency_key, **payload)


# Kept for callers of the old private name (the demo command).
_resolve_model = resolve_model


def create_memabra_agent(
    model: BaseChatModel | str,
    *,
    tools: Sequence[BaseTool | Any] = (),
    skills: Sequence[Skill] = (),
    memory: MemoryBackend | BaseStore | None = None,
    router: Router | None = None,
    db: str | EpisodeLog | None = None,
    budget: Budget | None = None,
    reward: RewardConfig | None = None,
    system_prompt: str = "",
    extract_with_model: bool = False,
    extractor: FactExtractor | None = None,
    learn: bool | None = None,
    checkpointer: Checkpointer = None,
    store: BaseStore | None = None,
    max_tool_rounds: int = 4,
    snapshot_every: int | None = None,
    local_credit: bool | None = None,
    settings: SessionSettings | None = None,
    tool_search: bool = False,
) -> MemabraAgent:
    """Build a LangGraph agent whose context is chosen by a learning router.

    ``model``: a LangChain chat model or a ``"provider:name"`` string for ``init_chat_model``.
    ``tools`` and ``skills`` are the candidates shared by every user; memories come from
    ``memory`` — memabra's SQL registry by default, or a LangGraph ``BaseStore`` (the ``store``
    passed at compile time is used when ``memory`` is omitted and ``store`` is given).
    ``router`` defaults to :class:`memabra.router.LinearRouter`; ``db`` to ``$MEMABRA_DATABASE_URL``
    or ``sqlite:///memabra.db`` (a new SQLite database gets its schema on first use; other databases
    are migrated with ``memabra db upgrade``). ``extract_with_model`` has the chat model extract
    memories from user messages instead of the rules, and decide which stored memories a new fact
    supersedes. ``tool_search`` binds a ``find_tools`` tool next to the routed ones, so the model can
    fetch a tool the router left out (recorded as needed and missed). ``settings`` (a
    :class:`~memabra.SessionSettings`) holds how to route and learn; ``budget``, ``reward``, ``learn``,
    ``snapshot_every`` and ``local_credit`` given here replace its fields.

    On a log that already holds an active snapshot of the router's policy, the agent resumes it; a
    promote or rollback reaches it within ``settings.reload_interval_s`` seconds; ``close()`` (or
    ``with create_memabra_agent(...) as agent:``, or process exit) saves what it learned since the
    last snapshot.
    """
    chat = resolve_model(model)
    tool_list = as_tools(tools)
    session = build_session(
        tools=tool_list,
        skills=skills,
        memory=memory,
        store=store,
        router=router,
        db=db,
        extractor=extractor or (LLMFactExtractor(chat) if extract_with_model else None),
        settings=settings,
        budget=budget,
        reward=reward,
        learn=learn,
        snapshot_every=snapshot_every,
        local_credit=local_credit,
    )
    nodes = _Graph(session, chat, tool_list, system_prompt, max_tool_rounds, tool_search)
    builder = StateGraph(MemabraState, context_schema=MemabraContext)
    # langgraph runs a node taking (state, config, runtime), but no add_node overload spells that shape
    builder.add_node("route", nodes.route)  # type: ignore[call-overload, unused-ignore]
    builder.add_node("agent", RunnableLambda(nodes.agent, afunc=nodes.aagent, name="agent"))
    builder.add_node("tools", RunnableLambda(nodes.run_tools, afunc=nodes.arun_tools, name="tools"))
    builder.add_node("finish", nodes.finish)
    builder.add_edge(START, "route")
    builder.add_edge("route", "agent")
    builder.add_conditional_edges("agent", nodes.after_agent, {"tools": "tools", "finish": "finish"})
    builder.add_edge("tools", "agent")
    builder.add_edge("finish", END)
    graph = builder.compile(checkpointer=checkpointer, store=store, name="memabra_agent")
    return MemabraAgent(graph, session)
