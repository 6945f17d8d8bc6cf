"""memabra as nodes of a graph of one's own (:class:`MemabraNodes`), and the routing and
logging helpers the nodes share with :class:`~memabra.MemabraMiddleware`.

A graph run with ``ainvoke`` / ``astream`` runs the sync ``route`` and ``finish`` nodes in
LangGraph's executor; an async model node of the application's runs on the event loop, so it reads
the turn through :meth:`MemabraNodes.asystem_prompt`, :meth:`MemabraNodes.atools` and
:meth:`MemabraNodes.arecord_model_call`, which keep the log's reads and writes off the loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.config import get_config
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode
from langgraph.runtime import Runtime, get_runtime
from typing_extensions import TypedDict

from memabra._agent_tools import ToolRunner, acurrent_turn, arecord
from memabra._errors import InvalidRecordError
from memabra._graph_io import message_text, run_allowed_tools, run_thread_id, run_user_id, token_usage
from memabra._graph_steps import current_turn, finishing_turn, state_field, state_turn_id
from memabra._session import RoutingSession, Turn
from memabra._superseded import _CHECKPOINTER_KEY, close_superseded
from memabra._trace import trace_decision

__all__ = ["MemabraNodeState", "MemabraNodes", "final_answer", "followed_episode", "route_turn", "run_config"]


def run_config() -> RunnableConfig | None:
    """The running graph's config; ``None`` outside a run."""
    try:
        return get_config()
    except RuntimeError:  # called outside a run
        return None


def route_turn(session: RoutingSession, state: Any, runtime: Runtime[Any]) -> str:
    """Routes a new turn on the user's last message in ``state``, offering the router only the
    tools the run's context allows (``allowed_tools``); returns its id. An earlier turn the
    thread's state names and nobody logged is logged first, as superseded (:mod:`memabra._superseded`)."""
    messages: Sequence[AnyMessage] = state_field(state, "messages", [])
    humans = [m for m in messages if isinstance(m, HumanMessage)]
    if not humans:
        raise InvalidRecordError("memabra routes on the user's message: the input holds no HumanMessage")
    config = run_config()
    superseded = close_superseded(session, state, messages, config)
    turn = session.begin(
        user_id=run_user_id(runtime, config),
        query=message_text(humans[-1]),
        thread_id=run_thread_id(config),
        turn=len(humans) - 1,
        allowed_tools=run_allowed_tools(runtime),
        follows=followed_episode(state, config, superseded, len(humans) - 1),
    )
    trace_decision(turn, config)
    return turn.id


def followed_episode(state: Any, config: RunnableConfig | None, superseded: str | None, turn: int) -> str | None:
    """The episode of the turn a new message follows on its branch of the thread, which the message
    is read as feedback on (a correction, a repeat): for a checkpointed run, the turn just
    superseded, else the one the state's ``memabra_episode_id`` names, else none for the branch's
    first turn (``""``). The thread's latest episode in the log (``None``: what
    :meth:`~memabra._session.RoutingSession.begin` reads without it) may be another branch's: the
    answer a "Regenerate" replaced, or the one of the message an "Edit" replaced, at the same
    turn position. ``None`` too for a run without a checkpointer, whose state is only its input."""
    configurable = (config or {}).get("configurable") or {}
    if configurable.get("thread_id") is None or not configurable.get(_CHECKPOINTER_KEY):
        return None
    if superseded is not None:
        return superseded
    named = state_field(state, "memabra_episode_id")
    if isinstance(named, str) and named:
        return named
    return "" if turn == 0 else None  # a turn never logged on the branch (abandoned elsewhere): the log's latest


def final_answer(messages: Sequence[AnyMessage]) -> str:
    """The run's answer: its last message, where the model wrote it."""
    last = messages[-1] if messages else None
    return message_text(last) if isinstance(last, AIMessage) else ""


