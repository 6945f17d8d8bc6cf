"""Turns kept in the log until their episode is logged: from the moment they are routed, so that
a process dying mid-turn leaves its decision behind, and again at each pause, so that whichever
process resumes the run goes on with the same turn (:class:`PausedTurns`). A turn nobody goes on
with (paused and never resumed, or lost with its process) is logged as a failed episode when an
operator gives up on it, never dropped (:func:`abandon_paused_turn`). An offline evaluation that
lost its unfinished decisions would be biased the way one that lost failing turns would be (a
selection that makes the agent hang until its worker is killed would look better than it is), so
the decision stays in the log with what was done before and ``accepted: false`` (S = 0, until
someone's verdict says otherwise)."""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from memabra._errors import InvalidRecordError, UnknownEpisodeError
from memabra._feedback import RewardService
from memabra._records import Episode, Feedback, FeedbackKind, Selection, utcnow
from memabra._run_turns import note_run_turn
from memabra._turn_decisions import ABANDONED_SOURCE, FAILED_TURN_SOURCE, decision_id, logged_decisions
from memabra._turn_document import turn_document, turn_from_document
from memabra._turns import Turn, TurnTable
from memabra.storage import EpisodeLog, SuspendedTurn, clean_text

__all__ = [
    "ABANDONED_SOURCE",
    "FAILED_TURN_SOURCE",
    "PausedTurns",
    "abandon_paused_turn",
    "decision_id",
    "pause_running_copy",
]

logger = logging.getLogger("memabra")

# Reads of a turn's copy while resuming it, each write refused as another process wrote meanwhile.
_READS = 3


# An actor or client name longer than this is a mistake (a pasted token), not a name to keep whole.
_MAX_ACTOR = 200


def abandon_paused_turn(
    rewards: RewardService, kept: SuspendedTurn, *, actor: str = "library", client: str | None = None
) -> str:
    """Log ``kept`` as a failed episode (its row goes in the same transaction) and return the
    episode id. A turn resumed and logged meanwhile is refused by the log (its id is taken); one a
    process went on with since ``kept`` was read (a retry picked it up and wrote a newer copy) is
    refused with :class:`~memabra.storage.TurnWentOnError`, nothing logged, its newer copy kept. The
    episode's metadata names who gave up on the turn (``abandoned_by``, and ``abandoned_from``
    when ``client`` is given), as the deletion and snapshot audit trails do: a failed episode is
    a reward the learner trains on, so a reviewer must be able to tell it from a user's verdict."""
    actor = clean_text(actor).strip()
    if not actor:
        raise InvalidRecordError("actor must name who abandons the turn, got an empty string")
    turn = turn_from_document(kept.document, time.perf_counter())
    failed = Feedback(turn.episode_id, FeedbackKind.PROGRAMMATIC, ABANDONED_SOURCE, {"accepted": False})
    turn.feedback.append(failed)
    metadata: dict[str, object] = {
        "latency_ms": kept.document["elapsed_ms"],
        "abandoned_at": utcnow().isoformat(),
        "abandoned_by": actor[:_MAX_ACTOR],
        **({"abandoned_from": clean_text(client).strip()[:_MAX_ACTOR]} if client else {}),
    }
    # the turn's own time, not the operator's: its feedback window has long passed
    episode = turn.episode(
        None, metadata, created_at=turn.selection.created_at if turn.selection else kept.suspended_at
    )
    # only the copy the caller read: a newer one belongs to a run going on now, not a failed one
    rewards.record(episode, replacing=kept)
    logger.info("paused turn %s abandoned: logged as failed episode %s", kept.turn_id, turn.episode_id)
    return turn.episode_id


def pause_running_copy(log: EpisodeLog, turn_id: str) -> bool:
    """Rewrite the log's copy of ``turn_id`` as paused where it reads running; whether it wrote one.
    For a run that stopped at an interrupt raised before memabra's own nodes or hooks ran again (a
    retry whose first step is ``HumanInTheLoopMiddleware``'s approval request, after the reader of
    the stream that ran the turn went away): no process picked the turn up, so its copy still reads
    running, and would read lost in an hour while a person is asked. The copy is written as it is
    (its steps and pauses are the newest any process wrote), paused since now. Nothing is written
    where the log keeps the turn paused or keeps it no more, nor, by the write's guard, for a turn
    whose episode was logged meanwhile. Best effort, as every copy's write: a warning, never raised
    (the interrupt already reached its caller)."""
    try:
        kept = log.suspended_turn(turn_id)
    except Exception:  # noqa: BLE001 - best effort, see above
        logger.warning("could not read turn %s's copy in the log to keep it paused", turn_id, exc_info=True)
        return False
    if kept is None or kept.paused:
        return False
    unkept = "could not keep turn %s in the log as paused: it reads lost in an hour though a person is asked"
    # guarded: another process may have written a newer copy since the read (it went on with the
    # run); that copy stands, and a blind write would put these older steps back over it
    if _save(log, replace(kept, suspended_at=utcnow(), paused=True), unkept, replacing=kept) is not _Saved.WRITTEN:
        return False
    logger.info("turn %s stopped at an interrupt before this process went on with it: kept paused", turn_id)
    return True


