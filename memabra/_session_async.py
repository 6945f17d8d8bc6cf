"""The async twins of :class:`~memabra.RoutingSession`'s methods, for a server that drives the
session from coroutines (FastAPI, plain asyncio) rather than through LangGraph: ``abegin``,
``afinish``... take the same arguments and return or raise what their sync forms do, as
LangGraph's ``BaseStore`` twins do. Their database work (and the router's, the encoder's) runs on
a worker thread, never on the event loop; what touches only memory (a step of a running turn, an
abandon) stays on the loop.

Cancelled (a client that went away, a request's timeout), a twin still finishes its work whole:
a thread cannot be stopped, so it is awaited to its end, and the ``CancelledError`` reaches the
caller only then (:func:`run_whole`). A cancelled ``afinish`` has logged its episode once, stored
its facts and taken its learner's step by the time the caller sees the cancellation (the
episode's id is the turn's ``episode_id``); a cancelled ``abegin`` routed its turn and then forgot
it, as :meth:`~memabra.RoutingSession.abandon` does.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from memabra._errors import InvalidRecordError
from memabra._records import FeedbackKind, FeedbackReceipt
from memabra._turns import Turn

if TYPE_CHECKING:
    from memabra._session import RoutingSession

__all__ = ["AsyncTwins", "run_whole"]

logger = logging.getLogger("memabra")

_T = TypeVar("_T")


async def run_whole(work: Callable[[], _T]) -> _T:
    """``work()`` on a worker thread (with the caller's context variables, as
    ``asyncio.to_thread``), awaited to its end even where the caller is cancelled meanwhile: then,
    once the work is done, the cancellation is raised (an error of the work's own is logged, as
    nobody awaits it any more). ``asyncio.to_thread`` alone would hand the caller its
    ``CancelledError`` at once, while the thread still wrote: the caller would read a log its
    own call had not finished writing, and a server shutting down could close the pool under it."""
    context = contextvars.copy_context()
    done = asyncio.get_running_loop().run_in_executor(None, functools.partial(context.run, work))
    cancelled: asyncio.CancelledError | None = None
    while not done.done():
        try:
            await asyncio.wait((done,))  # cancelled, it leaves ``done`` running
        except asyncio.CancelledError as exc:
            cancelled = exc
    if cancelled is None:
        return done.result()
    failed = done.exception()
    if failed is not None:
        logger.error("a call cancelled while it ran on a worker thread failed", exc_info=failed)
    raise cancelled


class AsyncTwins:
    """:class:`~memabra.RoutingSession`'s ``a``-prefixed twins (see the module's docstring)."""

    @property
    def _sync(self) -> RoutingSession:
        return cast("RoutingSession", self)  # mixed into RoutingSession only

    async def abegin(
        self,
        *,
        user_id: str,
        query: str,
        thread_id: str | None = None,
        turn: int | None = None,
        allowed_tools: Collection[str] | None = None,
        follows: str | None = None,
    ) -> Turn:
        """:meth:`begin`: recall, the previous turn's feedback, routing and the turn's copy, on a
        worker thread. Cancelled, the turn routed is forgotten (:meth:`abandon`)."""
        routed: list[Turn] = []

        def begin() -> Turn:
            t = self._sync.begin(
                user_id=user_id,
                query=query,
                thread_id=thread_id,
                turn=turn,
                allowed_tools=allowed_tools,
                follows=follows,
            )
            routed.append(t)
            return t

        try:
            return await run_whole(begin)
        except asyncio.CancelledError:
            for t in routed:
                self._sync.abandon(t.id)
                logger.info("turn %s was routed for a caller cancelled meanwhile: forgotten", t.id)
            raise

    async def aresume(
        self,
        turn_id: str,
        *,
        user_id: str,
        query: str,
        thread_id: str | None = None,
        turn: int | None = None,
        bind: Sequence[str] = (),
        messages: Sequence[Any] = (),
        allowed_tools: Collection[str] | None = None,
        fork: bool = False,
    ) -> Turn:
        """:meth:`resume`: a turn in flight here is read on the loop; the log's, on a worker thread."""
        try:
            return self._sync.get_turn(turn_id)
        except InvalidRecordError:
            pass
        return await run_whole(
            functools.partial(
                self._sync.resume,
                turn_id,
                user_id=user_id,
                query=query,
                thread_id=thread_id,
                turn=turn,
                bind=bind,
                messages=messages,
                allowed_tools=allowed_tools,
                fork=fork,
            )
        )

    async def akept_turn(self, turn_id: str, messages: Sequence[Any] = ()) -> Turn | None:
        """:meth:`kept_turn`, on a worker thread."""
        return await run_whole(functools.partial(self._sync.kept_turn, turn_id, messages))

    async def asuspend(self, turn_id: str, *, waiting: bool = True) -> None:
        """:meth:`suspend`: the turn's copy is written on a worker thread."""
        await run_whole(functools.partial(self._sync.suspend, turn_id, waiting=waiting))

    async def aunpause(self, t: Turn) -> Turn | None:
        """:meth:`unpause`: a turn not paused is returned on the loop; a paused one's copy is read
        and written on a worker thread."""
        if t.paused_at is None:
            return t
        return await run_whole(functools.partial(self._sync.unpause, t))

    async def arecord_model_call(
        self,
        turn_id: str,
        name: str,
        latency_ms: float,
        *,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
    ) -> None:
        """:meth:`record_model_call`: on the loop for a running turn (memory only); on a worker
        thread for one paused here, whose copy in the log takes the step."""
        record = functools.partial(
            self._sync.record_model_call,
            turn_id,
            name,
            latency_ms,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
        )
        await _recorded(self._sync, turn_id, record)

    async def arecord_tool_call(
        self,
        turn_id: str,
        name: str,
        arguments: Mapping[str, Any],
        *,
        result: str | None,
        status: str = "ok",
        error: str | None = None,
        latency_ms: float = 0.0,
    ) -> None:
        """:meth:`record_tool_call`, where :meth:`arecord_model_call` runs it."""
        record = functools.partial(
            self._sync.record_tool_call,
            turn_id,
            name,
            arguments,
            result=result,
            status=status,
            error=error,
            latency_ms=latency_ms,
        )
        await _recorded(self._sync, turn_id, record)

    async def afinish(self, turn_id: str, answer: str) -> str:
        """:meth:`finish` on a worker thread: the episode, its facts and the learner's step.
        Cancelled, the episode is logged once, whole, before the caller sees the cancellation."""
        return await run_whole(functools.partial(self._sync.finish, turn_id, answer))

    async def aabandon(self, turn_id: str) -> None:
        """:meth:`abandon` (memory only: nothing is written)."""
        self._sync.abandon(turn_id)

    async def afeedback(
        self,
        episode_id: str,
        *,
        kind: FeedbackKind | str = FeedbackKind.EXPLICIT,
        source: str = "api",
        idempotency_key: str | None = None,
        **payload: Any,
    ) -> FeedbackReceipt:
        """:meth:`feedback` on a worker thread; cancelled, the feedback is still stored whole."""
        post = functools.partial(
            self._sync.feedback, episode_id, kind=kind, source=source, idempotency_key=idempotency_key, **payload
        )
        return await run_whole(post)

    async def alearn_pending(self) -> int:
        """:meth:`learn_pending` on a worker thread."""
        return await run_whole(self._sync.learn_pending)

    async def asave_snapshot(self) -> str:
        """:meth:`save_snapshot` on a worker thread."""
        return await run_whole(self._sync.save_snapshot)

    async def aclose(self) -> None:
        """:meth:`close` on a worker thread (a FastAPI lifespan's shutdown): the snapshot's write,
        the lease's release, the pool of a log the session opened. Safe to call again."""
        await run_whole(self._sync.close)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


async def _recorded(session: RoutingSession, turn_id: str, record: Callable[[], None]) -> None:
    try:
        paused = session.get_turn(turn_id).paused_at is not None
    except InvalidRecordError:
        paused = False  # ``record`` raises the same error on the loop
    if paused:
        await run_whole(record)
    else:
        record()
