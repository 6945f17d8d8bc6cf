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
from collections.abc import AsyncIterator, Iterator
from contextvars import copy_context
from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import get_config_list, get_executor_for_config
from langchain_core.runnables.utils import gather_with_concurrency
from langgraph.errors import GraphRecursionError

from memabra._kept_runs import akeep_paused, keep_paused
from memabra._out_of_steps import aclose_out_of_steps, close_out_of_steps, running_before
from memabra._records import FeedbackKind, FeedbackReceipt
from memabra._run_ends import interrupt_in
from memabra._run_watch import watch_astream, watch_stream
from memabra._served_graph import MemabraServedGraph, served_graph
from memabra._session import RoutingSession
from memabra.router import Router
from memabra.storage import EpisodeLog

__all__ = ["MemabraAgent"]

# The attributes IPython looks up to display an object, which are not forwarded to the graph.
_DISPLAY_HOOKS = ("_repr_", "_ipython_")


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

    @functools.cached_property
    def server_graph(self) -> MemabraServedGraph:
        """The compiled graph for LangGraph's Agent Server (``langgraph dev``, LangSmith
        Deployments): name it in ``langgraph.json`` (``graph = agent.server_graph``). The server runs
        a compiled graph, not this object; this one ends each run as this object's methods do
        (:mod:`memabra._served_graph`), which ``graph`` run there would not."""
        return served_graph(self.graph, self.session)

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
            keep_paused(self.graph, self.session, config, waiting=False)
            raise
        keep_paused(self.graph, self.session, config, interrupted=interrupt_in(out))
        return out

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        before = running_before(self.graph, self.session, config)
        try:
            out = await self.graph.ainvoke(input, config, **kwargs)
        except BaseException as exc:
            if isinstance(exc, GraphRecursionError):
                await asyncio.shield(aclose_out_of_steps(self.graph, self.session, config, before, exc))
            await akeep_paused(self.graph, self.session, config, waiting=False)
            raise
        await akeep_paused(self.graph, self.session, config, interrupted=interrupt_in(out))
        return out

    # A stream ends as :mod:`memabra._run_watch` reads it (the graph the Agent Server runs ends
    # its streams the same way).
    def stream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Iterator[Any]:
        chunks = self.graph.stream(input, config, **kwargs)
        return watch_stream(self.graph, self.session, chunks, input, config, kwargs)

    def astream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> AsyncIterator[Any]:
        chunks = self.graph.astream(input, config, **kwargs)
        return watch_astream(self.graph, self.session, chunks, input, config, kwargs)

    # A batch runs each input as ``invoke`` / ``ainvoke`` would, each in a context of its own (as
    # langchain's ``Runnable.batch`` runs each input's ``invoke``): a run's turns are told apart by
    # the context it routed them in (:mod:`memabra._run_turns`), so a batch's runs without thread
    # ids, out of steps, each close their own turn, and none another run's. Each run ends as it
    # ends, however the others do; a run's exception is its result, and without
    # ``return_exceptions`` the caller gets the first one (see :func:`_outs_or_first_error`).
    def batch(
        self,
        inputs: list[Any],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        if not inputs:
            return []
        configs = get_config_list(config, len(inputs))

        def run(input: Any, each: RunnableConfig) -> Any:
            try:
                return self.invoke(input, each, **kwargs)
            except Exception as exc:  # noqa: BLE001 - the run's outcome, raised below unless asked for
                return exc

        if len(inputs) == 1:  # no executor, as langchain's; the caller's context is left as it was
            outs = [copy_context().run(run, inputs[0], configs[0])]
        else:
            with get_executor_for_config(configs[0]) as executor:  # a copy of the context per input
                outs = list(executor.map(run, inputs, configs))
        return _outs_or_first_error(outs, return_exceptions)

    async def abatch(
        self,
        inputs: list[Any],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        if not inputs:
            return []
        configs = get_config_list(config, len(inputs))

        async def run(input: Any, each: RunnableConfig) -> Any:
            try:
                return await self.ainvoke(input, each, **kwargs)
            except Exception as exc:  # noqa: BLE001 - as in batch
                return exc

        # each input runs in a task, so in a copy of the context of its own
        outs = await gather_with_concurrency(configs[0].get("max_concurrency"), *map(run, inputs, configs))
        return _outs_or_first_error(outs, return_exceptions)

    def astream_events(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> AsyncIterator[Any]:
        events = self.graph.astream_events(input, config, **kwargs)
        return watch_astream(self.graph, self.session, events, input, config, kwargs, events=True)

    def get_state(self, config: RunnableConfig, **kwargs: Any) -> Any:
        return self.graph.get_state(config, **kwargs)

    def __getattr__(self, name: str) -> Any:
        # Only for names this class lacks: the rest of the compiled graph's API, so code written
        # for a LangGraph agent keeps working on this one.
        if name in ("graph", "session"):  # not set yet (unpickling, a half-built object)
            raise AttributeError(name)
        if name.startswith(_DISPLAY_HOOKS):
            # Jupyter shows the agent by its repr, not as the graph would be shown (the graph's
            # ``_repr_mimebundle_`` draws it through mermaid.ink, a web request at every display,
            # and labels it the graph's repr): ``agent.graph`` shows the drawing
            raise AttributeError(name)
        return getattr(self.graph, name)

    def __repr__(self) -> str:
        """What a notebook shows: the policy serving, the log, and whether this agent learns (it
        reads nothing from the log)."""
        runtime = self.session.runtime
        if runtime.closed:
            learning = "closed"
        elif runtime.learner is None:
            learning = "off"
        elif runtime.learner.holds_lease:
            learning = f"learner, {runtime.learner.pending} not saved yet"
        else:
            learning = "standby (no learner lease: another agent holds it, or no turn or feedback took it yet)"
        return f"<MemabraAgent policy_version={self.router.policy_version!r} db={self.log.url!r} learning={learning}>"

    def close(self) -> None:
        """Save what was learned since the last snapshot and release the learner lease."""
        self.session.close()

    def __enter__(self) -> MemabraAgent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def aclose(self) -> None:
        """:meth:`close` for async code (a FastAPI lifespan's shutdown): the snapshot's write, the
        lease's release and the log's pool run on a worker thread, not on the event loop. Safe to
        call again, as :meth:`close` is; a caller cancelled meanwhile still has the agent closed whole."""
        await self.session.aclose()

    async def __aenter__(self) -> MemabraAgent:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

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
        (a client that went away) sees the cancellation once its feedback is stored whole
        (:meth:`RoutingSession.afeedback <memabra.RoutingSession.afeedback>`)."""
        return await self.session.afeedback(
            episode_id, kind=kind, source=source, idempotency_key=idempotency_key, **payload
        )


def _outs_or_first_error(outs: list[Any], return_exceptions: bool) -> list[Any]:
    """What the caller's batch returns: every outcome with ``return_exceptions=True``, else the
    outcomes, or the first run's exception (in input order) once every run has ended. Unlike
    langchain's ``abatch``, which raises the first run's exception as it comes while the other
    runs go on unobserved, every run has ended as it would under ``invoke`` by then."""
    if not return_exceptions:
        for out in outs:
            if isinstance(out, BaseException):
                raise out
    return outs
