"""The graph LangGraph's Agent Server runs (``langgraph dev``, LangSmith Deployments):
:attr:`MemabraAgent.server_graph <memabra.MemabraAgent.server_graph>`.

The server loads a compiled graph (a ``Pregel``) named in ``langgraph.json``, copies it per run
with its own checkpointer and store, and drives it with ``astream`` (``runs.wait`` too, and
``astream_events`` and the v3 event stream, which read ``astream``). A :class:`~memabra.MemabraAgent`
is no graph, and its compiled graph (``agent.graph``) run there skips what the agent does as a
run ends: a turn stopped at ``interrupt_before`` / ``interrupt_after`` or another middleware's
``interrupt`` stays running in the log and reads lost in an hour while a person is asked, and a
run out of its ``recursion_limit`` leaves its turn running instead of logged as failed.

:class:`MemabraServedGraph` is that compiled graph with the agent's run-end handling in its own
``stream`` / ``astream`` (:mod:`memabra._run_watch`), so every way the server or anyone else runs
it (``invoke``, ``ainvoke``, ``batch``, ``astream_events`` go through them) ends as
:class:`~memabra.MemabraAgent`'s methods do. Its ``copy`` (the server's, per run) keeps the class
and the session. A turn the server's ``multitask_strategy="rollback"`` left behind is logged as
failed by the thread's next run, on whichever worker (:mod:`memabra._rolled_back`). Run as a
subgraph of a bigger graph it only passes its stream on: the run that ends is the parent's, whose
own wrapper reads the whole state."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import aclosing
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph

from memabra._errors import ConfigError
from memabra._rolled_back import asettle_run, atake_note
from memabra._run_turns import RunTurns, watch_run_turns
from memabra._run_watch import watch_astream, watch_stream
from memabra._session import RoutingSession

__all__ = ["MemabraServedGraph", "served_graph"]

# Set in the config of every node's task: a graph run with it is a subgraph of a running graph.
_TASK_KEY = "__pregel_task_id"


def _nested(config: RunnableConfig | None) -> bool:
    return bool(config) and _TASK_KEY in (config or {}).get("configurable", {})


class MemabraServedGraph(CompiledStateGraph):  # type: ignore[type-arg]
    """A memabra agent's compiled graph whose runs end as :class:`~memabra.MemabraAgent`'s do."""

    def __init__(self, *, memabra_session: RoutingSession, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.memabra_session = memabra_session

    def stream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Iterator[Any]:
        chunks = super().stream(input, config, **kwargs)
        if _nested(config):
            return chunks
        return watch_stream(self, self.memabra_session, chunks, input, config, kwargs)

    def astream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> AsyncIterator[Any]:
        chunks = super().astream(input, config, **kwargs)
        if _nested(config):
            return chunks
        # noted in the caller's context, not the generator's: a server may read each chunk in a task
        # of its own (``wait_for``), each a copy of the caller's context, where the graph's nodes run
        routed = watch_run_turns()
        return _served_astream(self, self.memabra_session, chunks, input, config, kwargs, routed)


async def _served_astream(
    graph: MemabraServedGraph,
    session: RoutingSession,
    chunks: AsyncIterator[Any],
    input: Any,
    config: RunnableConfig | None,
    kwargs: Mapping[str, Any],
    routed: RunTurns,
) -> AsyncIterator[Any]:
    """A run as :func:`~memabra._run_watch.watch_astream` watches it, with the server's rollback
    handled (:mod:`memabra._rolled_back`): the note an earlier cancelled run of the thread left is
    read beside the run, and its turn logged as failed as the run ends where the rollback deleted
    its checkpoint; this run's turn is noted where it is cancelled."""
    noted = asyncio.ensure_future(atake_note(graph, session, config))
    cancelled: RunTurns | None = None
    try:
        async with aclosing(watch_astream(graph, session, chunks, input, config, kwargs)) as watched:  # type: ignore[type-var]
            async for chunk in watched:
                yield chunk
    except asyncio.CancelledError:
        cancelled = routed
        raise
    finally:
        await asyncio.shield(asettle_run(graph, session, config, noted, cancelled))


def served_graph(graph: Any, session: RoutingSession) -> MemabraServedGraph:
    """``graph`` (a compiled ``StateGraph``: ``create_memabra_agent``'s, or ``create_agent``'s with
    :class:`~memabra.MemabraMiddleware`) as the Agent Server should run it."""
    if isinstance(graph, MemabraServedGraph):
        return graph
    if not isinstance(graph, CompiledStateGraph):
        raise ConfigError(
            f"server_graph needs a compiled StateGraph (create_memabra_agent's, or create_agent's with"
            f" MemabraMiddleware), got {type(graph).__name__}"
        )
    attrs = {k: v for k, v in graph.__dict__.items() if k != "__orig_class__"}  # as Pregel.copy reads it
    return MemabraServedGraph(memabra_session=session, **attrs)
