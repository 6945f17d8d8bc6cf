"""memabra for agents people already have.

:class:`MemabraMiddleware` plugs into ``langchain.agents.create_agent``: before the agent runs it
routes the user's message; each model call gets the chosen memories and skill instructions
appended to its system prompt and only the chosen tools; a call to a tool the turn was not given
is refused, the others are timed and logged; after the agent finishes the episode is logged and
learned from — the same loop as :func:`memabra.create_memabra_agent`.

:class:`MemabraNodes` gives the same loop as two nodes (``route`` and ``finish``) for any
``StateGraph`` whose state has ``messages``; your own model node reads the chosen context with
:meth:`MemabraNodes.system_prompt` and :meth:`MemabraNodes.tools` (``await`` their ``a``
forms in an async node), and its tools run in :meth:`MemabraNodes.tool_node`
(:mod:`memabra._nodes`; both are re-exported here).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, NotRequired

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from langchain.agents.middleware.types import ToolCallRequest
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.errors import GraphBubbleUp, GraphInterrupt
from langgraph.runtime import Runtime

from memabra._agent_tools import acurrent_turn, arecord, require_sync
from memabra._errors import InvalidRecordError
from memabra._graph_io import run_allowed_tools, token_usage
from memabra._graph_steps import (
    close_failed_turn,
    current_turn,
    error_text,
    finishing_turn,
    record_raised,
    record_result,
    refuse,
    unavailable_error,
)
from memabra._nodes import MemabraNodes, MemabraNodeState, final_answer, route_turn, run_config
from memabra._records import Step
from memabra._session import RoutingSession, Turn
from memabra._tool_search import REFUSED_SOURCE, record_missed
from memabra._turns import model_step

__all__ = [
    "MemabraMiddleware",
    "MemabraMiddlewareState",
    "MemabraNodeState",
    "MemabraNodes",
    "create_memabra_middleware",
]


# Turns ended by a raising tool, remembered in case the agent's run goes on after all.
_MAX_ENDED = 10_000


class MemabraMiddlewareState(AgentState[Any]):
    """The state of a ``create_agent`` agent with :class:`MemabraMiddleware` (its ``state_schema``):
    the agent's own, plus the turn the run routed and, once logged, its episode id."""

    memabra_turn: NotRequired[str]
    memabra_episode_id: NotRequired[str | None]  # None: a run whose turn was logged elsewhere (abandoned)


