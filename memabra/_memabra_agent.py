"""``MemabraAgent``: a compiled agent graph plus memabra's feedback API, and the one place that
sees a run end. A run can end paused between nodes, where memabra's own nodes and hooks never see
an interrupt: ``interrupt_before`` / ``interrupt_after``, or an ``interrupt`` raised in another
middleware's hook (``HumanInTheLoopMiddleware`` asks for approval in its own ``after_model``).
Such a turn is kept in the log as a turn paused in memabra's nodes is, so the worker that resumes
the run goes on with the same routing decision and steps instead of routing it again."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

from langchain_core.runnables import RunnableConfig

from memabra._graph_io import run_thread_id
from memabra._records import FeedbackKind, FeedbackReceipt
from memabra._session import RoutingSession
from memabra.router import Router
from memabra.storage import EpisodeLog

__all__ = ["MemabraAgent"]

logger = logging.getLogger("memabra")

_UNREAD = "could not read the run's state to see whether it paused: only this process can resume its turn"


class MemabraAgent:
    """A compiled LangGraph agent plus memabra's feedback API.

    ``invoke`` / ``ainvoke`` / ``stream`` / ``astream`` / ``get_state`` behave as on the compiled
    graph (``graph``), and so does every other attribute of it (``update_state``,
    ``get_state_history``, ``aget_state``, ``get_graph``, ...); the result's
    ``memabra_episode_id`` names the logged episode. A run of ``invoke``, ``ainvoke``,
    ``stream``, ``astream``, ``astream_events`` (a stream read to its end), ``batch`` or
    ``abatch`` that ends paused between nodes keeps its turn in the log for whichever worker
    resumes it.

    Wraps a ``create_agent`` graph with :class:`~memabra.MemabraMiddleware` the same way:
    ``MemabraAgent(create_agent(..., middleware=[middleware]), middleware.session)``.
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
        out = self.graph.invoke(input, config, **kwargs)
        self._keep_paused(config)
        return out

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        out = await self.graph.ainvoke(input, config, **kwargs)
        await self._akeep_paused(config)
        return out

    def stream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Iterator[Any]:
        yield from self.graph.stream(input, config, **kwargs)
        self._keep_paused(config)

    async def astream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> AsyncIterator[Any]:
        async for chunk in self.graph.astream(input, config, **kwargs):
            yield chunk
        await self._akeep_paused(config)

    def batch(
        self, inputs: list[Any], config: RunnableConfig | list[RunnableConfig] | None = None, **kwargs: Any
    ) -> Any:
        out = self.graph.batch(inputs, config, **kwargs)
        for each in _each_config(config, len(inputs)):
            self._keep_paused(each)
        return out

    async def abatch(
        self, inputs: list[Any], config: RunnableConfig | list[RunnableConfig] | None = None, **kwargs: Any
    ) -> Any:
        out = await self.graph.abatch(inputs, config, **kwargs)
        for each in _each_config(config, len(inputs)):
            await self._akeep_paused(each)
        return out

    async def astream_events(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        async for event in self.graph.astream_events(input, config, **kwargs):
            yield event
        await self._akeep_paused(config)

    def get_state(self, config: RunnableConfig, **kwargs: Any) -> Any:
        return self.graph.get_state(config, **kwargs)

    def __getattr__(self, name: str) -> Any:
        # Only for names this class lacks: the rest of the compiled graph's API, so code written
        # for a LangGraph agent keeps working on this one.
        if name in ("graph", "session"):  # not set yet (unpickling, a half-built object)
            raise AttributeError(name)
        return getattr(self.graph, name)

    # ``_keep_paused`` and ``_akeep_paused`` differ only in how the state is read and the turn
    # written (a deliberate repeat: an async checkpointer has no sync reads).
    def _keep_paused(self, config: RunnableConfig | None) -> None:
        where = self._unfinished(config)
        if where is None:
            return
        state_config, running = where
        try:
            snapshot = self.graph.get_state(state_config)
        except Exception:  # noqa: BLE001 - the run itself succeeded; only this process can resume it now
            logger.warning(_UNREAD, exc_info=True)
            return
        turn_id = _paused_turn(snapshot, running)
        if turn_id is not None:
            self.session.suspend(turn_id)
            logger.info("turn %s paused between nodes: kept in the log", turn_id)

    async def _akeep_paused(self, config: RunnableConfig | None) -> None:
        where = self._unfinished(config)
        if where is None:
            return
        state_config, running = where
        try:
            snapshot = await self.graph.aget_state(state_config)
        except Exception:  # noqa: BLE001 - as in _keep_paused
            logger.warning(_UNREAD, exc_info=True)
            return
        turn_id = _paused_turn(snapshot, running)
        if turn_id is not None:
            await asyncio.to_thread(self.session.suspend, turn_id)  # a database write: off the event loop
            logger.info("turn %s paused between nodes: kept in the log", turn_id)

    def _unfinished(self, config: RunnableConfig | None) -> tuple[RunnableConfig, frozenset[str]] | None:
        """The thread's latest checkpoint and its turns still running here, where the run could
        have ended paused; ``None`` for the usual run, which logged its turn (no state is read)."""
        thread_id = run_thread_id(config)
        if thread_id is None or not getattr(self.graph, "checkpointer", None):
            return None
        running = self.session.running_turns(thread_id)
        if not running:
            return None
        # the thread's latest checkpoint, not one the caller forked from
        return {"configurable": {"thread_id": thread_id}}, running

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


def _paused_turn(snapshot: Any, running: frozenset[str]) -> str | None:
    """The turn the state names, where the run stopped with nodes still to run (a pause) and the
    turn is one still running here."""
    turn_id = snapshot.values.get("memabra_turn") if isinstance(snapshot.values, dict) else None
    return turn_id if snapshot.next and turn_id in running else None


def _each_config(config: RunnableConfig | list[RunnableConfig] | None, n: int) -> list[RunnableConfig | None]:
    """The config of each of a batch's runs, given as one for all or one each."""
    if isinstance(config, list):
        return list(config)
    return [config] * n
