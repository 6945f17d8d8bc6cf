"""What one agent process serves, and its share of learning.

:class:`PolicyRuntime` wires the production loop into a process:

* **Resume**: the router that serves first is the log's active snapshot of the policy (by the
  router's name), restored; the router given by the user serves only while the log has none.
* **Start**: a log with no learner checkpoint yet is learned from the given router: a fresh copy of
  its parameters when it never learned, else its learned state, stored in the log as the learner's
  base (a retired snapshot) so that :func:`~memabra._replay.replay` starts from it too.
* **Hot reload**: serving goes through a :class:`~memabra.router.SnapshotWatcher` that asks the log
  for the active version every :data:`RELOAD_INTERVAL_S` seconds (one indexed query, no model
  bytes) and, on PostgreSQL, at once when a ``memabra_policy`` NOTIFY arrives (not behind a
  transaction-pooling PgBouncer: see :mod:`memabra._policy_listen`). A promote or a rollback in the
  admin therefore reaches every process within seconds.
* **Learning**: the process runs the :class:`~memabra._learner.Learner` in-process whenever it can
  take the policy's lease; then it serves the learner's live router (fresher than any snapshot),
  otherwise what the lease holder publishes. ``close()`` (and process exit) commits what was
  learned since the last commit and releases the lease.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import TypeVar

from memabra._errors import ConfigError, UnknownSnapshotError
from memabra._learner import Learner, LearnerStatus, fresh_router
from memabra._policy_listen import NOTIFY_CHANNEL, PolicyListener
from memabra._records import PolicySnapshot, utcnow
from memabra._replay import recorded
from memabra._reward import RewardConfig
from memabra._settings import RELOAD_INTERVAL_S
from memabra.router import Router, SnapshotWatcher, learned_model, load_router
from memabra.storage import EpisodeLog, LearnerStore

__all__ = ["NOTIFY_CHANNEL", "RELOAD_INTERVAL_S", "PolicyRuntime"]

_T = TypeVar("_T")

logger = logging.getLogger("memabra")

# How often a process that does not hold the learner lease tries to take it.
LEASE_RETRY_S = 2.0

# What serving a learner that has published nothing yet is tagged with (no snapshot has this name).
_UNPUBLISHED = "(unpublished)"

_OPEN: weakref.WeakSet[PolicyRuntime] = weakref.WeakSet()


def _close_all() -> None:
    for runtime in list(_OPEN):
        try:
            runtime.close()
        except Exception as exc:  # noqa: BLE001 - exiting: say so and carry on with the others
            logger.warning("saving what was learned at exit failed: %s", exc)


atexit.register(_close_all)


class PolicyRuntime:
    """The serving router of one process and, while it holds the lease, the policy's learner."""

    def __init__(
        self,
        log: EpisodeLog,
        router: Router,
        *,
        learn: bool = True,
        local_credit: bool = False,
        commit_every: int = 100,
        commit_interval_s: float = 30.0,
        reload_interval_s: float = RELOAD_INTERVAL_S,
        reward_config: RewardConfig | None = None,
        listen: bool = True,
    ) -> None:
        self.log = log
        self.policy = router.name
        self._store = LearnerStore(log.engine)
        self._given = router
        # Taken before the given router serves a turn: what it had learned when it was handed over.
        self._base = _learned_state(router) if learn else None
        active = self._store.active_version(self.policy)
        if self._base is not None:
            self._note_set_aside(active)
        self._first_loaded_at: datetime | None = None
        initial, refused = self._first_router(active)
        self.watcher = SnapshotWatcher(
            initial,
            self._source,
            interval_s=reload_interval_s,
            similarity=router.similarity,
            loaded_at=self._first_loaded_at,
            # turns are learned from the log (the Learner here or in another process), never online
            learns_online=False,
        )
        if refused is not None:
            self.watcher.refuse(refused)
        self.learner: Learner | None = None
        if learn:
            self.learner = Learner(
                log,
                self._make_router,
                policy=self.policy,
                local_credit=local_credit,
                commit_every=commit_every,
                commit_interval_s=commit_interval_s,
                reward_config=reward_config,
                similarity=router.similarity,
                on_commit=self._committed,
                base=self._store_base if self._base is not None else None,
            )
        self._lock = threading.RLock()
        # guards the hand-over between a thread stepping and one asking it for another step
        self._step_guard = threading.Lock()
        self._step_again = False
        self._following: str | None = None
        self._next_try = 0.0
        self._closed = False
        self._listener: PolicyListener | None = None
        if listen and log.engine.dialect.name == "postgresql":
            self._listener = PolicyListener(self)
        _OPEN.add(self)
        log.when_closed(self._abandon)

    # ------------------------------------------------------------------ serving

    @property
    def router(self) -> Router:
        return self.watcher

    @property
    def closed(self) -> bool:
        """Closed (or its log was): it learns no more."""
        return self._closed

    def _source(self) -> PolicySnapshot | None:
        active = self._store.active_stamp(self.policy)
        # a version that did not restore is not fetched again (its model bytes, every interval); a
        # version already loaded is, when it is another snapshot (a restored log learned on)
        if active is None or active[0] == self.watcher.refused_version or self.watcher.is_loaded(*active):
            return None
        return self.log.get_snapshot(active[0])

    def _first_router(self, active: str | None) -> tuple[Router, str | None]:
        """What serves first, and the active version that could not be restored (else ``None``):
        the active snapshot; when it does not restore (a corrupted or mislabelled promote), the
        learner's last published snapshot, else the router given, so that a bad promote does not
        keep new processes from starting (those running keep serving what they had)."""
        if active is None:
            return self._given, None
        checkpoint = self._store.checkpoint(self.policy)
        fallbacks = [checkpoint.published, checkpoint.snapshot_version] if checkpoint is not None else []
        for version in dict.fromkeys([active, *fallbacks]):
            if version is None:
                continue
            try:
                snapshot = self.log.get_snapshot(version)
                restored = load_router(snapshot, similarity=self._given.similarity, classes=(type(self._given),))
            except Exception:  # noqa: BLE001 - say why and try the next one
                logger.exception("policy %s: snapshot %s cannot be restored", self.policy, version)
                continue
            if version != active:
                logger.error(
                    "policy %s: the active snapshot %s cannot be restored; serving %s until another one is made active",
                    self.policy,
                    active,
                    version,
                )
            self._first_loaded_at = snapshot.created_at
            return restored, None if version == active else active
        logger.error(
            "policy %s: the active snapshot %s cannot be restored; serving the router given (%s) until another "
            "one is made active",
            self.policy,
            active,
            self._given.policy_version,
        )
        return self._given, active

    def _make_router(self) -> Router:
        # A log with no learner yet and an untrained router given: a fresh one with its parameters.
        given = self._given
        return fresh_router(self.policy, given.get_params(), similarity=given.similarity, classes=(type(given),))

    def _store_base(self) -> PolicySnapshot:
        """The given router's learned state as stored in the log (stored now unless it already is):
        the start of a learner with no checkpoint, which :func:`replay` must be able to read."""
        base = self._base
        assert base is not None
        version, n = base.version, 1
        while (stored := self._stored(version)) is not None:
            if stored.policy == base.policy and learned_model(stored) == learned_model(base):
                return stored
            n += 1  # the same name learned differently elsewhere: store it under a free one
            version = f"{base.version}~{n}"
        parent = base.parent if base.parent is not None and self._stored(base.parent) is not None else None
        # retired: it served (the turns before the learner started) and is not the policy's active one
        record = replace(base, version=version, parent=parent, status="retired", created_at=utcnow())
        self.log.save_snapshot(record)
        logger.info("stored the router given to policy %s as %s, the learner's starting point", self.policy, version)
        return record

    def _stored(self, version: str) -> PolicySnapshot | None:
        try:
            return self.log.get_snapshot(version)
        except UnknownSnapshotError:
            return None

    def _note_set_aside(self, active: str | None) -> None:
        """Say so when a trained router is passed to a log whose learner already has a lineage:
        the log's own model wins (silent when the router is that lineage's start or head)."""
        assert self._base is not None
        checkpoint = self._store.checkpoint(self.policy)
        if checkpoint is None or checkpoint.snapshot_version is None:
            return
        given = self._base.version
        if given not in (active, checkpoint.snapshot_version, recorded(self.log, self.policy).base):
            logger.warning(
                "policy %s: the learner resumes from the log's checkpoint %s; the trained router passed in (%s) "
                "is not used",
                self.policy,
                checkpoint.snapshot_version,
                given,
            )

    def _committed(self, stored: PolicySnapshot) -> None:
        if stored.status == "active":
            self._serve_learner(stored.version, created_at=stored.created_at)

    def _serve_learner(self, tag: str, *, replacing: str | None = None, created_at: datetime | None = None) -> None:
        """Serve a copy of the learner's live model. A copy, because predictions move VW's example
        counters: the learner itself only learns, so its bytes stay equal to a replay's.
        ``replacing``: only while the watcher still serves that version (see ``adopt``)."""
        assert self.learner is not None
        live = self.learner.live_router(similarity=self._given.similarity)
        if self.watcher.adopt(live, tag, replacing=replacing, created_at=created_at):
            self._following = tag

    # ------------------------------------------------------------------ learning

    def step(self) -> LearnerStatus | None:
        """One learner step if this process holds (or can take) the lease; ``None`` otherwise.

        Turns served at once all ask for a step as they finish. A caller that finds another
        thread stepping does not wait for it: it asks that thread for one more step, which reads
        everything committed before the request, and returns ``None``. Steps queued one behind the
        other had made four threads serve fewer turns a second than one."""
        if self.learner is None or self._closed:
            return None
        with self._step_guard:
            if not self._lock.acquire(blocking=False):
                self._step_again = True
                return None
            self._step_again = False
        return self._then_release(self._step_once)

    def _then_release(self, work: Callable[[], _T]) -> _T:
        """Run ``work`` under the lock the caller acquired, then every step asked for meanwhile,
        then release it: whoever holds the lock answers the requests it turned away."""
        try:
            result = work()
            while True:
                with self._step_guard:
                    if not self._step_again or self._closed:
                        # released under the guard: a request made after the check finds the lock free
                        self._lock.release()
                        return result
                    self._step_again = False
                self._step_once()
        except BaseException:
            self._lock.release()
            raise

    def _step_once(self) -> LearnerStatus | None:
        """One step; the caller holds the lock."""
        assert self.learner is not None
        if not self.learner.holds_lease and time.monotonic() < self._next_try:
            return None
        was_holding = self.learner.holds_lease
        status = self.learner.step()
        if not status.holds_lease:
            self._next_try = time.monotonic() + LEASE_RETRY_S
            self._following = None
        elif not was_holding:
            self._start_following()
        elif status.learned and status.committed is None and (following := self._following) is not None:
            # serving follows the learner unless an operator made another snapshot active; checked
            # under the watcher's lock, as a reload (a NOTIFY's, on another thread) may land meanwhile
            self._serve_learner(following, replacing=following)
        return status

    def _start_following(self) -> None:
        checkpoint = self._store.checkpoint(self.policy)
        stamp = self._store.active_stamp(self.policy)
        active, created_at = stamp if stamp is not None else (None, None)
        published = checkpoint.published if checkpoint is not None else None
        if active is None or active == published:
            self._serve_learner(active or _UNPUBLISHED, created_at=created_at)

    def commit(self) -> str:
        """Commit what the in-process learner has learned now; returns the version serving."""
        learner = self.learner
        if learner is not None:
            self._lock.acquire()
            self._then_release(lambda: (learner.acquire(), learner.commit(force=True)))
        return self.watcher.policy_version

    def close(self) -> None:
        """Commit what the learner learned since its last commit and release its lease."""
        self._shut(save=True)

    def _abandon(self) -> None:
        # the log was closed under this runtime: nothing can be saved any more (and at exit nothing
        # is tried); the learner's lease, which holds a connection of that log, is released
        self._shut(save=False)

    def _shut(self, *, save: bool) -> None:
        if self._closed:
            return
        self._closed = True
        if self._listener is not None:
            self._listener.stop()
        with self._lock:
            if self.learner is not None:
                if save:
                    self.learner.close()
                else:
                    self.learner.abandon()
        _OPEN.discard(self)


def _learned_state(router: Router) -> PolicySnapshot | None:
    """``router``'s snapshot when it has learned anything (its version is not the one its
    parameters alone give), else ``None``: an untrained router adds nothing to a fresh learner."""
    try:
        untrained = fresh_router(
            router.name, router.get_params(), similarity=router.similarity, classes=(type(router),)
        )
    except ConfigError:  # not a policy a learner can run: the learner says so when it starts
        return None
    if router.policy_version == untrained.policy_version:
        return None
    return router.snapshot()
