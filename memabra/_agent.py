"""``create_memabra_agent``: a LangGraph agent that routes its own context.

The graph::

    START -> route -> agent <-> tools
                        |
                        v
                      finish -> END

``route`` asks the router which memories, skills and tools enter the context; ``agent`` calls the
chat model with the chosen memories and skill instructions in its system prompt and only the
chosen tools bound; ``tools`` runs the model's tool calls as LangGraph's ``ToolNode`` does
(:mod:`memabra._agent_tools`), recording arguments, result, error and latency; ``finish`` answers
any call left unrun (over ``max_tool_rounds``, or with too few of the run's ``recursion_limit``
steps left to run it and still reach ``finish``), logs the episode with its immediate reward terms
and learns from every reward that has become final. A chat model that raises ends the run with its
exception, after the turn is logged as failed. The per-run user comes through LangGraph's
``Runtime`` context (``context={"user_id": ...}``), with the tools the run may use
(``allowed_tools``: :class:`MemabraContext`); the thread id from
``config["configurable"]["thread_id"]``, as checkpointers expect.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, TypedDict

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langchain_core.tools import BaseTool
from langgraph.errors import GraphBubbleUp, GraphInterrupt
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.managed import RemainingSteps
from langgraph.runtime import Runtime, get_runtime
from langgraph.store.base import BaseStore
from langgraph.types import Checkpointer

from memabra._agent_tools import ToolRunner, acurrent_turn
from memabra._build import build_session, resolve_model
from memabra._catalog import Skill, as_tools, tool_items
from memabra._errors import ConfigError, InvalidRecordError
from memabra._graph_io import message_text, run_allowed_tools, run_thread_id, run_user_id, token_usage
from memabra._graph_steps import (
    close_failed_turn,
    current_turn,
    cut_off_error,
    error_text,
    finishing_turn,
    out_of_steps_error,
    refuse,
)
from memabra._memabra_agent import MemabraAgent
from memabra._memory import FactExtractor, LLMFactExtractor, MemoryBackend
from memabra._nodes import followed_episode
from memabra._records import Budget, Step
from memabra._reward import RewardConfig
from memabra._session import RoutingSession, Turn
from memabra._settings import SessionSettings
from memabra._superseded import close_superseded
from memabra._tool_search import ToolSearch
from memabra._trace import trace_decision
from memabra._turns import model_step
from memabra.router import Router
from memabra.storage import EpisodeLog

__all__ = ["MemabraAgent", "MemabraContext", "MemabraState", "build_session", "create_memabra_agent"]


@dataclass(frozen=True, slots=True)
class MemabraContext:
    """Per-run context: whose turn this is. Optional where LangGraph's Agent Server authenticated
    the run's request: the authenticated identity is the user then (a run naming another is refused).

    ``allowed_tools``: the names of the tools this run may use (``None``: every tool the agent has;
    empty: none; memories and skills are routed either way). Only those are offered to the router
    and found by ``find_tools``; a name the agent has no tool of is refused. The context is what the
    caller passes (on the Agent Server, the client): set it server side, from your own authenticated
    user, for it to enforce a permission."""

    user_id: str | None = None
    allowed_tools: Collection[str] | None = None


class MemabraState(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    memabra_turn: str
    memabra_episode_id: str | None  # None: a run whose turn was logged elsewhere (abandoned while paused)
    memabra_tool_rounds: int  # replies of this turn that asked for tools
    # steps left before the run's recursion_limit: a round of tools is run only while the turn
    # can still reach ``finish`` after it, so a run out of steps ends logged, not raising mid-turn
    memabra_remaining_steps: RemainingSteps


# A round of tools from the agent node: tools, agent, then finish; each must run within the limit.
_STEPS_FOR_A_ROUND = 4


class _ModelStep(RunnableLambda[Any, Any]):
    """The agent node: the model called on the routed context, sync or async."""

    @property
    def deps(self) -> list[Runnable[Any, Any]]:
        # RunnableLambda computes this through langchain_core's module-level lru_cache keyed by the
        # function (langchain-ai/langchain#30667): keyed by a bound method, it kept the last 256
        # agents built alive, each with its engine, pool and router. The step calls the model only.
        return []


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
        self.tool_search = ToolSearch(tool_items(tools), session.encoder) if tool_search and tools else None
        self.model = model
        self.tools = {t.name: t for t in tools}
        self.runner = ToolRunner(session, tools, self.tool_search)
        self.system_prompt = system_prompt
        self.max_tool_rounds = max_tool_rounds
        self.model_name = getattr(model, "model_name", None) or getattr(model, "model", None) or type(model).__name__

    # --- route
    def route(self, state: MemabraState, config: RunnableConfig, runtime: Runtime[MemabraContext]) -> dict[str, Any]:
        messages = state.get("messages", [])
        humans = [m for m in messages if isinstance(m, HumanMessage)]
        if not humans:
            raise InvalidRecordError("memabra routes on the user's message: the input holds no HumanMessage")
        # an earlier turn the thread's state names, never logged, that this run cannot go on with
        superseded = close_superseded(self.session, state, messages, config)
        if superseded is not None and self.tool_search is not None:
            self.tool_search.end(state["memabra_turn"])
        turn = self.session.begin(
            user_id=run_user_id(runtime, config),
            query=message_text(humans[-1]),
            thread_id=run_thread_id(config),
            turn=len(humans) - 1,
            allowed_tools=run_allowed_tools(runtime),
            follows=followed_episode(state, config, superseded, len(humans) - 1),
        )
        trace_decision(turn, config)
        return {"memabra_turn": turn.id, "memabra_tool_rounds": 0}

    # --- agent
    def _turn(self, state: MemabraState, config: RunnableConfig) -> Turn:
        messages = state.get("messages", [])
        return current_turn(self.session, state["memabra_turn"], messages, get_runtime(), config)

    def _prepare(self, turn: Turn, state: MemabraState) -> tuple[Any, list[AnyMessage]]:
        system = "\n\n".join(p for p in (self.system_prompt, turn.system_prompt) if p)
        chosen = [self.tools[name] for name in turn.tool_names if name in self.tools]
        allowed = run_allowed_tools(get_runtime())
        if self.tool_search is not None and (allowed is None or allowed):  # a run allowed no tool gets none
            chosen.append(self.runner.find_tools(self.tool_search, turn, allowed))
        bound = self.model.bind_tools(chosen) if chosen else self.model
        conversation = [m for m in state.get("messages", []) if not isinstance(m, SystemMessage)]
        return bound, ([SystemMessage(system)] if system else []) + conversation

    def _replied(self, state: MemabraState, reply: AIMessage, started: float) -> dict[str, Any]:
        inp, out = token_usage(reply)
        self.session.record_model_call(
            state["memabra_turn"],
            str(self.model_name),
            (time.perf_counter() - started) * 1000.0,
            input_tokens=inp,
            output_tokens=out,
        )
        update: dict[str, Any] = {"messages": [reply]}
        if reply.tool_calls:  # a round the model asked for; after_agent runs it while within the limit
            update["memabra_tool_rounds"] = state.get("memabra_tool_rounds", 0) + 1
        return update

    def _failed_step(self, exc: Exception, started: float) -> Step:
        ms = (time.perf_counter() - started) * 1000.0
        return model_step(str(self.model_name), ms, None, None, status="error", error=error_text(exc))

    def _close_failed(self, turn_id: str, step: Step) -> None:
        # The exception still reaches the caller; the turn is logged first, as a failure.
        if self.tool_search is not None:
            self.tool_search.end(turn_id)
        close_failed_turn(self.session, turn_id, step)

    # agent and aagent differ only in ``invoke`` vs ``await ainvoke`` (a deliberate repeat).
    def agent(self, state: MemabraState, config: RunnableConfig) -> dict[str, Any]:
        turn = self._turn(state, config)
        started = time.perf_counter()
        try:
            bound, messages = self._prepare(turn, state)
            reply = bound.invoke(messages)
        except GraphInterrupt:  # the run pauses: the turn is kept for whichever process resumes it
            self.session.suspend(turn.id)
            raise
        except GraphBubbleUp:
            raise
        except Exception as exc:
            self._close_failed(state["memabra_turn"], self._failed_step(exc, started))
            raise
        return self._replied(state, reply, started)

    # Off the event loop (as in the async tool calls, memabra._agent_tools): a turn going on after
    # a pause, and logging a failed turn (the log's transaction, its facts, the learner's step).
    async def aagent(self, state: MemabraState, config: RunnableConfig) -> dict[str, Any]:
        turn = await acurrent_turn(
            self.session, state["memabra_turn"], state.get("messages", []), get_runtime(), config
        )
        started = time.perf_counter()
        try:
            bound, messages = self._prepare(turn, state)
            reply = await bound.ainvoke(messages)
        except GraphInterrupt:
            await asyncio.to_thread(self.session.suspend, turn.id)  # a database write: off the event loop
            raise
        except GraphBubbleUp:
            raise
        except Exception as exc:
            await asyncio.to_thread(self._close_failed, state["memabra_turn"], self._failed_step(exc, started))
            raise
        return self._replied(state, reply, started)

    def after_agent(self, state: MemabraState) -> str:
        last = state["messages"][-1]
        if (
            getattr(last, "tool_calls", None)
            and state.get("memabra_tool_rounds", 0) <= self.max_tool_rounds
            and state.get("memabra_remaining_steps", _STEPS_FOR_A_ROUND) >= _STEPS_FOR_A_ROUND
        ):
            return "tools"
        return "finish"

    # --- finish
    def _unanswered(self, turn_id: str | None, last: AnyMessage, cut_off: str) -> list[ToolMessage]:
        """Answers to the calls of a last reply that no tool ran: cut off (``cut_off`` says by which
        limit), or with arguments that did not parse. A thread whose tool call has no answer is refused by the chat
        APIs on every later turn; each answer is logged as a failed tool step (E in the reward) of
        ``turn_id`` (``None``: the run has no turn to log)."""
        if not isinstance(last, AIMessage):
            return []
        answers = [refuse(self.session, turn_id, c, cut_off) for c in last.tool_calls]
        for bad in last.invalid_tool_calls:
            if bad.get("id"):
                error = f"not run: its arguments could not be parsed ({bad.get('error') or 'invalid JSON'})"
                answers.append(refuse(self.session, turn_id, {"name": bad.get("name"), "id": bad["id"]}, error))
        return answers

    def finish(self, state: MemabraState) -> dict[str, Any]:
        # paused before this node: goes on here; none where its turn was abandoned meanwhile
        turn = finishing_turn(self.session, state["memabra_turn"], state["messages"])
        last = state["messages"][-1]
        # within the round limit, calls left unrun were cut off by the run's recursion_limit
        over_rounds = state.get("memabra_tool_rounds", 0) > self.max_tool_rounds
        cut_off = cut_off_error(self.max_tool_rounds) if over_rounds else out_of_steps_error()
        answers = self._unanswered(turn.id if turn is not None else None, last, cut_off)
        answer = message_text(last) if isinstance(last, AIMessage) and not answers else ""
        if self.tool_search is not None:
            self.tool_search.end(state["memabra_turn"])
        # no turn: the run has no episode of its own (and must not name the previous turn's)
        episode_id = self.session.finish(turn.id, answer) if turn is not None else None
        update: dict[str, Any] = {"memabra_episode_id": episode_id}
        if answers:
            update["messages"] = answers
        return update


# Kept for callers of the old private name (the demo command).
_resolve_model = resolve_model


def _refuse_without_bind_tools(chat: BaseChatModel) -> None:
    """Refuse, before any database is opened, a model that cannot take the tools it is given:
    without this, the first turn whose slate holds a tool failed mid-run with a bare
    ``NotImplementedError`` from LangChain (its fake chat models are the usual case, in tests)."""
    if type(chat).bind_tools is BaseChatModel.bind_tools:
        raise ConfigError(
            f"the chat model {type(chat).__name__} does not implement bind_tools, so it cannot be given the tools "
            "the router chooses; pass a model that supports tool calling (in tests, memabra.ScriptedChatModel: "
            "a scripted model that takes tools), or build the agent without tools (max_tool_rounds=0)"
        )


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
    token_counter: Callable[[str], int] | None = None,
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
    fetch a tool the router left out (recorded as needed and missed). ``max_tool_rounds`` caps the
    rounds of tool calls one turn runs: calls made past it are answered "not run" and logged as
    failed tool steps; 0 makes an agent that runs no tools (they are neither routed nor bound).
    ``settings`` (a :class:`~memabra.SessionSettings`) holds how to route and learn; ``budget``,
    ``reward``, ``learn``, ``snapshot_every``, ``local_credit`` and ``token_counter`` (the model's
    tokenizer, counting what candidates cost) given here replace its fields.

    On a log that already holds an active snapshot of the router's policy, the agent resumes it; a
    promote or rollback reaches it within ``settings.reload_interval_s`` seconds; ``close()`` (or
    ``with create_memabra_agent(...) as agent:``, or process exit) saves what it learned since the
    last snapshot.
    """
    if isinstance(max_tool_rounds, bool) or not isinstance(max_tool_rounds, int) or max_tool_rounds < 0:
        raise ConfigError(f"max_tool_rounds must be a non-negative integer (0: run no tools), got {max_tool_rounds!r}")
    if max_tool_rounds == 0 and tool_search:
        raise ConfigError("tool_search=True needs max_tool_rounds of at least 1: find_tools is a tool call")
    chat = resolve_model(model)
    given = as_tools(tools)  # checked even when unused: a bad tool is a mistake either way
    tool_list = given if max_tool_rounds > 0 else []
    if tool_list or tool_search:
        _refuse_without_bind_tools(chat)
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
        token_counter=token_counter,
    )
    nodes = _Graph(session, chat, tool_list, system_prompt, max_tool_rounds, tool_search)
    builder = StateGraph(MemabraState, context_schema=MemabraContext)
    # langgraph runs a node taking (state, config, runtime), but no add_node overload spells that shape
    builder.add_node("route", nodes.route)  # type: ignore[call-overload, unused-ignore]
    builder.add_node("agent", _ModelStep(nodes.agent, afunc=nodes.aagent, name="agent"))
    builder.add_node("tools", nodes.runner.node())
    builder.add_node("finish", nodes.finish)
    builder.add_edge(START, "route")
    builder.add_edge("route", "agent")
    builder.add_conditional_edges("agent", nodes.after_agent, {"tools": "tools", "finish": "finish"})
    builder.add_edge("tools", "agent")
    builder.add_edge("finish", END)
    graph = builder.compile(checkpointer=checkpointer, store=store, name="memabra_agent")
    return MemabraAgent(graph, session)
