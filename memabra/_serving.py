"""What one agent process serves, and its share of learning.

:class:`PolicyRuntime` wires the production loop into a process:

* **Resume**: the router that serves first is the log's active snapshot of the policy (by the
  router's name), restored; the router given by the user serves only while the log has none.
* **Hot reload**: serving goes through a :class:`~memabra.router.SnapshotWatcher` that asks the log
  for the active version every :data:`RELOAD_INTERVAL_S` seconds (one indexed query, no model
  bytes) and, on PostgreSQL, at once when a ``memabra_policy`` NOTIFY arrives. A promote or a
  rollback in the admin therefore reaches every process within seconds.
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

from memabra._learner import Learner, LearnerStatus, fresh_router
from memabra._records import PolicySnapshot
from memabra._reward import RewardConfig
from memabra._settings import RELOAD_INTERVAL_S
from memabra.router import Router, SnapshotWatcher, load_router
from memabra.storage import EpisodeLog, LearnerStore

__all__ = ["NOTIFY_CHANNEL", "RELOAD_INTERVAL_S", "PolicyRuntime"]

logger = logging.getLogger("memabra")

# How often a process that does not hold the learner lease tries to take it.
LEASE_RETRY_S = 2.0
NOTIFY_CHANNEL = "memabra_policy"

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
        active = self._store.active_version(self.policy)
        initial = load_router(log.get_snapshot(active), similarity=router.similarity) if active is not None else router
        self.watcher = SnapshotWatcher(
            initial, self._source, interval_s=reload_interval_s, similarity=router.similarity
        )
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
            )
        self._lock = threading.RLock()
        self._following: str | None = None
        self._next_try = 0.0
        self._closed = False
        self._listener: _Listener | None = None
        if listen and log.engine.dialect.name == "postgresql":
            self._listener = _Listener(self)
        _OPEN.add(self)
        log.when_closed(self._abandon)

    # ------------------------------------------------------------------ serving

    @property
    def router(self) -> Router:
        return self.watcher

    def _source(self) -> PolicySnapshot | None:
        version = self._store.active_version(self.policy)
        if version is None or version == self.watcher.loaded_version:
            return None
        return self.log.get_snapshot(version)

    def _make_router(self) -> Router:
        # A log with no learner yet: a fresh router with the parameters of the one the user built.
        given = self._given
        return fresh_router(self.policy, given.get_params(), similarity=given.similarity)

    def _committed(self, stored: PolicySnapshot) -> None:
        if stored.status == "active":
            self._serve_learner(stored.version)

    def _serve_learner(self, tag: str) -> None:
        """Serve a copy of the learner's live model. A copy, because predictions move VW's example
        counters: the learner itself only learns, so its bytes stay equal to a replay's."""
        assert self.learner is not None
        snapshot = self.learner.live_snapshot()
        self.watcher.adopt(load_router(snapshot, similarity=self._given.similarity), tag)
        self._following = tag

    # ------------------------------------------------------------------ learning

    def step(self) -> LearnerStatus | None:
        """One learner step if this process holds (or can take) the lease; ``None`` otherwise."""
        if self.learner is None or self._closed:
            return None
        with self._lock:
            if not self.learner.holds_lease and time.monotonic() < self._next_try:
                return None
            was_holding = self.learner.holds_lease
            status = self.learner.step()
            if not status.holds_lease:
                self._next_try = time.monotonic() + LEASE_RETRY_S
                self._following = None
            elif not was_holding:
                self._start_following()
            elif status.learned and status.committed is None and self._following == self.watcher.loaded_version:
                # serving follows the learner unless an operator made another snapshot active
                self._serve_learner(self.watcher.loaded_version)
            return status

    def _start_following(self) -> None:
        checkpoint = self._store.checkpoint(self.policy)
        active = self._store.active_version(self.policy)
        published = checkpoint.published if checkpoint is not None else None
        if active is None or active == published:
            self._serve_learner(active or _UNPUBLISHED)

    def commit(self) -> str:
        """Commit what the in-process learner has learned now; returns the version serving."""
        with self._lock:
            if self.learner is not None:
                self.learner.acquire()
                self.learner.commit(force=True)
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


class _Listener:
    """LISTEN on PostgreSQL: reload as soon as a snapshot of the policy becomes active."""

    def __init__(self, runtime: PolicyRuntime) -> None:
        self._runtime = weakref.ref(runtime)
        self._stop = threading.Event()
        url = runtime.log.engine.url.set(drivername="postgresql")
        self._dsn = url.render_as_string(hide_password=False)
        self._policy = runtime.policy
        self._thread = threading.Thread(target=self._run, name="memabra-listen", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _reload(self) -> bool:
        runtime = self._runtime()
        if runtime is None:
            return False
        runtime.watcher.refresh(force=True)
        return True

    def _run(self) -> None:
        try:
            import psycopg

            with psycopg.connect(self._dsn, autocommit=True) as conn:
                schema = conn.execute("SELECT current_schema()").fetchone()
                mine = f"{schema[0] if schema else 'public'} {self._policy} "
                conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                while not self._stop.is_set():
                    for note in conn.notifies(timeout=1.0):
                        if note.payload.startswith(mine) and not self._reload():
                            return
                    if self._runtime() is None:  # the process stopped serving this runtime
                        return
        except Exception:  # noqa: BLE001 - polling still reloads; say why the push stopped
            logger.warning(
                "LISTEN %s stopped; relying on polling every %.0fs", NOTIFY_CHANNEL, RELOAD_INTERVAL_S, exc_info=True
            )
