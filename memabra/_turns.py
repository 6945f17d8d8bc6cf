"""Turns in flight and the steps recorded in them (model calls, tool calls)."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from memabra._errors import InvalidRecordError
from memabra._log_caps import cut_arguments, cut_text
from memabra._records import Episode, Feedback, JSONValue, Selection, Step, StepKind, new_id
from memabra.storage import PAUSES_KEY, SuspendedTurn

__all__ = ["Turn", "TurnTable", "jsonable", "model_step", "tool_step"]

logger = logging.getLogger("memabra")

# Turns whose agent crashed never finish; the table is bounded so they cannot pile up.
MAX_TURNS_IN_FLIGHT = 10_000


@dataclass(slots=True)
class Turn:
    """A turn in flight: what was routed and what the agent has done so far."""

    id: str
    user_id: str
    thread_id: str | None
    turn: int
    query: str
    selection: Selection | None
    system_prompt: str
    tool_names: tuple[str, ...]
    started: float = field(default_factory=time.perf_counter)
    steps: list[Step] = field(default_factory=list)
    feedback: list[Feedback] = field(default_factory=list)
    episode_id: str = field(default_factory=new_id)
    # perf counter when an interrupt paused it: the pause is not the turn's latency
    paused_at: float | None = None
    # how many times it has paused: a process holding an older pause takes the log's newer one
    pauses: int = 0
    # a copy is in the log (written when it was routed, or at a pause): logging it deletes the copy
    kept_in_log: bool = False
    # the log's copy of it this process last read or wrote: its next write replaces only that copy,
    # since a newer one is another process's, which went on with the turn (``None``: written blind)
    copy: SuspendedTurn | None = field(default=None, repr=False)  # the selection again, as JSON
    # its episode is already in the log (its run went on after its logging node ran: a
    # ``Command(goto=...)`` beside a pending node, a retry): one decision, one episode, so it is
    # never kept or logged again, and what it records now is dropped
    logged: bool = False

    def resume_clock(self) -> None:
        """Go on timing it after a pause: the time it stood paused is not its latency."""
        if self.paused_at is not None:
            self.started += time.perf_counter() - self.paused_at
            self.paused_at = None

    def numbered_steps(self) -> tuple[Step, ...]:
        return tuple(replace(s, seq=i) for i, s in enumerate(self.steps))

    def episode(
        self,
        answer: str | None,
        metadata: Mapping[str, JSONValue],
        *,
        used_ids: frozenset[str] | None = None,
        created_at: datetime | None = None,
    ) -> Episode:
        """The turn as the episode the log keeps (``created_at``: now unless given); a turn kept in
        the log says how often it paused in its metadata, which tells the log to drop the copy.
        The answer is kept up to :data:`~memabra._log_caps.MAX_LOGGED_TEXT` characters (the
        caller's answer is the whole one)."""
        if self.pauses or self.kept_in_log:
            metadata = {**metadata, PAUSES_KEY: self.pauses}
        episode = Episode(
            user_id=self.user_id,
            query=self.query,
            selections=(self.selection,) if self.selection is not None else (),
            steps=self.numbered_steps(),
            answer=cut_text(answer),
            thread_id=self.thread_id,
            turn=self.turn,
            id=self.episode_id,
            feedback=tuple(self.feedback),
            used_ids=used_ids,
            metadata=metadata,
        )
        return episode if created_at is None else replace(episode, created_at=created_at)


class TurnTable:
    """The turns in flight of one session, by id (thread-safe, bounded)."""

    def __init__(self, limit: int = MAX_TURNS_IN_FLIGHT) -> None:
        self._limit = limit
        self._lock = threading.Lock()
        self._turns: OrderedDict[str, Turn] = OrderedDict()

    def add(self, turn: Turn) -> None:
        with self._lock:
            self._turns[turn.id] = turn
            while len(self._turns) > self._limit:
                dropped, _ = self._turns.popitem(last=False)
                logger.warning(
                    "dropping turn %s from this process: it never finished here (its run failed or was"
                    " abandoned, or it went on in another worker after a pause)",
                    dropped,
                )

    def get(self, turn_id: str) -> Turn:
        with self._lock:
            found = self._turns.get(turn_id)
        if found is None:
            raise InvalidRecordError(f"no turn in flight with id {turn_id!r}")
        return found

    def pop(self, turn_id: str) -> Turn:
        with self._lock:
            found = self._turns.pop(turn_id, None)
        if found is None:
            raise InvalidRecordError(f"no turn in flight with id {turn_id!r}")
        return found

    def discard(self, turn_id: str) -> None:
        with self._lock:
            self._turns.pop(turn_id, None)

    def running_in(self, thread_id: str) -> frozenset[str]:
        """Ids of the thread's turns in flight here and not paused."""
        with self._lock:
            return frozenset(t.id for t in self._turns.values() if t.thread_id == thread_id and t.paused_at is None)


def model_step(
    name: str,
    latency_ms: float,
    input_tokens: int | None,
    output_tokens: int | None,
    *,
    status: str = "ok",
    error: str | None = None,
) -> Step:
    """A model call as the log keeps it: its error (a provider's whole response body, at times)
    cut to :data:`~memabra._log_caps.MAX_LOGGED_TEXT` characters."""
    return Step(
        StepKind.MODEL,
        name,
        status=status,
        error=cut_text(error),
        latency_ms=latency_ms,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
    )


def tool_step(
    name: str, arguments: Mapping[str, Any], *, result: str | None, status: str, error: str | None, latency_ms: float
) -> Step:
    """A tool call as the log keeps it: its result and error cut to
    :data:`~memabra._log_caps.MAX_LOGGED_TEXT` characters and its arguments to about as much
    (:func:`~memabra._log_caps.cut_arguments`), each with a note saying how much was left out;
    the model was shown the whole result."""
    return Step(
        StepKind.TOOL,
        name,
        arguments=cut_arguments(jsonable(arguments)),
        result=cut_text(result),
        status=status,
        error=cut_text(error),
        latency_ms=latency_ms,
    )


# Deepest nesting of tool arguments kept in the log; deeper, a level is logged as this text. A model
# can write arguments nested thousands deep: copied whole, they crashed the turn with a
# RecursionError once the run had begun, leaving it kept as running.
MAX_JSON_DEPTH = 64
TOO_DEEP = f"(nested deeper than {MAX_JSON_DEPTH} levels: not logged)"


def jsonable(value: Any, _depth: int = 0) -> Any:
    """``value`` as JSON values (tool arguments come from models and may hold anything), nested
    at most :data:`MAX_JSON_DEPTH` levels (deeper: :data:`TOO_DEEP`)."""
    if isinstance(value, (Mapping, list, tuple)) and _depth >= MAX_JSON_DEPTH:
        return TOO_DEEP
    if isinstance(value, Mapping):
        return {str(k): jsonable(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v, _depth + 1) for v in value]
    if value is None or isinstance(value, (str, int, bool)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    return repr(value)
