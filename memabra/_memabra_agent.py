"""``MemabraAgent``: a compiled agent graph plus memabra's feedback API, and the one place that
sees a run end. A run can end paused between nodes, where memabra's own nodes and hooks never see
an interrupt: ``interrupt_before`` / ``interrupt_after``, or an ``interrupt`` raised in another
middleware's hook (``HumanInTheLoopMiddleware`` asks for approval in its own ``after_model``).
Such a turn is kept in the log as a turn paused in memabra's nodes is, so the worker that resumes
the run goes on with the same routing decision and steps instead of routing it again. So is a turn
no process here holds as running whose run stops at such an interrupt before memabra's nodes run
again (a retry whose first step asks for approval): its copy, kept running, is rewritten as paused."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import aclosing, closing
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.errors import GraphRecursionError

from memabra._graph_io import run_thread_id
from memabra._out_of_steps import aclose_out_of_steps, close_out_of_steps, running_before
from memabra._paused_turns import pause_running_copy
from memabra._records import FeedbackKind, FeedbackReceipt
from memabra._run_ends import (
    Interrupts,
    asked_turn,
    each_config,
    each_interrupted,
    each_out,
    each_waiting,
    interrupt_in,
    paused_turn,
    waits_on_someone,
)
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
_UNREAD_ASKED = (
    "could not read the state of a run that stopped at an interrupt: a turn kept running that it asks a person"
    " about reads lost in an hour"
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
    if nobody retries it). A run that stops at an interrupt with no turn of its thread running
    here (a retry whose first step asks for approval, before memabra's nodes run again) has the
    log's running copy of the turn its state names rewritten as paused: a person is asked, so it
    must not read lost. A run that logged its turn reads no state. A run that raised
    ``GraphRecursionError`` (out of steps mid-turn in a graph of one's own) has its turn logged as
    failed where the turn is known to be its own (:mod:`memabra._out_of_steps`).

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
        before = running_before(self.graph, self.session, config)
        try:
            out = self.graph.invoke(input, config, **kwargs)
        except BaseException as exc:
            if isinstance(exc, GraphRecursionError):
                close_out_of_steps(self.graph, self.session, config, before, exc)
            self._keep_paused(config, waiting=False)
            raise
        self._keep_paused(config, interrupted=interrupt_in(out))
        return out

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        before = running_before(self.graph, self.session, config)
        try:
            out = await self.graph.ainvoke(input, config, **kwargs)
        except BaseException as exc:
            if isinstance(exc, GraphRecursionError):
                await asyncio.shield(aclose_out_of_steps(self.graph, self.session, config, before, exc))
            await self._akeep_paused(config, waiting=False)
            raise
        await self._akeep_paused(config, interrupted=interrupt_in(out))
        return out

    # A stream read to its end ran until it stopped by itself (paused); one that raised is a run
    # that raised. One its reader closed (``close()`` / ``aclose()``, a ``break``, garbage
    # collection) or whose task was cancelled ended early: the thread's state says which
    # (:func:`waits_on_someone`), as it does for each run of a batch that raised. Whether a run stopped at
    # an interrupt is read from its chunks, where its modes show one (:class:`Interrupts`).
    def stream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Iterator[Any]:
        waiting: bool | None = False
        seen = Interrupts(self.graph, input, kwargs)
        before = running_before(self.graph, self.session, config)
        try:
            with closing(self.graph.stream(input, config, **kwargs)) as chunks:  # closing this closes the run
                for chunk in chunks:
                    seen.read(chunk)
                    yield chunk
            waiting = True
        except GraphRecursionError as exc:
            close_out_of_steps(self.graph, self.session, config, before, exc)
            raise
        except GeneratorExit:
            waiting = None
            raise
        finally:
            self._keep_paused(config, waiting=waiting, breakpoints=kwargs, interrupted=seen.stopped(waiting))

    async def astream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> AsyncIterator[Any]:
        waiting: bool | None = False
        seen = Interrupts(self.graph, input, kwargs)
        before = running_before(self.graph, self.session, config)
        try:
            async with aclosing(self.graph.astream(input, config, **kwargs)) as chunks:
                async for chunk in chunks:
                    seen.read(chunk)
                    yield chunk
            waiting = True
        except GraphRecursionError as exc:
            await asyncio.shield(aclose_out_of_steps(self.graph, self.session, config, before, exc))
            raise
        except (GeneratorExit, asyncio.CancelledError):
            waiting = None
            raise
        finally:
            await self._akeep_paused(config, waiting=waiting, breakpoints=kwargs, interrupted=seen.stopped(waiting))

    # A batch's runs each end as they would under ``invoke`` (:func:`each_waiting`): with
    # ``return_exceptions=True`` a run whose result is an exception raised, and one whose result is
    # a ``GraphRecursionError`` ran out of steps.
    def batch(
        self, inputs: list[Any], config: RunnableConfig | list[RunnableConfig] | None = None, **kwargs: Any
    ) -> Any:
        configs = each_config(config, len(inputs))
        befores = [running_before(self.graph, self.session, each) for each in configs]
        outs: list[Any] = []
        try:
            outs = self.graph.batch(inputs, config, **kwargs)
            return outs
        finally:
            n = len(inputs)
            ends = zip(
                configs, befores, each_out(outs, n), each_waiting(outs, n), each_interrupted(outs, n), strict=False
            )
            for each, before, out, waiting, stopped in ends:
                if isinstance(out, GraphRecursionError):
                    close_out_of_steps(self.graph, self.session, each, before, out)
                self._keep_paused(each, waiting=waiting, breakpoints=kwargs, interrupted=stopped)

    async def abatch(
        self, inputs: list[Any], config: RunnableConfig | list[RunnableConfig] | None = None, **kwargs: Any
    ) -> Any:
        configs = each_config(config, len(inputs))
        befores = [running_before(self.graph, self.session, each) for each in configs]
        outs: list[Any] = []
        try:
            outs = await self.graph.abatch(inputs, config, **kwargs)
            return outs
        finally:
            n = len(inputs)
            ends = zip(
                configs, befores, each_out(outs, n), each_waiting(outs, n), each_interrupted(outs, n), strict=False
            )
            for each, before, out, waiting, stopped in ends:
                if isinstance(out, GraphRecursionError):
                    await asyncio.shield(aclose_out_of_steps(self.graph, self.session, each, before, out))
                await self._akeep_paused(each, waiting=waiting, breakpoints=kwargs, interrupted=stopped)

    async def astream_events(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        waiting: bool | None = False
        seen = Interrupts(self.graph, input, None)  # no stream mode is known to show one in events
        before = running_before(self.graph, self.session, config)
        try:
            async with aclosing(self.graph.astream_events(input, config, **kwargs)) as events:
                async for event in events:
                    seen.read(event)
                    yield event
            waiting = True
        except GraphRecursionError as exc:
            await asyncio.shield(aclose_out_of_steps(self.graph, self.session, config, before, exc))
            raise
        except (GeneratorExit, asyncio.CancelledError):
            waiting = None
            raise
        finally:
            await self._akeep_paused(config, waiting=waiting, breakpoints=kwargs, interrupted=seen.stopped(waiting))

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
    # False, it raised (nobody waits); ``None``, it ended early (:func:`waits_on_someone` reads which from
    # the state already read). ``breakpoints``: the call's keyword arguments, for its breakpoints.
    # ``interrupted``: the run stopped at an interrupt, read where no turn of its thread runs here
    # (:meth:`_keep_asked`); false for the usual run, which reads nothing.
    def _keep_paused(
        self,
        config: RunnableConfig | None,
        *,
        waiting: bool | None = True,
        breakpoints: Mapping[str, Any] = _NONE,
        interrupted: bool = False,
    ) -> None:
        where = self._unfinished(config)
        if where is None:
            if interrupted:
                self._keep_asked(config)
            return
        state_config, running = where
        try:
            snapshot = self.graph.get_state(state_config, subgraphs=True)
        except Exception:  # noqa: BLE001 - only this process can resume the run now
            logger.warning(_UNREAD, exc_info=True)
            return
        turn_id = paused_turn(snapshot, running)
        if turn_id is not None:
            waiting = waits_on_someone(self.graph, snapshot, breakpoints) if waiting is None else waiting
            self.session.suspend(turn_id, waiting=waiting)
            logger.info("turn %s stopped between nodes: kept in the log", turn_id)

    async def _akeep_paused(
        self,
        config: RunnableConfig | None,
        *,
        waiting: bool | None = True,
        breakpoints: Mapping[str, Any] = _NONE,
        interrupted: bool = False,
    ) -> None:
        where = self._unfinished(config)
        # Shielded: a server that cancels the request (the client went away) cancels it again at
        # each await of its cleanup; the turn is kept all the same.
        if where is not None:
            await asyncio.shield(self._akeep(*where, waiting, breakpoints))
        elif interrupted:
            await asyncio.shield(self._akeep_asked(config))

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
        turn_id = paused_turn(snapshot, running)
        if turn_id is not None:
            waiting = waits_on_someone(self.graph, snapshot, breakpoints) if waiting is None else waiting
            # a database write: off the event loop
            await asyncio.to_thread(functools.partial(self.session.suspend, turn_id, waiting=waiting))
            logger.info("turn %s stopped between nodes: kept in the log", turn_id)

    def _unfinished(self, config: RunnableConfig | None) -> tuple[RunnableConfig, frozenset[str]] | None:
        """The thread's latest checkpoint and its turns still running here, where the run could
        have ended paused; ``None`` for the usual run, which logged its turn (no state is read)."""
        state_config = self._latest(config)
        if state_config is None:
            return None
        running = self.session.running_turns(state_config["configurable"]["thread_id"])
        return (state_config, running) if running else None

    def _latest(self, config: RunnableConfig | None) -> RunnableConfig | None:
        """The run's thread's latest checkpoint (not one the caller forked from); ``None`` without one."""
        thread_id = run_thread_id(config)
        if thread_id is None or not getattr(self.graph, "checkpointer", None):
            return None
        return {"configurable": {"thread_id": thread_id}}

    # ``_keep_asked`` and ``_akeep_asked`` (as ``_keep_paused`` and ``_akeep``, a deliberate repeat):
    # a run stopped at an interrupt with no turn of its thread running here. A turn its state names
    # may still be kept running in the log: its stream's reader left mid-run, or its process died,
    # and this run (a retry) asked for approval before memabra's nodes or hooks ran again, so no
    # process picked the turn up. A person is asked now: its copy is rewritten as paused, never lost.
    def _keep_asked(self, config: RunnableConfig | None) -> None:
        state_config = self._latest(config)
        if state_config is None:
            return
        try:
            snapshot = self.graph.get_state(state_config, subgraphs=True)
        except Exception:  # noqa: BLE001 - as in _keep_paused
            logger.warning(_UNREAD_ASKED, exc_info=True)
            return
        turn_id = asked_turn(snapshot)
        if turn_id is not None:
            pause_running_copy(self.session.log, turn_id)

    async def _akeep_asked(self, config: RunnableConfig | None) -> None:
        state_config = self._latest(config)
        if state_config is None:
            return
        try:
            snapshot = await self.graph.aget_state(state_config, subgraphs=True)
        except Exception:  # noqa: BLE001 - as in _keep_paused
            logger.warning(_UNREAD_ASKED, exc_info=True)
            return
        turn_id = asked_turn(snapshot)
        if turn_id is not None:  # a database read, and maybe a write: off the event loop
            await asyncio.to_thread(pause_running_copy, self.session.log, turn_id)

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

    async def afeedback(
        self,
        episode_id: str,
        *,
        kind: FeedbackKind | str = FeedbackKind.EXPLICIT,
        source: str = "api",
        idempotency_key: str | None = None,
        **payload: Any,
    ) -> FeedbackReceipt:
        """:meth:`feedback` for async code: its database writes, the correction's fact and the
        learner's step run on a worker thread, not on the event loop. A caller cancelled meanwhile
        (a client that went away) still has its feedback stored whole."""
        post = functools.partial(
            self.feedback, episode_id, kind=kind, source=source, idempotency_key=idempotency_key, **payload
        )
        return await asyncio.to_thread(post)
