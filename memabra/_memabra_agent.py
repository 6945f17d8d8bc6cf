"""``MemabraAgent``: a compiled agent graph plus memabra's feedback API, and the one place that
sees a run end. A run can end paused between nodes, where memabra's own nodes and hooks never see
an interrupt: ``interrupt_before`` / ``interrupt_after``, or an ``interrupt`` raised in another
middleware's hook (``HumanInTheLoopMiddleware`` asks for approval in its own ``after_model``).
Such a turn is kept in the log as a turn paused in memabra's nodes is, so the worker that resumes
the run goes on with the same routing decision and steps instead of routing it again."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import aclosing
from typing import Any

from langchain_core.runnables import RunnableConfig

from memabra._graph_io import run_thread_id
from memabra._records import FeedbackKind, FeedbackReceipt
from memabra._session import RoutingSession
from memabra.router import Router
from memabra.storage import EpisodeLog

__all__ = ["MemabraAgent"]

logger = logging.getLogger("memabra")

_NONE: Mapping[str, Any] = {}  # a call with no keyword arguments

_UNREAD = (
    "could not read the run's state to see whether it paused: only this process can resume its turn with the"
    " steps made so far"
)


class MemabraAgent:
    """A compiled LangGraph agent plus memabra's feedback API.

    ``invoke`` / ``ainvoke`` / ``stream`` / ``astream`` / ``get_state`` behave as on the compiled
    graph (``graph``), and so does every other attribute of it (``update_state``,
    ``get_state_history``, ``aget_state``, ``get_graph``, ...); the result's
    ``memabra_episode_id`` names the logged episode. A run of ``invoke``, ``ainvoke``,
    ``stream``, ``astream``, ``astream_events``, ``batch`` or ``abatch`` that ends with nodes
    still to run keeps its turn in the log for whichever worker goes on with it: paused between
    nodes, raised (a retry from the checkpoint goes on with the same turn), or a stream whose
    reader stopped early: paused where the checkpoint holds an interrupt (a UI that stops at the
    ``__interrupt__`` chunk), else kept running (a client that went away mid-run: lost in time
    if nobody retries it). A run that logged its turn reads no state.

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

    # Each run is checked when it ends, however it ends: returned, raised, or a stream its reader
    # stopped reading (a UI that stops at the ``__interrupt__`` chunk, a client that went away).
    # A run that raised (or an ``ainvoke`` cancelled: a client that went away) keeps its turn as
    # running, not as paused: nobody waits to resume it, and one nobody retries must be counted lost.
    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        try:
            out = self.graph.invoke(input, config, **kwargs)
        except BaseException:
            self._keep_paused(config, waiting=False)
            raise
        self._keep_paused(config)
        return out

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        try:
            out = await self.graph.ainvoke(input, config, **kwargs)
        except BaseException:
            await self._akeep_paused(config, waiting=False)
            raise
        await self._akeep_paused(config)
        return out

    # A stream read to its end ran until it stopped by itself (paused); one that raised is a run
    # that raised. One its reader closed (``close()`` / ``aclose()``, a ``break``, garbage
    # collection) or whose task was cancelled ended early: the thread's state says which
    # (:func:`_waiting`), as it does for each run of a batch that raised.
    def stream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Iterator[Any]:
        waiting: bool | None = False
        try:
            yield from self.graph.stream(input, config, **kwargs)  # closing this closes the run's stream
            waiting = True
        except GeneratorExit:
            waiting = None
            raise
        finally:
            self._keep_paused(config, waiting=waiting, breakpoints=kwargs)

    async def astream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> AsyncIterator[Any]:
        waiting: bool | None = False
        try:
            async with aclosing(self.graph.astream(input, config, **kwargs)) as chunks:
                async for chunk in chunks:
                    yield chunk
            waiting = True
        except (GeneratorExit, asyncio.CancelledError):
            waiting = None
            raise
        finally:
            await self._akeep_paused(config, waiting=waiting, breakpoints=kwargs)

    def batch(
        self, inputs: list[Any], config: RunnableConfig | list[RunnableConfig] | None = None, **kwargs: Any
    ) -> Any:
        waiting: bool | None = None  # raised: some of its runs may have paused
        try:
            out = self.graph.batch(inputs, config, **kwargs)
            waiting = True
            return out
        finally:
            for each in _each_config(config, len(inputs)):
                self._keep_paused(each, waiting=waiting, breakpoints=kwargs)

    async def abatch(
        self, inputs: list[Any], config: RunnableConfig | list[RunnableConfig] | None = None, **kwargs: Any
    ) -> Any:
        waiting: bool | None = None
        try:
            out = await self.graph.abatch(inputs, config, **kwargs)
            waiting = True
            return out
        finally:
            for each in _each_config(config, len(inputs)):
                await self._akeep_paused(each, waiting=waiting, breakpoints=kwargs)

    async def astream_events(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        waiting: bool | None = False
        try:
            async with aclosing(self.graph.astream_events(input, config, **kwargs)) as events:
                async for event in events:
                    yield event
            waiting = True
        except (GeneratorExit, asyncio.CancelledError):
            waiting = None
            raise
        finally:
            await self._akeep_paused(config, waiting=waiting, breakpoints=kwargs)

    def get_state(self, config: RunnableConfig, **kwargs: Any) -> Any:
        return self.graph.get_state(config, **kwargs)

    def __getattr__(self, name: str) -> Any:
        # Only for names this class lacks: the rest of the compiled graph's API, so code written
        # for a LangGraph agent keeps working on this one.
        if name in ("graph", "session"):  # not set yet (unpickling, a half-built object)
            raise AttributeError(name)
        return getattr(self.graph, name)

    # ``_keep_paused`` and ``_akeep_paused`` differ only in how the state is read and the turn
    # written (a deliberate repeat: an async checkpointer has no sync reads). Neither raises: the
    # run's own outcome (its result, or its exception) is what the caller gets.
    # ``waiting``: True, the run stopped by itself (an interrupt or a breakpoint waits on someone);
    # False, it raised (nobody waits); ``None``, it ended early (:func:`_waiting` reads which from
    # the state already read). ``breakpoints``: the call's keyword arguments, for its breakpoints.
    def _keep_paused(
        self, config: RunnableConfig | None, *, waiting: bool | None = True, breakpoints: Mapping[str, Any] = _NONE
    ) -> None:
        where = self._unfinished(config)
        if where is None:
            return
        state_config, running = where
        try:
            snapshot = self.graph.get_state(state_config, subgraphs=True)
        except Exception:  # noqa: BLE001 - only this process can resume the run now
            logger.warning(_UNREAD, exc_info=True)
            return
        turn_id = _paused_turn(snapshot, running)
        if turn_id is not None:
            waiting = _waiting(self.graph, snapshot, breakpoints) if waiting is None else waiting
            self.session.suspend(turn_id, waiting=waiting)
            logger.info("turn %s stopped between nodes: kept in the log", turn_id)

    async def _akeep_paused(
        self, config: RunnableConfig | None, *, waiting: bool | None = True, breakpoints: Mapping[str, Any] = _NONE
    ) -> None:
        where = self._unfinished(config)
        if where is None:
            return
        # Shielded: a server that cancels the request (the client went away) cancels it again at
        # each await of its cleanup; the turn is kept all the same.
        await asyncio.shield(self._akeep(*where, waiting, breakpoints))

    async def _akeep(
        self,
        state_config: RunnableConfig,
        running: frozenset[str],
        waiting: bool | None,
        breakpoints: Mapping[str, Any],
    ) -> None:
        try:
            snapshot = await self.graph.aget_state(state_config, subgraphs=True)
        except Exception:  # noqa: BLE001 - as in _keep_paused
            logger.warning(_UNREAD, exc_info=True)
            return
        turn_id = _paused_turn(snapshot, running)
        if turn_id is not None:
            waiting = _waiting(self.graph, snapshot, breakpoints) if waiting is None else waiting
            # a database write: off the event loop
            await asyncio.to_thread(functools.partial(self.session.suspend, turn_id, waiting=waiting))
            logger.info("turn %s stopped between nodes: kept in the log", turn_id)

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
    """The turn still running here that the state names where the run stopped with nodes still to
    run (a pause, or a run that raised or was closed): in the graph's own state, or in a subgraph's
    (memabra's nodes in an agent added as a node of a bigger graph)."""
    if not snapshot.next:
        return None
    values = snapshot.values if isinstance(snapshot.values, dict) else {}
    if values.get("memabra_turn") in running:
        return str(values["memabra_turn"])
    for task in snapshot.tasks:
        nested = getattr(task, "state", None)
        found = _paused_turn(nested, running) if nested is not None and hasattr(nested, "next") else None
        if found is not None:
            return found
    return None


def _waiting(graph: Any, snapshot: Any, breakpoints: Mapping[str, Any]) -> bool:
    """Whether a run that ended early (its reader closed the stream, its task was cancelled, its
    batch raised) waits on someone. An interrupt the checkpoint holds, in the graph or in any
    subgraph's task (``interrupt()`` in a node or a tool, ``HumanInTheLoopMiddleware``'s
    approval request), was saved before its ``__interrupt__`` chunk reached the reader: the run
    paused. None: its reader went away mid-run, and the turn is kept running, lost in time if
    nobody retries it. A static breakpoint (``interrupt_before`` / ``interrupt_after``, of the
    call, the graph or a subgraph) saves no interrupt, so a graph that has one keeps the turn
    paused, as a run that stopped at it would be: the state cannot tell the two apart."""
    if _interrupted(snapshot):
        return True
    if breakpoints.get("interrupt_before") or breakpoints.get("interrupt_after"):
        return True
    try:
        graphs = [graph, *(sub for _, sub in graph.get_subgraphs(recurse=True))]
    except Exception:  # noqa: BLE001 - not a compiled graph: no breakpoints to read
        graphs = [graph]
    return any(getattr(g, "interrupt_before_nodes", None) or getattr(g, "interrupt_after_nodes", None) for g in graphs)


def _interrupted(snapshot: Any) -> bool:
    """Whether the state holds an interrupt waiting for an answer, in it or a subgraph's state."""
    if getattr(snapshot, "interrupts", None):
        return True
    for task in getattr(snapshot, "tasks", ()):
        if getattr(task, "interrupts", None):
            return True
        nested = getattr(task, "state", None)
        if nested is not None and hasattr(nested, "tasks") and _interrupted(nested):
            return True
    return False


def _each_config(config: RunnableConfig | list[RunnableConfig] | None, n: int) -> list[RunnableConfig | None]:
    """The config of each of a batch's runs, given as one for all or one each."""
    if isinstance(config, list):
        return list(config)
    return [config] * n