class MemabraMiddleware(AgentMiddleware[MemabraMiddlewareState, Any]):
    """Routes, logs and learns for a ``create_agent`` agent.

    Pass the same ``tools`` to ``create_agent``; memabra decides which of them each model call
    sees. Build the session with :func:`memabra.build_session` (or let ``create_memabra_middleware``
    do it).
    """

    state_schema = MemabraMiddlewareState

    def __init__(self, session: RoutingSession) -> None:
        super().__init__()
        self.session = session
        self._lock = threading.Lock()
        self._ended: OrderedDict[str, str] = OrderedDict()

    def before_agent(self, state: MemabraMiddlewareState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return {"memabra_turn": route_turn(self.session, state, runtime)}

    # An agent run with ``ainvoke`` / ``astream`` runs a hook with no async form on the event loop
    # itself: routing (the log's reads, the encoder, the copy kept) and logging (the episode's
    # transaction, its facts, the learner's step) run on a worker thread instead.
    async def abefore_agent(self, state: MemabraMiddlewareState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return await asyncio.to_thread(self.before_agent, state, runtime)

    def _turn_of(self, request: ModelRequest[Any]) -> tuple[Any, ...]:
        """``current_turn``'s arguments for the turn a model call belongs to."""
        # request.state is typed as the base AgentState; at run time it is state_schema (MemabraMiddlewareState)
        turn_id: str = request.state["memabra_turn"]  # type: ignore[typeddict-item, unused-ignore]
        return self.session, turn_id, request.state["messages"], request.runtime, run_config()

    def _request(self, request: ModelRequest[Any], turn: Turn) -> ModelRequest[Any]:
        base = request.system_prompt or ""
        system = "\n\n".join(p for p in (base, turn.system_prompt) if p)
        tools = [t for t in request.tools if getattr(t, "name", None) in turn.tool_names]
        # system_prompt= works in every langchain 1.x (the >=1.0 floor); its typed overrides list only the newer system_message
        return request.override(system_prompt=system or None, tools=tools)  # type: ignore[call-arg, unused-ignore]

    def _record_model(self, request: ModelRequest[Any], response: Any, started: float) -> None:
        messages = getattr(response, "result", None) or ([response] if isinstance(response, AIMessage) else [])
        reply = next((m for m in messages if isinstance(m, AIMessage)), None)
        inp, out = token_usage(reply)
        name = getattr(request.model, "model_name", None) or type(request.model).__name__
        ms = (time.perf_counter() - started) * 1000.0
        self.session.record_model_call(
            request.state["memabra_turn"],  # type: ignore[typeddict-item, unused-ignore]  # state_schema, as in _request
            str(name),
            ms,
            input_tokens=inp,
            output_tokens=out,
        )

    def _model_failure(self, request: ModelRequest[Any], started: float, exc: Exception) -> tuple[str, Step]:
        # As in the built-in agent: the exception ends the run before after_agent, so the turn is
        # logged now, as failed (a retry of the call routes a new turn: see current_turn).
        turn_id: str = request.state["memabra_turn"]  # type: ignore[typeddict-item, unused-ignore]
        name = getattr(request.model, "model_name", None) or type(request.model).__name__
        ms = (time.perf_counter() - started) * 1000.0
        return turn_id, model_step(str(name), ms, None, None, status="error", error=error_text(exc))

    def _close_failed(self, turn_id: str, failure: Step | None) -> None:
        episode_id = close_failed_turn(self.session, turn_id, failure)
        if episode_id is None:
            return
        with self._lock:
            self._ended[turn_id] = episode_id
            while len(self._ended) > _MAX_ENDED:
                self._ended.popitem(last=False)

    # wrap_model_call and awrap_model_call differ only in ``handler`` vs ``await handler`` (a deliberate repeat).
    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]
    ) -> Any:
        routed = self._request(request, current_turn(*self._turn_of(request)))
        started = time.perf_counter()
        try:
            response = handler(routed)
        except GraphInterrupt:  # the run pauses: the turn is kept for whichever process resumes it
            self.session.suspend(request.state["memabra_turn"])  # type: ignore[typeddict-item, unused-ignore]
            raise
        except GraphBubbleUp:
            raise
        except Exception as exc:
            self._close_failed(*self._model_failure(request, started, exc))
            raise
        self._record_model(request, response, started)
        return response

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]]
    ) -> Any:
        routed = self._request(request, await acurrent_turn(*self._turn_of(request)))
        started = time.perf_counter()
        try:
            response = await handler(routed)
        except GraphInterrupt:
            turn_id = request.state["memabra_turn"]  # type: ignore[typeddict-item, unused-ignore]
            await asyncio.to_thread(self.session.suspend, turn_id)  # a database write: off the event loop
            raise
        except GraphBubbleUp:
            raise
        except Exception as exc:
            await asyncio.to_thread(self._close_failed, *self._model_failure(request, started, exc))
            raise
        self._record_model(request, response, started)
        return response

    def _tool_turn_of(self, request: ToolCallRequest) -> tuple[Any, ...]:
        """``current_turn``'s arguments for the turn a tool call belongs to."""
        runtime = request.runtime
        return (
            self.session,
            request.state["memabra_turn"],
            request.state["messages"],
            runtime,
            getattr(runtime, "config", None),
        )

    def _refusal(self, request: ToolCallRequest, turn: Turn) -> ToolMessage | None:
        """A call to a tool this turn was not given is refused, as the built-in agent refuses it:
        hiding a tool from the model must not leave it runnable. ``turn``: ``current_turn`` with
        ``pending_allowed=bool``, as a resumed run's pending calls were made with the lost turn's
        tools bound."""
        turn_id = request.state["memabra_turn"]
        name = request.tool_call["name"]
        allowed = run_allowed_tools(request.runtime)  # read again: it may go on under a narrower one
        may_use = allowed is None or name in allowed
        if name in turn.tool_names and may_use:
            return None
        # the agent's tool the router left out: the turn needed it (one the run may not use was
        # never offered to the router, so it missed nothing)
        if request.tool is not None and may_use:
            record_missed(turn.episode_id, name, turn.feedback, REFUSED_SOURCE)
        return refuse(self.session, turn_id, request.tool_call, unavailable_error(name))

    def _tool_raised(self, request: ToolCallRequest, started: float, exc: Exception) -> None:
        # The exception ends the agent's run before after_agent: log the failed step and the
        # episode (as a failed turn) now, so the turn is neither lost nor left in flight.
        turn_id = request.state["memabra_turn"]
        record_raised(self.session, turn_id, request.tool_call, exc, started)
        self._close_failed(turn_id, None)

    def wrap_tool_call(self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Any]) -> Any:
        refused = self._refusal(request, current_turn(*self._tool_turn_of(request), pending_allowed=bool))
        if refused is not None:
            return refused
        # before the call, nothing logged: an async-only tool (MCP) run by invoke would fail as the
        # tool's error, and the router learn to avoid a tool that works; the turn stays for ainvoke
        require_sync(request.tool)
        started = time.perf_counter()
        try:
            result = handler(request)
        except GraphInterrupt:  # the run pauses: the turn is kept for whichever process resumes it
            self.session.suspend(request.state["memabra_turn"])
            raise
        except GraphBubbleUp:
            raise
        except Exception as exc:
            self._tool_raised(request, started, exc)
            raise
        record_result(self.session, request.state["memabra_turn"], request.tool_call, result, started)
        return result

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Awaitable[Any]]
    ) -> Any:
        turn = await acurrent_turn(*self._tool_turn_of(request), pending_allowed=bool)
        refused = self._refusal(request, turn)
        if refused is not None:
            return refused
        started = time.perf_counter()
        turn_id = request.state["memabra_turn"]
        try:
            result = await handler(request)
        except GraphInterrupt:
            await asyncio.to_thread(self.session.suspend, turn_id)  # off the event loop
            raise
        except GraphBubbleUp:
            raise
        except Exception as exc:
            # as _tool_raised; logging the turn (a database transaction) off the event loop
            await arecord(self.session, turn_id, record_raised, self.session, turn_id, request.tool_call, exc, started)
            await asyncio.to_thread(self._close_failed, turn_id, None)
            raise
        await arecord(self.session, turn_id, record_result, self.session, turn_id, request.tool_call, result, started)
        return result

    def _in_flight(self, turn_id: str) -> bool:
        try:
            self.session.get_turn(turn_id)
        except InvalidRecordError:
            return False
        return True

    def after_agent(self, state: MemabraMiddlewareState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        turn_id = state["memabra_turn"]
        with self._lock:
            ended = self._ended.pop(turn_id, None)
        if ended is not None and not self._in_flight(turn_id):
            # a raising tool or model already logged it, and something caught the error
            return {"memabra_episode_id": ended}
        # paused before this hook: goes on here; none where its turn was abandoned meanwhile
        turn = finishing_turn(self.session, turn_id, state["messages"])
        if turn is None:  # the run has no episode of its own (and must not name the previous turn's)
            return {"memabra_episode_id": None}
        return {"memabra_episode_id": self.session.finish(turn.id, final_answer(state["messages"]))}

    async def aafter_agent(self, state: MemabraMiddlewareState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return await asyncio.to_thread(self.after_agent, state, runtime)  # as abefore_agent


def create_memabra_middleware(**session_kwargs: Any) -> MemabraMiddleware:
    """A :class:`MemabraMiddleware` over a new session; takes :func:`memabra.build_session`'s arguments
    (pass the same ``tools`` you give ``create_agent``)."""
    from memabra._build import build_session

    return MemabraMiddleware(build_session(**session_kwargs))
