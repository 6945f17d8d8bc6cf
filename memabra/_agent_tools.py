"""The ``tools`` node of the built-in agent and of ``MemabraNodes.tool_node``: LangGraph's
``ToolNode`` with memabra's checks and logging around each call.

``ToolNode`` runs the calls as every LangGraph agent does: in parallel, each tool invoked with the
full tool call, so ``InjectedToolCallId``, ``InjectedState``, ``InjectedStore`` and ``ToolRuntime``
are filled in, a ``content_and_artifact`` tool keeps its artifact, a tool's handled
``ToolException`` comes back as an error ToolMessage, and a tool may return a ``Command``. Around
each call memabra refuses a tool the router did not give this turn (a registry tool so called is
recorded as needed and missed: the model named what it needed, unless the run may not use it),
hands ``find_tools`` its per-turn tool (finding only the tools the run may use), and logs the
outcome; a tool that raises is shown to the model as an error (an
outcome, not a crash), an interrupt still propagates. A sync run of a tool that has only a
coroutine (an MCP tool) is the one exception: a mistake of the caller's, not the tool's outcome.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Any, TypeVar

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool, StructuredTool, Tool
from langgraph.errors import GraphBubbleUp, GraphInterrupt
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from memabra._errors import ConfigError, InvalidRecordError
from memabra._graph_io import run_allowed_tools
from memabra._graph_steps import (
    current_turn,
    record_raised,
    record_result,
    refuse,
    state_field,
    state_turn_id,
    unavailable_error,
)
from memabra._records import CandidateKind
from memabra._session import RoutingSession, Turn
from memabra._tool_search import FIND_TOOLS, REFUSED_SOURCE, ToolSearch, record_missed
from memabra._usage import tool_name

__all__ = ["ToolRunner", "acurrent_turn", "arecord", "bind_fetched", "require_sync"]

ToolOutcome = ToolMessage | Command[Any]
_T = TypeVar("_T")

# ToolNode runs a round's calls on threads: two find_tools calls must not lose each other's tools.
_BIND_LOCK = threading.Lock()


def bind_fetched(turn: Turn, names: Sequence[str]) -> None:
    """Tools fetched by ``find_tools`` are bound for the rest of the turn."""
    with _BIND_LOCK:
        turn.tool_names = tuple(dict.fromkeys((*turn.tool_names, *names)))


# The async paths below never block the event loop on the log (a server runs hundreds of runs on
# one loop): what may read or write it, or wait on the pause lock a writing thread holds, runs on a
# worker thread; what only touches the turns in memory, the usual call, stays on the loop.
async def acurrent_turn(
    session: RoutingSession,
    turn_id: str,
    messages: Sequence[Any],
    runtime: Any,
    config: Any,
    *,
    pending_allowed: Callable[[str], bool] | None = None,
) -> Turn:
    """:func:`current_turn` for async code. A turn in flight here and running (every call of a run
    but its first after a pause) is read on the event loop; one to unpause, read back from the log
    or route again (database reads and writes, the router and its encoder) on a worker thread."""
    try:
        turn = session.get_turn(turn_id)
    except InvalidRecordError:
        pass
    else:
        if turn.paused_at is None and not turn.logged:
            return turn
    return await asyncio.to_thread(
        current_turn, session, turn_id, messages, runtime, config, pending_allowed=pending_allowed
    )


async def arecord(session: RoutingSession, turn_id: str, record: Callable[..., _T], *args: Any) -> _T:
    """``record(*args)``, which records a step of ``turn_id``: on the event loop, or on a worker
    thread where the turn is paused here (a parallel call's interrupt paused it), as a step of a
    paused turn is written to its copy in the log, under the pause lock."""
    try:
        paused = session.get_turn(turn_id).paused_at is not None
    except InvalidRecordError:
        paused = False
    if paused:
        return await asyncio.to_thread(record, *args)
    return record(*args)


def require_sync(tool: BaseTool | None) -> None:
    """Refuse a sync run of a tool that has only a coroutine, as langchain-mcp-adapters' tools do.
    LangChain raises ``NotImplementedError`` from the call, which would be logged as the tool
    failing: every such call an error in the reward, so the router would learn to avoid a tool
    that works, while the agent seemed to run. Raised before the call, nothing logged for it: the
    turn is kept for a retry with ``ainvoke`` from the checkpoint."""
    if isinstance(tool, StructuredTool | Tool) and tool.func is None and tool.coroutine is not None:
        raise ConfigError(
            f"tool {tool.name!r} has only an async implementation (as MCP tools from langchain-mcp-adapters do):"
            " run the agent with ainvoke, astream or abatch, or give the tool a sync func"
        )


class ToolRunner:
    """Checks and logs each tool call of a turn; :meth:`node` is the graph's ``tools`` node."""

    def __init__(self, session: RoutingSession, tools: Sequence[BaseTool], tool_search: ToolSearch | None) -> None:
        self.session = session
        self.tools = list(tools)
        self._names = frozenset(t.name for t in tools)
        self.tool_search = tool_search

    def node(self, name: str = "tools") -> ToolNode:
        # handle_tool_errors=False: a raising tool reaches the wrappers below, which log it and
        # answer the model in memabra's words.
        return ToolNode(
            self.tools,
            name=name,
            handle_tool_errors=False,
            wrap_tool_call=self.wrap,
            awrap_tool_call=self.awrap,
        )

    @staticmethod
    def find_tools(search: ToolSearch, turn: Turn, allowed: Collection[str] | None) -> BaseTool:
        """The ``find_tools`` tool of one turn, finding only ``allowed`` tools (``None``: any)."""
        return search.tool(turn.id, turn.tool_names, lambda names: bind_fetched(turn, names), allowed)

    def _turn_of(self, request: ToolCallRequest) -> tuple[Any, ...]:
        """``current_turn``'s arguments for the turn a tool call belongs to."""
        # the state is a dict, or the graph's pydantic model itself (a MemabraNodes graph's own state)
        runtime = request.runtime
        messages = state_field(request.state, "messages", [])
        return self.session, state_turn_id(request.state), messages, runtime, getattr(runtime, "config", None)

    def _admit(self, request: ToolCallRequest, turn: Turn) -> ToolCallRequest | ToolMessage:
        """The request to run (``find_tools`` given this turn's tool), or the refusal answering it."""
        turn_id = state_turn_id(request.state)
        name = request.tool_call["name"]
        allowed = run_allowed_tools(request.runtime)
        if name == FIND_TOOLS and self.tool_search is not None:
            return request.override(tool=self.find_tools(self.tool_search, turn, allowed))
        # the run's context is read again: a run resumed under a narrower one runs nothing else
        may_use = allowed is None or name in allowed
        if name in turn.tool_names and request.tool is not None and may_use:
            return request
        error = unavailable_error(name)
        # a tool the run may not use is refused as one the agent lacks: neither a miss of the
        # router (it was never offered) nor one find_tools would fetch
        known = name in self._names and may_use
        if known and name not in turn.tool_names:
            # a registry tool the router left out: the model's call says the turn needed it
            record_missed(turn.episode_id, name, turn.feedback, REFUSED_SOURCE)
        if self.tool_search is not None and known:
            error += f"; call {FIND_TOOLS} with its name to get it"
        elif self.tool_search is not None and (allowed is None or allowed):  # else it is not bound
            error += f"; call {FIND_TOOLS} with what you need to do to get a tool for it"
        return refuse(self.session, turn_id, request.tool_call, error)

    def _done(self, request: ToolCallRequest, result: ToolOutcome, started: float) -> None:
        turn_id = state_turn_id(request.state)
        ok = record_result(self.session, turn_id, request.tool_call, result, started)
        if ok and self.tool_search is not None:
            turn = self.session.get_turn(turn_id)
            name = request.tool_call["name"]
            # bound but not routed: fetched, maybe by a process that ran the turn before it paused
            chosen = turn.selection.chosen if turn.selection is not None else ()
            left_out = all(c.kind is not CandidateKind.TOOL or tool_name(c.id, c.metadata) != name for c in chosen)
            self.tool_search.used(turn.id, turn.episode_id, name, turn.feedback, left_out=left_out)

    # wrap and awrap differ only in ``execute`` vs ``await execute`` (a deliberate repeat, as in ToolNode).
    def wrap(self, request: ToolCallRequest, execute: Callable[[ToolCallRequest], ToolOutcome]) -> ToolOutcome:
        turn = current_turn(*self._turn_of(request), pending_allowed=self._names.__contains__)
        admitted = self._admit(request, turn)
        if isinstance(admitted, ToolMessage):
            return admitted
        require_sync(admitted.tool)
        started = time.perf_counter()
        try:
            result = execute(admitted)
        except GraphInterrupt:  # the run pauses: the turn is kept for whichever process resumes it
            self.session.suspend(state_turn_id(admitted.state))
            raise
        except GraphBubbleUp:
            raise
        except Exception as exc:
            return record_raised(self.session, state_turn_id(admitted.state), admitted.tool_call, exc, started)
        self._done(admitted, result, started)
        return result

    async def awrap(
        self, request: ToolCallRequest, execute: Callable[[ToolCallRequest], Awaitable[ToolOutcome]]
    ) -> ToolOutcome:
        turn = await acurrent_turn(*self._turn_of(request), pending_allowed=self._names.__contains__)
        admitted = self._admit(request, turn)
        if isinstance(admitted, ToolMessage):
            return admitted
        started = time.perf_counter()
        turn_id = state_turn_id(admitted.state)
        try:
            result = await execute(admitted)
        except GraphInterrupt:
            await asyncio.to_thread(self.session.suspend, turn_id)  # off the event loop
            raise
        except GraphBubbleUp:
            raise
        except Exception as exc:
            return await arecord(
                self.session, turn_id, record_raised, self.session, turn_id, admitted.tool_call, exc, started
            )
        await arecord(self.session, turn_id, self._done, admitted, result, started)
        return result
