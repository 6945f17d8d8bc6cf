"""What a run's end and its thread's state say about its turn, for :class:`~memabra.MemabraAgent`:
which turn a stopped run left (in the graph or a subgraph), whether a run that ended early waits
on someone, and whether a run stopped at an interrupt (its output, its stream's chunks, its
state). Read only where a run ended with a turn left, so a run that logged its turn reads nothing."""

from __future__ import annotations

from collections.abc import Container, Mapping
from typing import Any

from langgraph.types import Command

__all__ = [
    "Interrupts",
    "asked_turn",
    "interrupt_in",
    "paused_turn",
    "waits_on_someone",
]


def paused_turn(snapshot: Any, running: Container[str] | None) -> str | None:
    """The turn still running here (``running``; ``None``: any turn) that the state names where the
    run stopped with nodes still to run (a pause, or a run that raised or was closed): in the
    graph's own state, or in a subgraph's (memabra's nodes in an agent added as a node of a bigger
    graph)."""
    if not snapshot.next:
        return None
    values = snapshot.values if isinstance(snapshot.values, dict) else {}
    turn_id = values.get("memabra_turn")
    if isinstance(turn_id, str) and (running is None or turn_id in running):
        return turn_id
    for task in snapshot.tasks:
        nested = getattr(task, "state", None)
        found = paused_turn(nested, running) if nested is not None and hasattr(nested, "next") else None
        if found is not None:
            return found
    return None


def waits_on_someone(graph: Any, snapshot: Any, breakpoints: Mapping[str, Any]) -> bool:
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


def asked_turn(snapshot: Any) -> str | None:
    """The turn the state names where it holds an interrupt waiting for an answer (``None`` where
    it holds none: the run's output said otherwise, and nothing is read from the log)."""
    return paused_turn(snapshot, None) if _interrupted(snapshot) else None


def interrupt_in(out: Any) -> bool:
    """Whether a run's output says it stopped at an interrupt: the ``__interrupt__`` key of a
    graph's values, or ``interrupts`` of a ``GraphOutput`` (``version="v2"``)."""
    if isinstance(out, dict):
        return bool(out.get("__interrupt__"))
    return bool(getattr(out, "interrupts", None))


class Interrupts:
    """Whether a stream stopped at an interrupt, read from the chunks it passes on: an
    ``__interrupt__`` chunk (``updates`` mode, in any of a chunk's shapes: ``(namespace, mode,
    chunk)`` tuples, ``version="v2"`` parts, ``astream_events``' events), or a ``v2`` part's
    ``interrupts``. Where the stream's modes show no interrupt (``values``, ``messages``, events),
    or it ended early, a run that goes on from a checkpoint (input ``None`` or a ``Command``: a
    retry or an answer, the only runs that can stop at an interrupt before memabra's nodes run
    again) counts as one that may have, and its state says; a fresh run that showed none, none."""

    def __init__(self, graph: Any, input: Any, kwargs: Mapping[str, Any] | None) -> None:
        self.seen = False
        self._going_on = input is None or isinstance(input, Command)
        self._shown = False
        if kwargs is not None:
            mode: Any = kwargs.get("stream_mode") or getattr(graph, "stream_mode", None) or "values"
            modes = [mode] if isinstance(mode, str) else list(mode)
            self._shown = "updates" in modes or (kwargs.get("version") == "v2" and "values" in modes)

    def read(self, item: Any) -> None:
        if not self.seen:
            self.seen = _shows_interrupt(item)

    def stopped(self, waiting: bool | None) -> bool:
        """``waiting``: as the stream's end says (True: read to its end; None: ended early; False: raised)."""
        if waiting is False:
            return False
        return self.seen or (self._going_on and (waiting is None or not self._shown))


def _shows_interrupt(item: Any) -> bool:
    if isinstance(item, tuple) and item:
        item = item[-1]
    if not isinstance(item, dict):
        return False
    if "event" in item:  # astream_events
        data = item.get("data")
        item = data.get("chunk") if isinstance(data, dict) else None
    elif "type" in item and "ns" in item and "data" in item:  # a v2 part
        if item.get("interrupts"):
            return True
        item = item["data"]
    return isinstance(item, dict) and "__interrupt__" in item


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
