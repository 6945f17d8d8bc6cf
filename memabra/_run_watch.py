"""A run's stream watched to its end, however it ends, for :class:`~memabra.MemabraAgent` and the
graph the Agent Server runs (:mod:`memabra._served_graph`): one body, so the two keep a turn the
same way.

A stream read to its end ran until it stopped by itself (paused); one that raised is a run that
raised. One its reader closed (``close()`` / ``aclose()``, a ``break``, garbage collection) or
whose task was cancelled (a server cancelling a run) ended early: the thread's state says which
(:func:`~memabra._run_ends.waits_on_someone`). Whether a run stopped at an interrupt is read from
its chunks, where its modes show one (:class:`~memabra._run_ends.Interrupts`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import aclosing, closing
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.errors import GraphRecursionError

from memabra._kept_runs import akeep_paused, keep_paused
from memabra._out_of_steps import aclose_out_of_steps, close_out_of_steps, running_before
from memabra._run_ends import Interrupts
from memabra._session import RoutingSession

__all__ = ["watch_astream", "watch_stream"]


def watch_stream(
    graph: Any,
    session: RoutingSession,
    chunks: Iterator[Any],
    input: Any,
    config: RunnableConfig | None,
    kwargs: Mapping[str, Any],
) -> Iterator[Any]:
    """``chunks`` (the graph's own, not started) passed on, and the run's turn kept when it ends."""
    waiting: bool | None = False
    seen = Interrupts(graph, input, kwargs)
    before = running_before(graph, session, config)
    try:
        with closing(chunks):  # type: ignore[type-var]  # closing this closes the run
            for chunk in chunks:
                seen.read(chunk)
                yield chunk
        waiting = True
    except GraphRecursionError as exc:
        close_out_of_steps(graph, session, config, before, exc)
        raise
    except GeneratorExit:
        waiting = None
        raise
    finally:
        keep_paused(graph, session, config, waiting=waiting, breakpoints=kwargs, interrupted=seen.stopped(waiting))


async def watch_astream(
    graph: Any,
    session: RoutingSession,
    chunks: AsyncIterator[Any],
    input: Any,
    config: RunnableConfig | None,
    kwargs: Mapping[str, Any],
    *,
    events: bool = False,
) -> AsyncIterator[Any]:
    """As :func:`watch_stream`; ``events``: ``chunks`` are ``astream_events``' events, whose
    shapes no stream mode tells (an interrupt is read from the state where one may have stopped it)."""
    waiting: bool | None = False
    seen = Interrupts(graph, input, None if events else kwargs)
    before = running_before(graph, session, config)
    try:
        async with aclosing(chunks):  # type: ignore[type-var]
            async for chunk in chunks:
                seen.read(chunk)
                yield chunk
        waiting = True
    except GraphRecursionError as exc:
        await asyncio.shield(aclose_out_of_steps(graph, session, config, before, exc))
        raise
    except (GeneratorExit, asyncio.CancelledError):
        waiting = None
        raise
    finally:
        await akeep_paused(
            graph, session, config, waiting=waiting, breakpoints=kwargs, interrupted=seen.stopped(waiting)
        )