class _Saved(enum.Enum):
    """What became of a copy's write."""

    WRITTEN = "written"
    # the log no longer holds the copy the write was to replace: a newer one (another process went
    # on with the turn since this one read or wrote it), or none (logged, or its user erased)
    OVERTAKEN = "overtaken"
    LOGGED = "logged"  # a copy over none, refused: the turn's episode was logged meanwhile (a retry elsewhere)
    FAILED = "failed"  # the log could not take it (warned)


def _save(log: EpisodeLog, kept: SuspendedTurn, unkept: str, *, replacing: SuspendedTurn | None = None) -> _Saved:
    """Write ``kept``; ``FAILED``, with the warning ``unkept`` (naming the turn), where the log
    cannot take it: the caller goes on either way. Given ``replacing`` (the copy read or written
    before), written only over that copy: ``OVERTAKEN``, logged, where the log holds a newer one or
    none. Without it, ``LOGGED``, logged, where the log refused the copy as the turn's episode is in it."""
    try:
        written = log.suspend_turn(kept, replacing=replacing)
    except Exception:  # noqa: BLE001 - best effort, see above
        logger.warning(unkept, kept.turn_id, exc_info=True)
        return _Saved.FAILED
    if written:
        return _Saved.WRITTEN
    if replacing is None:  # the log skips a copy over none only where the episode is logged
        logger.info("turn %s was logged meanwhile (episode %s): no copy of it is kept", kept.turn_id, kept.episode_id)
        return _Saved.LOGGED
    logger.info(
        "turn %s's copy in the log changed since this process read or wrote it (another process went on with"
        " the turn, or it was logged): the newer copy stands",
        kept.turn_id,
    )
    return _Saved.OVERTAKEN


def _went_on_elsewhere(kept: SuspendedTurn, t: Turn) -> bool:
    """Whether ``kept``, the log's copy, is newer than what ``t``, paused here, knows: paused more
    often, or, paused as often, written since this process last read or wrote the copy."""
    pauses = kept.document.get("pauses", 0)
    if pauses != t.pauses:
        return bool(pauses > t.pauses)
    mine = t.copy
    return mine is not None and (mine.suspended_at, mine.paused) != (kept.suspended_at, kept.paused)


