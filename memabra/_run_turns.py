"""The turns routed (or taken up from the log) by the run whose context this is: what tells a run's
own turn from another's where no checkpoint names it (:mod:`memabra._out_of_steps`: a run without a
checkpointer, with no thread id, or beside other runs of its thread, that ran out of steps).

:func:`watch_run_turns` is called as a run starts, in the context its graph runs in: LangGraph
runs each node (and a sync node's executor thread, and an async node's task) in a copy of that
context, so the set it puts there is the one :func:`note_run_turn` adds to while the run routes.
Concurrent runs (threads, asyncio tasks) each have their own context, so their own set. Nothing
here imports LangGraph: the CLI imports :mod:`memabra._paused_turns`, which notes each turn."""

from __future__ import annotations

from contextvars import ContextVar

__all__ = ["RunTurns", "note_run_turn", "watch_run_turns"]

# A run routes one turn (a few more where memabra agents run as its subgraphs): past this many,
# the set tells no turn apart, and nothing more is kept in it.
_MAX_NOTED = 16


class RunTurns:
    """The ids of the turns one run routed or took up; ``full`` past :data:`_MAX_NOTED`."""

    __slots__ = ("full", "ids")

    def __init__(self) -> None:
        self.ids: set[str] = set()
        self.full = False

    def note(self, turn_id: str) -> None:
        if len(self.ids) < _MAX_NOTED:
            self.ids.add(turn_id)
        elif turn_id not in self.ids:
            self.full = True


_RUN_TURNS: ContextVar[RunTurns | None] = ContextVar("memabra_run_turns", default=None)


def watch_run_turns() -> RunTurns:
    """A fresh set for the run starting in this context (it replaces any earlier run's)."""
    turns = RunTurns()
    _RUN_TURNS.set(turns)
    return turns


def note_run_turn(turn_id: str) -> None:
    """Add ``turn_id`` to the set of the run whose context this is, where a run is watched."""
    turns = _RUN_TURNS.get()
    if turns is not None:
        turns.note(turn_id)
