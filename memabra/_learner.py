"""The learner: one per policy, exactly once, in commit order, resumable at any instant.

The Decision Service / Personalizer split: serving processes route and append decisions, feedback
and rewards to the log; the learner holding the policy's lease (:class:`memabra.storage.LearnerLease`)
closes due feedback windows, reads final rewards in commit order, learns each one with its logged
propensities (:meth:`Router.learn_logged`), and commits the model bytes together with the position
it has read to, in one transaction (:meth:`memabra.storage.LearnerStore.commit`). A learner killed
at any instant resumes from its last commit; uncommitted progress is simply learned again. Its
model is therefore byte-identical to :func:`~memabra._replay.replay` of the same rewards, from
scratch or from the base the learner started from (a trained router an agent was given, stored in
the log first and named in every snapshot's metadata, so that the replay starts where it did).

The same loop runs in-process in every agent (the embedded default): a process that takes the lease
learns, one that cannot only serves and reloads what the holder publishes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from memabra._feedback import RewardService
from memabra._learner_start import learner_start
from memabra._learners_here import register, warn_if_held_here
from memabra._records import PolicySnapshot
from memabra._replay import DEFAULT_POLICY, LEARNER_SIMILARITY, META_KEY, READ_BATCH, fresh_router, learn_item, replay
from memabra._reward import RewardConfig
from memabra.router import Router, Similarity
from memabra.storage import (
    SQLITE_LEASE_TTL,
    START,
    EpisodeLog,
    LearnerLease,
    LearnerStore,
    LeaseLostError,
    ReadPosition,
)
from memabra.storage._learner_commit import read_digest

__all__ = ["DEFAULT_POLICY", "Learner", "LearnerStatus", "fresh_router", "learn_item", "replay"]

logger = logging.getLogger("memabra")

# How often a learner holding the lease checks that the log's checkpoint is still its last commit: a
# restore puts it back, and a learner past the restored log's newest reward has nothing to commit
# that would be refused. A read per interval, not per turn (an in-process learner steps at each).
CHECKPOINT_RECHECK_S = 5.0


@dataclass(frozen=True, slots=True)
class LearnerStatus:
    """What one :meth:`Learner.step` did."""

    holds_lease: bool
    learned: int
    committed: PolicySnapshot | None


class Learner:
    """One policy's learner over ``log``.

    make_router
        Builds the fresh router a learner with no checkpoint starts from (its class must be the
        policy's); a checkpoint, when the log has one, is restored instead.
    base
        When given and it returns a snapshot (stored in the log), a learner with no checkpoint
        starts from a copy of it instead of ``make_router()``, and records its version in every
        snapshot it commits (``metrics["learner"]["base"]``) for :func:`replay`.
    commit_every, commit_interval_s
        Commit after that many new rewards, or that many seconds after the first uncommitted one.
    reward_config
        Used to close feedback windows that have passed (the default reward of an episode).
    on_commit
        Called with each stored snapshot (the in-process agent serves it at once).
    encoder
        The key of the encoder the serving processes log features with, recorded in each snapshot
        (``None``: the similarity's own, else the one the lineage's start recorded).
    """

    def __init__(
        self,
        log: EpisodeLog,
        make_router: Callable[[], Router],
        *,
        policy: str | None = None,
        local_credit: bool = False,
        commit_every: int = 100,
        commit_interval_s: float = 30.0,
        reward_config: RewardConfig | None = None,
        similarity: Similarity | None = None,
        on_commit: Callable[[PolicySnapshot], None] | None = None,
        lease_ttl: timedelta = SQLITE_LEASE_TTL,
        base: Callable[[], PolicySnapshot | None] | None = None,
        encoder: str | None = None,
    ) -> None:
        self.log = log
        self.encoder = encoder
        self.make_router = make_router
        self.base = base
        self.policy = policy or make_router().name
        self.local_credit = local_credit
        self.commit_every = commit_every
        self.commit_interval_s = commit_interval_s
        self.similarity = similarity if similarity is not None else LEARNER_SIMILARITY
        self.on_commit = on_commit
        self.rewards = RewardService(log, reward_config)
        self._store = LearnerStore(log.engine)
        self._lease = LearnerLease(log.engine, self.policy, ttl=lease_ttl)
        self._router: Router | None = None
        self._torn = False
        self._root = ""
        self._base: str | None = None
        self._committed = START
        self._position = START
        # the fingerprint of the rewards read since the last commit, which the commit checks
        self._read = 0
        self._learned = 0
        self._committed_learned = 0
        self._committed_here = 0
        self._pending_since: float | None = None
        self._last_snapshot: str | None = None
        self._checked_at = time.monotonic()
        self._told_standby = False
        register(self, self._lease)

    # ------------------------------------------------------------------ state

    @property
    def holds_lease(self) -> bool:
        return self._lease.held

    @property
    def router(self) -> Router | None:
        """The learner's live router while this process holds the lease (else ``None``)."""
        return self._router if self._lease.held else None

    @property
    def position(self) -> ReadPosition:
        return self._position

    @property
    def learned(self) -> int:
        """Rewards learned in this lineage (committed or not)."""
        return self._learned

    @property
    def committed_here(self) -> int:
        """Rewards this learner committed since it was made: what it learned for good, not what a
        refused commit, an outage or a restore made it drop (learned again by whoever resumes)."""
        return self._committed_here

    @property
    def pending(self) -> int:
        """Rewards learned but not yet committed."""
        return self._learned - self._committed_learned

    @property
    def torn(self) -> bool:
        """Stopped in the middle of learning a reward (an exception, or a stop raised as
        KeyboardInterrupt, between the model's update and the position's move past that reward):
        :meth:`commit` and :meth:`close` then drop the :attr:`pending` rewards instead of storing a
        model that does not match its position; the next lease holder learns them again."""
        return self._torn

    # ------------------------------------------------------------------ the loop

    def acquire(self) -> bool:
        """Take the lease if free and resume from the last commit; ``True`` while held."""
        if self._lease.held:
            if self._lease.renew():
                return True
            self._drop()
            return False
        if not self._lease.acquire():
            if not self._told_standby:  # once: it tries again at every turn
                self._told_standby = warn_if_held_here(self)
            return False
        try:
            self._resume()
        except Exception:
            self._lease.release()
            raise
        return True

    def step(self, *, finalize: bool = True) -> LearnerStatus:
        """Learn every final reward not yet learned (taking the lease if it is free), and commit when
        due. A standby (lease held elsewhere) does nothing."""
        if self._torn:  # the last step raised midway: start again from the last commit
            self._drop_torn()
        resumed = not self._lease.held
        if not self.acquire():
            return LearnerStatus(False, 0, None)
        if not resumed and not self._checkpoint_is_mine():
            return LearnerStatus(False, 0, None)
        if finalize:
            self.rewards.finalize_due()
        assert self._router is not None
        n = 0
        committed = None
        # One read per step: an in-process learner must not hold up the turn that called it.
        for final in self._store.read_final(self._position, limit=READ_BATCH):
            # set until the position moves past the reward: an exception or a stop (SIGTERM turned
            # KeyboardInterrupt) raised in between leaves a model that does not match its position
            self._torn = True
            learn_item(self._router, final.item, local_credit=self.local_credit)
            self._position = final.position
            self._read = read_digest(self._read, final.position, final.item.reward.total)
            self._learned += 1
            self._torn = False
            n += 1
            if self._pending_since is None:
                self._pending_since = time.monotonic()
            if self.pending >= self.commit_every:
                committed = self.commit() or committed
                if self._router is None:  # the lease was lost while committing
                    return LearnerStatus(False, n, committed)
        if self._commit_due():
            committed = self.commit() or committed
        return LearnerStatus(self._lease.held, n, committed)

    def commit(self, *, force: bool = False) -> PolicySnapshot | None:
        """Write the model and the read position in one transaction (nothing to do: ``None``)."""
        if self._router is None or not self._lease.held:
            return None
        if self._torn:
            self._drop_torn()
            return None
        if self.pending == 0 and not (force and self._last_snapshot is None):
            return None
        record = self.live_snapshot()
        try:
            stored = self._store.commit(
                record, previous=self._committed, position=self._position, learned=self._learned, read=self._read
            )
        except LeaseLostError as exc:
            logger.warning("learner of %s stands by: %s", self.policy, exc)
            self._drop()
            self._lease.release()
            return None
        self._committed = self._position
        self._committed_here += self._learned - self._committed_learned
        self._committed_learned = self._learned
        self._read = 0
        self._pending_since = None
        self._last_snapshot = stored.version
        logger.info(
            "learner %s committed %s (%d rewards, %s)", self.policy, stored.version, self._learned, stored.status
        )
        if self.on_commit is not None:
            self.on_commit(stored)
        return stored

    def live_snapshot(self) -> PolicySnapshot:
        """The learner's model now, named and described as :meth:`commit` would store it."""
        router = self._live()
        snap = router.snapshot()
        version, parent = self._live_name()
        meta: dict[str, Any] = {
            "root": self._root,
            "local_credit": self.local_credit,
            "learned": self._learned,
            "position": [self._position.seq, self._position.episode_id],
        }
        if self._base is not None:
            meta["base"] = self._base
        return replace(snap, version=version, parent=parent, metrics={**snap.metrics, META_KEY: meta})

    def live_router(self, *, similarity: Similarity | None = None) -> Router:
        """A router of its own in the learner's state now, named as :meth:`live_snapshot` names it
        (``load_router(live_snapshot())`` without encoding and decoding the model)."""
        version, parent = self._live_name()
        return self._live().replica(similarity=similarity, version=version, parent=parent)

    def _live(self) -> Router:
        if self._router is None:
            raise LeaseLostError(f"the learner of {self.policy!r} does not hold the lease")
        return self._router

    def _live_name(self) -> tuple[str, str | None]:
        version = f"{self._root}+{self._learned}" if self._learned else self._root
        # the first commit's parent is the base: a rollback from it returns to the router given
        return version, self._last_snapshot or self._base

    def close(self) -> None:
        """Commit what was learned since the last commit, then release the lease."""
        try:
            self.commit()
        finally:
            self._drop()
            self._lease.release()

    def abandon(self) -> None:
        """Release the lease without committing: what was learned since the last commit is lost
        (its rewards stay in the log and are learned again by the next lease holder)."""
        self._drop()
        self._lease.release()

    # ------------------------------------------------------------------ internals

    def _drop_torn(self) -> None:
        logger.warning(
            "learner of %s was stopped in the middle of learning a reward: dropping what it learned since its"
            " last commit (the next lease holder learns those rewards again, each once)",
            self.policy,
        )
        self.abandon()
        self._position, self._learned, self._read = self._committed, self._committed_learned, 0
        self._torn = False  # what was torn is gone: a standby's later steps have nothing to drop

    def _checkpoint_is_mine(self) -> bool:
        """Whether the log's checkpoint is still this learner's last commit (read at most every
        :data:`CHECKPOINT_RECHECK_S`). If not, the log went back under it: drop the model and the
        lease, as a refused commit does; its next step resumes from the log's checkpoint."""
        if time.monotonic() - self._checked_at < CHECKPOINT_RECHECK_S:
            return True
        checkpoint = self._store.checkpoint(self.policy)
        self._checked_at = time.monotonic()
        logged = (
            (checkpoint.snapshot_version, checkpoint.position, checkpoint.learned) if checkpoint else (None, START, 0)
        )
        if logged == (self._last_snapshot, self._committed, self._committed_learned):
            return True
        logger.warning(
            "the checkpoint of policy %s is no longer the learner's last commit %s (the log was restored from a "
            "backup, or the checkpoint forgotten): dropping its model and %d reward(s) learned since, resuming "
            "from the log's checkpoint %s",
            self.policy,
            self._last_snapshot,
            self.pending,
            logged[0],
        )
        self.abandon()
        self._position, self._learned, self._read = self._committed, self._committed_learned, 0
        return False

    def _commit_due(self) -> bool:
        if self.pending == 0:
            return False
        if self.pending >= self.commit_every:
            return True
        return self._pending_since is not None and time.monotonic() - self._pending_since >= self.commit_interval_s

    def _resume(self) -> None:
        start = learner_start(
            self.log,
            self._store,
            self.policy,
            make_router=self.make_router,
            base=self.base,
            similarity=self.similarity,
            local_credit=self.local_credit,
            encoder=self.encoder,
        )
        self._router, self._root, self._base = start.router, start.root, start.base
        self.local_credit = start.local_credit
        self._committed = self._position = start.position
        self._learned = self._committed_learned = start.learned
        self._last_snapshot = start.last_snapshot
        self._read = 0
        self._pending_since = None
        self._torn = False
        self._checked_at = time.monotonic()
        logger.info(
            "learner %s holds the lease from %s (%d rewards learned)",
            self.policy,
            self._last_snapshot or self._base or "scratch",
            self._learned,
        )

    def _drop(self) -> None:
        self._router = None