class PausedTurns:
    """A session's turns kept in the log: written when routed and at each pause, read back by
    whichever process goes on with the run. ``lock`` also guards routing a resumed turn afresh: two
    parallel tool calls of one resumed run must not route it twice."""

    def __init__(
        self, log: EpisodeLog, turns: TurnTable, context: Callable[[Selection], tuple[str, tuple[str, ...]]]
    ) -> None:
        self._log = log
        self._turns = turns
        self._context = context  # a decision's system prompt and tool names
        self.lock = threading.Lock()

    def suspend(self, turn_id: str, *, steps_only: bool = False, waiting: bool = True) -> None:
        """Keep the turn in the log while an interrupt pauses it, so that any process, this one
        after a restart included, can go on with it. Writing it is best effort: the interrupt must
        still reach LangGraph, and this process can still resume the turn.

        Called again for a turn already paused, it writes the turn's copy again, with the steps
        recorded since: a sibling interrupt in the same step, or a call that ended after the
        interrupt paused the turn (LangGraph keeps its answer and does not run it again);
        ``steps_only`` writes only such a copy, never pausing a running turn. The write is made
        holding :attr:`lock`, so a later copy is never overwritten by an earlier one, and only over
        the copy this process last read or wrote (:attr:`Turn.copy`): where another process went on
        with the turn since (a double resume), its newer copy stands and this pause is not kept
        (logged); whichever process goes on with the turn next reads that newer copy. ``waiting``
        false: the run stopped without an interrupt and nobody waits to resume it (it raised, or
        was cancelled), so the copy reads as running, and is lost in time if nobody retries it."""
        with self.lock:
            try:
                t = self._turns.get(turn_id)
            except InvalidRecordError:
                return
            if t.logged:  # nothing to keep: its episode is in the log
                return
            if t.paused_at is None:
                if steps_only:
                    return
                t.paused_at = time.perf_counter()
                t.pauses += 1
            self._write(
                t,
                (t.paused_at - t.started) * 1000.0,
                paused=waiting,
                unkept="could not keep paused turn %s in the log: only this process can resume it with its steps",
            )

    def keep_running(self, t: Turn) -> _Saved:
        """Keep ``t`` in the log as it starts to run, so that if this process dies before the turn
        is logged its routing decision is not lost: a run retried from its checkpoint goes on with
        it (:meth:`from_log`), or an operator logs it as failed. Written again, as running since
        now, when a paused or lost turn goes on (:meth:`unpause`, a retry's
        :meth:`RoutingSession.resume`): a turn waiting on nobody must not read as paused, nor one
        retried late as lost while it runs. A turn with no decision has nothing to lose and is not
        written. Best effort, as a pause's copy is: the turn goes on without a copy when the log
        cannot take one. Written only over :attr:`Turn.copy` where set: ``OVERTAKEN`` where the log
        holds another copy now; where unset, ``LOGGED`` where the turn's episode is logged already."""
        note_run_turn(t.id)  # the run whose context this is goes on with it
        if t.selection is None or t.logged:
            return _Saved.WRITTEN  # nothing to keep
        return self._write(
            t,
            (time.perf_counter() - t.started) * 1000.0,
            paused=False,
            unkept="could not keep turn %s in the log while it runs: were this process to die before the turn"
            " is logged, its routing decision would be lost",
        )

    def _write(self, t: Turn, elapsed_ms: float, *, paused: bool, unkept: str) -> _Saved:
        """Write ``t``'s copy over :attr:`Turn.copy` (blind where ``None``: a turn routed here);
        ``unkept`` is the warning (with the turn id) when the log cannot take it: the caller goes
        on either way (an interrupt must still reach LangGraph, a turn still runs)."""
        kept = SuspendedTurn(
            t.id, t.episode_id, t.user_id, t.thread_id, utcnow(), turn_document(t, elapsed_ms), paused=paused
        )
        saved = _save(self._log, kept, unkept, replacing=t.copy)
        if saved is _Saved.WRITTEN:
            t.kept_in_log, t.copy = True, kept
        return saved

    def unpause(self, t: Turn) -> Turn | None:
        """``t``, paused here, going on: the log's copy where another process went on with the turn
        since this one paused it (paused it more often, or wrote the copy since: it holds that
        process's steps), else ``t`` with its clock moved past the pause; ``None`` (and ``t``
        forgotten) where its episode was logged meanwhile (finished by another worker, or abandoned
        by ``memabra episodes paused --abandon``): the run needs a new turn.

        The copy is then written as running, only over the copy read, never over a newer one:
        where another process wrote between the read and the write (a double resume: a client's
        retry, two workers taking the same thread), the write is refused, logged, and this process
        reads the log again and goes on with that newer copy. So in a double resume the copy holds
        the steps of the last process to go on with the turn; the other's later writes (its pause,
        its steps) are refused as overtaken (:meth:`suspend`), and whichever run finishes first
        logs the one episode (the other logs nothing: :meth:`RoutingSession.finish`)."""
        with self.lock:
            if t.paused_at is None:
                return t
            going_on = t
            for _ in range(_READS):
                kept = self._log.suspended_turn(t.id)
                if kept is None and self._logged(t.episode_id):
                    self._turns.discard(t.id)
                    return None
                if kept is not None and _went_on_elsewhere(kept, going_on):
                    going_on = self._taken(kept)
                    logger.info("turn %s went on in another process since it paused here: going on with its copy", t.id)
                else:
                    going_on.resume_clock()
                if kept is None:  # the log lost it: written again only where it was never written
                    if self.keep_running(going_on) is _Saved.LOGGED:  # logged since the read above
                        self._turns.discard(t.id)
                        return None
                    return going_on
                # running again: were this process to die now, the copy must read lost, not paused
                going_on.copy = kept
                if self.keep_running(going_on) is not _Saved.OVERTAKEN:
                    return going_on
            logger.warning("turn %s's copy kept changing as this process resumed it: going on unkept", t.id)
            return going_on

    def routed_afresh(self, t: Turn, messages: Sequence[Any], bind: Sequence[str]) -> Turn:
        """``t`` (routed afresh: no process held or kept its turn) with ``bind``'s tools, in flight
        here and kept as running; or the turn another process routed afresh meanwhile, ``t``'s
        decision dropped. :attr:`lock` guards one process only, and of two retries each routing the
        turn, the later one's copy, written over none, would replace the earlier one's steps. So
        the log is read again once routed (the long part): a copy there stands (read as
        :meth:`held` reads it); else ``t``'s is written just after (the log's write has no
        insert-only form: a copy written between the two statements, with no step yet, is replaced,
        and its process's later writes are refused as overtaken). Refused as its episode was logged
        meanwhile, the turn goes on with that decision (logging it logs nothing). Hold :attr:`lock`."""
        t.tool_names = tuple(dict.fromkeys((*t.tool_names, *bind)))
        standing = self.held(t.id, messages)
        if standing is None:
            self._turns.add(t)
            if self.keep_running(t) is not _Saved.LOGGED:
                return t
            standing, _ = self.logged_decision(t.id)
            if standing is None:  # logged and closed unfinished already: a decision nobody runs
                logger.warning("turn %s was logged as failed while routed again here: going on unkept", t.id)
                return t
        else:
            logger.info("turn %s was routed again by another process meanwhile: going on with its copy", t.id)
        standing.tool_names = tuple(dict.fromkeys((*standing.tool_names, *bind)))
        return standing

    def _taken(self, kept: SuspendedTurn) -> Turn:
        """The turn ``kept`` holds, in flight here from now on (in place of any held here)."""
        t = turn_from_document(kept.document, time.perf_counter())
        t.copy = kept
        self._turns.add(t)
        return t

    def held(self, turn_id: str, messages: Sequence[Any], *, going_on: bool = True) -> Turn | None:
        """The turn in flight here, else the log's copy with the steps ``messages`` show it lacks
        (``going_on``: written as running since now, not paused or lost, over the copy read, as
        :meth:`unpause` writes it: one that went on in another process meanwhile is read again),
        else ``None``. Call with :attr:`lock` held."""
        try:
            return self._turns.get(turn_id)
        except InvalidRecordError:
            pass
        # here, not at the top: the CLI imports this module to abandon turns, and must start
        # without langgraph (which reading messages back needs)
        from memabra._message_steps import take_back_steps

        for _ in range(_READS):
            kept = self.from_log(turn_id)
            if kept is None:
                return None
            take_back_steps(kept, messages)
            if not going_on or self.keep_running(kept) is not _Saved.OVERTAKEN:
                return kept
        logger.warning("turn %s's copy kept changing as this process resumed it: going on unkept", turn_id)
        return kept

    def from_log(self, turn_id: str) -> Turn | None:
        """The turn the log keeps, now in flight here: paused by an interrupt in another process
        (or before a restart), or routed by a process that died before logging it; ``None`` when
        the log keeps none. Call with :attr:`lock` held."""
        kept = self._log.suspended_turn(turn_id)
        if kept is None:
            return None
        t = self._taken(kept)
        how = "an interrupt paused it" if kept.paused else "the process that routed it stopped before logging it"
        logger.info("turn %s resumed from the log, where %s", turn_id, how)
        return t

    def logged_decision(
        self, turn_id: str, *, settled: bool = True, messages: Sequence[Any] | None = None
    ) -> tuple[Turn | None, str]:
        """The turn as a logging node logged it, now in flight here (``None``: not logged yet, or
        ``settled`` false: a fork of its run, whose logged decisions are other branches'; given the
        run's ``messages``, the decision whose answer they hold: :func:`logged_decisions`), and the
        episode id its next decision would take. Read where the turn is neither in flight here
        nor kept (rare: a retry, a run that goes on after its logging node, a fork). Hold :attr:`lock`."""
        found, episode_id = logged_decisions(self._log, turn_id, settled=settled, messages=messages)
        return (self._settled(turn_id, found) if found is not None else None), episode_id

    def _settled(self, turn_id: str, episode: Episode) -> Turn:
        """The turn ``episode`` logged, in flight again where its run goes on: with that decision's
        context, and nothing it records is logged (:meth:`RoutingSession.finish` names the episode)."""
        selection = episode.selections[0] if episode.selections else None
        prompt, tools = self._context(selection) if selection is not None else ("", ())
        t = Turn(
            turn_id, episode.user_id, episode.thread_id, episode.turn or 0, episode.query, selection, prompt, tools
        )
        t.episode_id, t.logged, t.steps = episode.id, True, list(episode.steps)  # its calls tell a fork
        self._turns.add(t)
        logger.info("turn %s goes on after its episode %s was logged: it is not logged again", turn_id, episode.id)
        return t

    def logged(self, episode_id: str) -> bool:
        """Whether the log already holds ``episode_id`` (another process, or an operator, logged it)."""
        return self._logged(episode_id)

    def _logged(self, episode_id: str) -> bool:
        try:
            self._log.resolve_episode_id(episode_id)
        except UnknownEpisodeError:
            return False
        return True