class MemabraNodeState(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    memabra_turn: str
    memabra_episode_id: str | None  # None: a run whose turn was logged elsewhere (abandoned)


class MemabraNodes:
    """``route`` and ``finish`` nodes for a graph of your own::

        nodes = MemabraNodes(session)
        builder.add_node("route", nodes.route)
        builder.add_node("model", my_model_node)   # uses nodes.system_prompt(state), nodes.tools(state, all_tools)
        builder.add_node("finish", nodes.finish)
        builder.add_edge(START, "route"); builder.add_edge("route", "model"); builder.add_edge("model", "finish")

    An ``async def`` model node awaits :meth:`asystem_prompt`, :meth:`atools` and
    :meth:`arecord_model_call` instead: right after a resume in another worker, reading the turn
    reads the log (and may route it again), which the sync forms would do on the event loop.

    Run your tools with ``builder.add_node("tools", nodes.tool_node(all_tools))``: a LangGraph
    ``ToolNode`` that refuses a call to a tool the turn was not given and logs each call, as the
    built-in agent's does. Run the compiled graph as ``MemabraAgent(graph, nodes.session)`` where
    a run can pause between nodes and go on in another worker: the turn is kept in the log when
    the run ends paused.
    """

    def __init__(self, session: RoutingSession) -> None:
        self.session = session

    # ``state`` below is the graph's state as your node receives it: a dict, or a pydantic model.
    def route(self, state: MemabraNodeState, runtime: Runtime[Any]) -> dict[str, Any]:
        return {"memabra_turn": route_turn(self.session, state, runtime)}

    def _turn(self, state: MemabraNodeState | Any) -> Turn:
        config = run_config()
        if config is None:  # outside a run: only a turn in flight here can be meant
            return self.session.get_turn(state_turn_id(state))
        return current_turn(
            self.session, state_turn_id(state), state_field(state, "messages", []), get_runtime(), config
        )

    async def _aturn(self, state: MemabraNodeState | Any) -> Turn:
        """:meth:`_turn` for async nodes: a turn running here is read on the event loop, one to
        unpause, read back from the log or route again on a worker thread (:func:`acurrent_turn`)."""
        config = run_config()
        if config is None:
            return self.session.get_turn(state_turn_id(state))
        # the runtime is read here: it is the run's context variable, which a worker thread lacks
        messages = state_field(state, "messages", [])
        return await acurrent_turn(self.session, state_turn_id(state), messages, get_runtime(), config)

    def system_prompt(self, state: MemabraNodeState | Any) -> str:
        return self._turn(state).system_prompt

    async def asystem_prompt(self, state: MemabraNodeState | Any) -> str:
        """:meth:`system_prompt` for an ``async def`` node: never reads the log on the event loop."""
        return (await self._aturn(state)).system_prompt

    def tools(self, state: MemabraNodeState | Any, available: Sequence[BaseTool]) -> list[BaseTool]:
        chosen = self._turn(state).tool_names
        return [t for t in available if t.name in chosen]

    async def atools(self, state: MemabraNodeState | Any, available: Sequence[BaseTool]) -> list[BaseTool]:
        """:meth:`tools` for an ``async def`` node: never reads the log on the event loop."""
        chosen = (await self._aturn(state)).tool_names
        return [t for t in available if t.name in chosen]

    def tool_node(self, tools: Sequence[BaseTool], *, name: str = "tools") -> ToolNode:
        """A ``ToolNode`` running ``tools`` (the same list your model node passes to :meth:`tools`)
        as the built-in agent runs them: in parallel, sync or async, with injected state and
        ``Command`` results. A call to a tool this turn was not given is refused (and, for one of
        ``tools``, recorded as needed and missed); each call is logged with its latency and
        outcome, so the reward sees it; a raising tool answers the model with an error
        ToolMessage and a failed step; an ``interrupt`` in a tool pauses the turn, kept for whichever
        worker resumes the run."""
        return ToolRunner(self.session, tools, tool_search=None).node(name)

    def record_model_call(
        self, state: MemabraNodeState | Any, reply: AIMessage, latency_ms: float, name: str = "model"
    ) -> None:
        inp, out = token_usage(reply)
        self.session.record_model_call(state_turn_id(state), name, latency_ms, input_tokens=inp, output_tokens=out)

    async def arecord_model_call(
        self, state: MemabraNodeState | Any, reply: AIMessage, latency_ms: float, name: str = "model"
    ) -> None:
        """:meth:`record_model_call` for an ``async def`` node: a step of a turn paused here (a
        parallel branch's interrupt paused it) is written to the log's copy, on a worker thread."""
        turn_id = state_turn_id(state)
        await arecord(self.session, turn_id, self.record_model_call, state, reply, latency_ms, name)

    def finish(self, state: MemabraNodeState) -> dict[str, Any]:
        # paused before this node: goes on here; none where its turn was abandoned meanwhile
        messages = state_field(state, "messages", [])
        turn = finishing_turn(self.session, state_turn_id(state), messages)
        if turn is None:
            return {"memabra_episode_id": None}
        return {"memabra_episode_id": self.session.finish(turn.id, final_answer(messages))}
