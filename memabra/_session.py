"""The routing loop shared by the agent, the middleware and the graph node.

One turn: :meth:`RoutingSession.begin` reads the user's message as feedback on their previous turn
(:mod:`memabra._correction_scan`), gathers the user's candidates (of the session's tools, those
the run may use: :mod:`memabra._run_scope`) and asks the serving router for a
selection (:mod:`memabra._context`); the agent runs with the chosen context while
:meth:`record_model_call` / :meth:`record_tool_call` collect its steps (:mod:`memabra._turns`);
:meth:`finish` works out which injected candidates were used (:mod:`memabra._usage`), logs the
episode with its provisional reward in one transaction, writes new memories, then gives the
in-process learner its turn (:mod:`memabra._serving`, :mod:`memabra._learner`;
:mod:`memabra._session_feedback` takes feedback on logged episodes): every reward that
has become final is learned exactly once, by whichever process holds the policy's lease.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy.exc import DBAPIError

from memabra._catalog import Skill, skill_items, tool_items
from memabra._config import load_reward_config
from memabra._context import assemble, gather_candidates, own_items
from memabra._correction_scan import PreviousTurn, PreviousTurns, correction_feedback
from memabra._embeddings import prepare_encoder, warm
from memabra._errors import InvalidRecordError
from memabra._feedback import RewardService
from memabra._memory import FactExtractor, MemoryBackend, RuleFactExtractor
from memabra._paused_turns import PausedTurns
from memabra._records import (
    Budget,
    Feedback,
    FeedbackKind,
    RegistryItem,
    RoutingContext,
    Selection,
    Step,
    new_id,
)
from memabra._run_scope import SharedItems, require_user
from memabra._serving import PolicyRuntime
from memabra._session_async import AsyncTwins
from memabra._session_feedback import FeedbackAndLearning
from memabra._settings import SessionSettings
from memabra._sql_memory import SQLMemory
from memabra._token_count import TokenCounts
from memabra._turns import Turn, TurnTable, model_step, tool_step
from memabra._usage import detect_usage
from memabra.router import Router
from memabra.storage import DatabaseUnavailableError, EpisodeLog

__all__ = ["RoutingSession", "Turn"]

logger = logging.getLogger("memabra")

# ``snapshot_every=0``: commit only on close (a count no run reaches).
_NEVER = 2**62


class RoutingSession(FeedbackAndLearning, AsyncTwins):
    """Routes, records and learns for one agent (thread-safe; one per process); from async code,
    the ``a``-prefixed twins (``abegin``, ``afinish``, ``async with``...) keep the log off the loop.

    ``router`` is the policy to serve and learn while the log has no snapshot of it (once it has,
    the active snapshot is resumed); ``log`` stores; ``memory`` holds the users' memories (memabra's
    SQL registry by default); ``skills`` and ``tool_items_`` are registered as shared candidates and
    are the only skills and tools this session offers (the registry's others belong to other apps);
    ``settings`` says how to route and learn (:class:`~memabra._settings.SessionSettings`); keyword
    ``overrides`` replace single settings.

    The router always receives each chosen candidate's local outcome (used or not).
    ``local_credit`` also makes the outcomes set per-slot credit (:mod:`memabra.router._credit`); off by default, so every slot
    of a slate shares the episode's reward (measurements in ``docs/``).
    """

    def __init__(
        self,
        *,
        router: Router,
        log: EpisodeLog,
        memory: MemoryBackend | None = None,
        skills: Sequence[Skill] = (),
        tool_items_: Sequence[RegistryItem] = (),
        extractor: FactExtractor | None = None,
        settings: SessionSettings | None = None,
        owns_log: bool = False,
        **overrides: Any,
    ) -> None:
        # a log the session opened itself (from a URL) is closed with it; one passed in is the caller's
        self._owns_log = owns_log
        if "reward_config" in overrides:
            overrides["reward"] = overrides.pop("reward_config")
        self.settings = (settings or SessionSettings()).updated(**overrides)
        self.log = log
        self.memory = memory if memory is not None else SQLMemory(log)
        # Vectors computed once and kept in the log; the model loads while the agent is built.
        self.encoder = prepare_encoder(router, log)
        if getattr(self.memory, "encoder", None) is None:
            self.memory.encoder = self.encoder
        self.skills = {f"skill:{s.name}": s for s in skills}
        # as the CLI's feedback, finalize and learner commands read them: one log, one weighting
        reward = self.settings.reward if self.settings.reward is not None else load_reward_config()
        self.rewards = RewardService(log, reward)
        self.extractor = extractor if extractor is not None else RuleFactExtractor()
        if extractor is not None and callable(getattr(extractor, "superseded", None)):  # e.g. the chat model decides
            self.memory.supersession = self.extractor  # type: ignore[assignment]
        self.kinds = self.settings.offered_kinds
        # Shared items are dated by the memory backend's clock, as memories are: a candidate's age is
        # measured from the newest in the pool, so a tool dated by another clock would shift every age.
        registered_at = self.memory.clock()
        # the model's own tokens (settings.token_counter): skills and tools counted once, here
        counter = self.settings.token_counter
        self._counts = TokenCounts(counter) if counter is not None else None
        shared = [
            replace(item, created_at=registered_at, updated_at=registered_at)
            for item in skill_items(skills) + list(tool_items_)
        ]
        self._shared = SharedItems(self._counts.shared(shared, self.skills) if self._counts else shared)
        if self._shared.items:
            log.put_items(self._shared.items)
        every = self.settings.snapshot_every
        self.runtime = PolicyRuntime(
            log,
            router,
            learn=self.settings.learn,
            local_credit=self.settings.local_credit,
            commit_every=every if every > 0 else _NEVER,
            commit_interval_s=self.settings.commit_interval_s if every > 0 else float("inf"),
            reload_interval_s=self.settings.reload_interval_s,
            reward_config=self.rewards.config,
        )
        self._turns = TurnTable()
        self._paused = PausedTurns(log, self._turns, lambda sel: assemble(sel, self.skills, self._shared.tool_ids))
        self._previous = PreviousTurns(log)

    @classmethod
    def with_tools(cls, *, tools: Sequence[Any] = (), **kwargs: Any) -> RoutingSession:
        return cls(tool_items_=tool_items(tools), **kwargs)

    # ------------------------------------------------------------------ settings read by callers

    @property
    def router(self) -> Router:
        """The router serving now (a :class:`~memabra.router.SnapshotWatcher`): its
        ``policy_version`` names the model that makes this process's decisions."""
        return self.runtime.router

    @property
    def budget(self) -> Budget:
        return self.settings.budget

    @property
    def local_credit(self) -> bool:
        return self.settings.local_credit

    @property
    def learn_online(self) -> bool:
        return self.settings.learn

    # ------------------------------------------------------------------ one turn

    def begin(
        self,
        *,
        user_id: str,
        query: str,
        thread_id: str | None = None,
        turn: int | None = None,
        allowed_tools: Collection[str] | None = None,
        follows: str | None = None,
    ) -> Turn:
        """Route a new turn. ``allowed_tools``: the tools this run may use (``None``: all; empty:
        none; :mod:`memabra._run_scope`). ``follows``: the episode the message follows on its branch
        of the thread, read as feedback on it (``""``: none; ``None``: the thread's latest)."""
        require_user(user_id)
        shared = self._shared.allowed(allowed_tools)  # before anything is read or written
        memory_items = self._recalled(user_id, query)
        previous = self._previous.get(user_id, thread_id, follows)  # the turn the message follows
        on_previous = correction_feedback(previous, query, memory_items, self.log)
        if on_previous is not None:
            self.rewards.post_feedback(on_previous)
        turn_id = new_id()  # its first decision's episode id too (decision_id): a retry finds it logged
        t = self._routed(turn_id, user_id, query, thread_id, turn, memory_items, turn_id, shared)
        self._turns.add(t)
        self._paused.keep_running(t)
        return t

    def resume(
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
        """The turn in flight under ``turn_id``; else the one the log keeps under it (paused by an
        interrupt, or routed by a process that died before logging it), now in flight here; else,
        when neither holds it (a run retried after its model raised and the turn was logged as
        failed, one resumed from a checkpoint written before this memabra kept turns, or, with
        ``fork``, a run gone back to a checkpoint before the turn's logged end: a regenerated
        answer, whose logged decisions are another branch's), a new turn routed afresh under the
        same id, so the graph's state still names it. Its episode is a new one; the user's
        message is not read as feedback on their previous turn again (it was when first routed).
        ``bind`` names tools the new turn binds besides its routed ones (calls the lost turn's
        model made, still to run), those ``allowed_tools`` (as in :meth:`begin`) allows;
        ``messages``, the run's, give back the steps a dead process made since the log's copy was
        written. A turn whose logging node already logged it is never
        routed again: it goes on with its decision, and logging it again logs nothing; nor is one
        another process routed afresh meanwhile (:meth:`PausedTurns.routed_afresh`)."""
        with self._paused.lock:
            held = self._paused.held(turn_id, messages)
            if held is not None:
                return held
            logged, episode_id = self._paused.logged_decision(turn_id, settled=not fork, messages=messages or None)
            if logged is not None:
                return logged
            require_user(user_id)
            shared = self._shared.allowed(allowed_tools)
            logger.info("turn %s is not in flight in this process: routing it again", turn_id)
            recalled = self._recalled(user_id, query)
            t = self._routed(turn_id, user_id, query, thread_id, turn, recalled, episode_id, shared)
            return self._paused.routed_afresh(
                t, messages, [n for n in bind if allowed_tools is None or n in allowed_tools]
            )

    def kept_turn(self, turn_id: str, messages: Sequence[Any] = ()) -> Turn | None:
        """The turn in flight under ``turn_id``, else the one the log keeps (now in flight here,
        with the steps ``messages`` show it lacks), else the one already logged (logging it logs
        nothing), else ``None``. Unlike :meth:`resume` it never routes: for logging a turn, where
        a decision made now would be credited with an answer it did not shape."""
        with self._paused.lock:
            held = self._paused.held(turn_id, messages, going_on=False)
            return held if held is not None else self._paused.logged_decision(turn_id, messages=messages or None)[0]

    def running_turns(self, thread_id: str) -> frozenset[str]:
        """Ids of the thread's turns in flight in this process and not paused."""
        return self._turns.running_in(thread_id)

    def suspend(self, turn_id: str, *, waiting: bool = True) -> None:
        """Keep the turn in the log while an interrupt pauses it (:class:`PausedTurns`); ``waiting``
        false: its run stopped without one (raised, cancelled), and the copy reads as running."""
        self._paused.suspend(turn_id, waiting=waiting)

    def unpause(self, t: Turn) -> Turn | None:
        """``t``, paused here, going on; ``None`` where the run needs a new turn (:class:`PausedTurns`)."""
        return self._paused.unpause(t)

    def _recalled(self, user_id: str, query: str) -> Sequence[RegistryItem]:
        # counted before anything is written: a failing token counter fails the turn unlogged
        items = self.memory.recall(user_id, query)
        return self._counts.memories(items) if self._counts else items

    def _routed(
        self,
        turn_id: str,
        user_id: str,
        query: str,
        thread_id: str | None,
        turn: int | None,
        memory_items: Sequence[RegistryItem],
        episode_id: str,
        offered: Sequence[RegistryItem],
    ) -> Turn:
        shared = own_items(offered, self.log.items(user_id)) if offered else []
        candidates = gather_candidates(memory_items, shared, self.kinds)
        turn_no = turn if turn is not None else 0
        selection: Selection | None = None
        system_prompt, tool_names = "", tuple[str, ...]()
        if candidates:
            context = RoutingContext(
                query=query, user_id=user_id, thread_id=thread_id, turn=turn_no, kinds=self.kinds, budget=self.budget
            )
            warm(self.encoder, candidates)
            selection = self.router.choose(context, candidates)
            system_prompt, tool_names = assemble(selection, self.skills, self._shared.tool_ids)
        return Turn(
            turn_id, user_id, thread_id, turn_no, query, selection, system_prompt, tool_names, episode_id=episode_id
        )

    def get_turn(self, turn_id: str) -> Turn:
        return self._turns.get(turn_id)

    def record_model_call(
        self,
        turn_id: str,
        name: str,
        latency_ms: float,
        *,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
    ) -> None:
        self._recorded(turn_id, model_step(name, latency_ms, input_tokens, output_tokens))

    def record_tool_call(
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
        self._recorded(
            turn_id, tool_step(name, arguments, result=result, status=status, error=error, latency_ms=latency_ms)
        )

    def _recorded(self, turn_id: str, step: Step) -> None:
        t = self._turns.get(turn_id)
        t.steps.append(step)
        if t.paused_at is not None:  # ended after another call's interrupt paused the turn: keep it too
            self._paused.suspend(turn_id, steps_only=True)

    def finish(self, turn_id: str, answer: str) -> str:
        """Log the turn as an episode and learn from whatever rewards became final; returns the
        episode id."""
        t = self._turns.pop(turn_id)
        if t.logged:  # one decision, one episode: a second logging node's run names the first's
            logger.warning("turn %s was already logged as episode %s: not logged again", t.id, t.episode_id)
            return t.episode_id
        used: frozenset[str] | None = None
        if t.selection is not None:
            usage = detect_usage(t.selection, t.steps, t.query, answer, self.skills)
            used = usage.used
            if usage.useful:
                t.feedback.append(
                    Feedback(t.episode_id, FeedbackKind.IMPLICIT, "memabra.usage", {"useful_ids": sorted(usage.useful)})
                )
        episode = t.episode(answer, {"latency_ms": (time.perf_counter() - t.started) * 1000.0}, used_ids=used)
        try:
            self.rewards.record(episode)
        except InvalidRecordError:
            if not self._paused.logged(t.episode_id):
                raise
            # one decision, one episode: logged by an operator who took this turn for lost, by a
            # retry of its run in another process, or by a logging node run beside this one
            logger.warning("turn %s was logged while it ran here (episode %s): not logged again", t.id, t.episode_id)
        injected = frozenset(t.selection.chosen_ids) if t.selection is not None else frozenset()
        self._previous.remember(t.user_id, t.thread_id, PreviousTurn(t.episode_id, t.query, injected))
        self._after_logging(
            t.episode_id,
            "storing the facts of its message",
            lambda: self.memory.write_from_message(t.user_id, t.query, self.extractor, episode_id=t.episode_id),
        )
        if self.learn_online:
            self._after_logging(t.episode_id, "the learner's step", self.learn_pending)
        return t.episode_id

    def _after_logging(self, episode_id: str, what: str, work: Callable[[], object]) -> None:
        # The episode is in the log: raising now would cost the caller its id and make a retry log
        # the turn twice. A learner step that failed is taken again by the next one (rewards are
        # read in commit order); facts that failed to store are named in the log.
        try:
            work()
        except Exception as exc:
            lost = _connection_lost(exc)
            if lost is None:
                logger.error("episode %s is logged, but %s failed", episode_id, what, exc_info=True)
            else:
                # an outage fails this on every turn alike: one line each names its cause, where a
                # traceback per turn would bury the log and tell nothing more
                logger.warning("episode %s is logged, but %s failed: %s", episode_id, what, lost)

    def abandon(self, turn_id: str) -> None:
        """Forget a turn that failed before it could be logged (nothing is written; the copy kept
        when it was routed stays, for ``memabra episodes paused --lost --abandon``)."""
        self._turns.discard(turn_id)

    def close(self) -> None:
        """Commit what was learned since the last snapshot and release the learner lease; a log the
        session opened from a URL is closed too (its connection pool released)."""
        self.runtime.close()
        if self._owns_log:
            self.log.close()

    def __enter__(self) -> RoutingSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _connection_lost(exc: BaseException) -> str | None:
    """One line naming a lost or refused database connection; ``None`` for any other error."""
    if isinstance(exc, DatabaseUnavailableError):
        return str(exc)  # names the database and the driver's reason, on one line
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:  # the engine saw a disconnect
        lines = str(exc.orig or exc).strip().splitlines()
        return f"{type(exc.orig or exc).__name__}: {lines[0] if lines else 'connection lost'}"
    return None
