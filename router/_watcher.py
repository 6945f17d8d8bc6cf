"""Picking up newer policy snapshots in a running process, without a restart.

:class:`SnapshotWatcher` is a router that delegates to the router restored from the newest snapshot a
``source`` callable returns (the runtime wires it to the SQL log's active snapshot). It asks the
source at most every ``interval_s`` seconds, on the next decision, or when :meth:`refresh` is called;
a snapshot with a new version replaces the serving router atomically under a lock.

Rewards for selections the previous router made are not lost: they are learned by the current one
off-policy (:meth:`Router.learn_logged`), with the logged propensities.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime

import numpy as np
from numpy.typing import NDArray

from memabra._errors import RouterError, SnapshotError
from memabra._records import Budget, Candidate, PolicySnapshot, RewardBreakdown, RoutingContext, Selection
from memabra.router._base import Router, SlotView
from memabra.router._features import FeatureTable
from memabra.router._similarity import Similarity
from memabra.router._snapshot_codec import decode_envelope, encode_envelope

__all__ = ["SnapshotWatcher", "learned_model", "load_router", "router_classes"]

_log = logging.getLogger("memabra")


def router_classes(classes: Iterable[type[Router]] = ()) -> dict[str, type[Router]]:
    """The router classes by policy name: ``classes`` (routers of your own) before the built-in ones."""
    from memabra.router._baselines import EmbeddingRouter, FixedListRouter, HybridRouter, LexicalRouter, RandomRouter
    from memabra.router._linear import LinearRouter
    from memabra.router._vw import VWRouter

    built_in: tuple[type[Router], ...] = (
        VWRouter,
        LinearRouter,
        HybridRouter,
        LexicalRouter,
        EmbeddingRouter,
        RandomRouter,
        FixedListRouter,
    )
    return {cls.name: cls for cls in (*built_in, *classes)}


def load_router(
    snapshot: PolicySnapshot, *, similarity: Similarity | None = None, classes: Iterable[type[Router]] = ()
) -> Router:
    """The router a snapshot describes, whatever its class (dispatch on ``snapshot.policy``):
    ``classes`` are routers of your own, found by their ``name`` before the built-in ones."""
    if not isinstance(snapshot, PolicySnapshot):
        raise SnapshotError(f"load_router needs a PolicySnapshot, got {type(snapshot).__name__}")
    registry = router_classes(classes)
    cls = registry.get(snapshot.policy)
    if cls is None:
        raise SnapshotError(
            f"snapshot {snapshot.version} is of unknown policy {snapshot.policy!r}; known: {sorted(registry)}; "
            "a router of your own restores from its class: load_router(snapshot, classes=[MyRouter]), or "
            "--policy module:Class on the command line"
        )
    return cls.restore(snapshot, similarity=similarity)


def learned_model(snapshot: PolicySnapshot) -> bytes:
    """What a snapshot has learned, as bytes: the learner's model and learned state in memabra's
    envelope, without the version name and the count of decisions served (they describe serving,
    not learning). Two snapshots give equal bytes exactly when they would learn and predict alike,
    whichever process or restart made them: a learner's checkpoint and a replay compare with it."""
    header, payload = decode_envelope(snapshot.model, snapshot.policy)
    return encode_envelope(snapshot.policy, {"state": header.get("state", {})}, payload)


def _continue_draws(fresh: Router, previous: Router) -> None:
    """Carry the count of decisions over to the router taking over: draws are seeded by
    ``(seed, n-th decision)``, and a reloaded router restarting at its snapshot's count would
    repeat the draws already made."""
    with fresh._lock:
        fresh._ensure_state()
        fresh._decisions = max(fresh._decisions, getattr(previous, "_decisions", 0))


class SnapshotWatcher(Router):
    """A router that serves the newest snapshot ``source()`` returns (``None``: keep the current).

    initial
        The router to serve until the source offers a snapshot.
    source
        Returns the latest :class:`~memabra.PolicySnapshot` (or ``None``); called at most every
        ``interval_s`` seconds. Errors from it are logged and the current router kept.
    similarity
        Passed to restored routers (``None``: each restores with the default similarity).
    learns_online
        ``False`` where :meth:`learn` is never called because a learner teaches the policy from
        the log (a :class:`~memabra.RoutingSession`): no selection is then remembered for it, here
        or by the serving router, where each id would wait for ``max_pending`` later decisions.
    """

    # Deliberate repeats: choose / learn / learn_logged restate the Router signatures (the watcher
    # is a Router and forwards to the one it serves).

    @property
    def name(self) -> str:  # type: ignore[override]  # read-only on purpose: the serving router's name
        """The serving router's policy name (what its selections record)."""
        return self._current.name

    def __init__(
        self,
        initial: Router,
        source: Callable[[], PolicySnapshot | None],
        *,
        interval_s: float = 30.0,
        similarity: Similarity | None = None,
        clock: Callable[[], float] = time.monotonic,
        max_pending: int = 100_000,
        loaded_at: datetime | None = None,
        learns_online: bool = True,
    ) -> None:
        super().__init__(similarity=similarity, max_pending=max_pending)
        if not isinstance(initial, Router):
            raise RouterError(f"initial must be a Router, got {type(initial).__name__}")
        if not callable(source):
            raise RouterError("source must be a callable returning the latest PolicySnapshot")
        self.initial = initial
        self.source = source
        self.interval_s = interval_s
        self.clock = clock
        self._current = initial
        self._loaded_version = initial.policy_version
        # when the snapshot serving was stored (None: not known), so that a different snapshot
        # under the same version (a log restored from a backup, then learned on) is not taken for it
        self._loaded_at = loaded_at
        # a snapshot that could not be restored: not fetched or logged again until another loads
        self._refused: str | None = None
        self._checked_at: float | None = None
        # weakly: a strong reference would keep every router a hot reload replaced alive (each one a
        # whole model) for as long as its selections wait for a reward, up to max_pending of them
        self._made_by: OrderedDict[str, weakref.ref[Router]] = OrderedDict()
        self.learns_online = learns_online
        self._swap_lock = threading.Lock()

    @classmethod
    def restore(cls, snapshot: PolicySnapshot, *, similarity: Similarity | None = None) -> SnapshotWatcher:
        """A watcher serving ``snapshot``'s router, with a source that never offers a newer one."""
        return cls(load_router(snapshot, similarity=similarity), lambda: None, similarity=similarity)

    @property
    def current(self) -> Router:
        """The router serving now."""
        return self._current

    @property
    def policy_version(self) -> str:
        return self._current.policy_version

    @property
    def loaded_version(self) -> str:
        """The snapshot version the serving router came from (or the initial router's version)."""
        return self._loaded_version

    def is_loaded(self, version: str, created_at: datetime | None) -> bool:
        """Whether the snapshot ``version`` stored at ``created_at`` is the one serving (same
        version, and the same snapshot where both times are known)."""
        if version != self._loaded_version:
            return False
        return self._loaded_at is None or created_at is None or created_at == self._loaded_at

    @property
    def refused_version(self) -> str | None:
        """The last snapshot version that could not be restored (still serving the one before it);
        the watcher does not try it again until another version has loaded."""
        return self._refused

    def refuse(self, version: str) -> None:
        """Treat ``version`` as unrestorable (its owner already tried it and said why)."""
        with self._swap_lock:
            self._refused = version

    def adopt(
        self, router: Router, version: str, *, replacing: str | None = None, created_at: datetime | None = None
    ) -> bool:
        """Serve ``router`` (already in the state of snapshot ``version``) without restoring it from
        bytes: a process that just wrote ``version`` serves its live learner. With ``replacing``,
        only while the snapshot loaded is still that one (checked and swapped under the lock, so a
        snapshot a reload brought in meanwhile is not undone); returns whether it adopted.
        ``created_at``: when snapshot ``version`` was stored (kept from before when not given)."""
        if not isinstance(router, Router):
            raise RouterError(f"adopt needs a Router, got {type(router).__name__}")
        with self._swap_lock:
            if replacing is not None and self._loaded_version != replacing:
                return False
            if router is not self._current:
                # a fresher copy of the same snapshot's line after every learned reward: not news
                level = logging.DEBUG if version == self._loaded_version else logging.INFO
                _log.log(level, "serving the live learner at %s (was %s)", version, self._current.policy_version)
                _continue_draws(router, self._current)
            if created_at is not None or version != self._loaded_version:
                self._loaded_at = created_at
            self._current = router
            self._loaded_version = version
            return True

    def refresh(self, *, force: bool = True) -> bool:
        """Ask the source for a newer snapshot now; ``True`` if the serving router changed."""
        with self._swap_lock:
            now = self.clock()
            if not force and self._checked_at is not None and now - self._checked_at < self.interval_s:
                return False
            self._checked_at = now
            try:
                snapshot = self.source()
            except Exception:  # noqa: BLE001 - a failing source must not take serving down
                _log.exception("snapshot source failed; keeping policy %s", self._current.policy_version)
                return False
            if (
                snapshot is None
                or snapshot.version == self._refused
                or self.is_loaded(snapshot.version, snapshot.created_at)
            ):
                return False
            try:
                fresh = load_router(snapshot, similarity=self.similarity, classes=(type(self._current),))
            except Exception:  # noqa: BLE001 - a snapshot that does not restore must not take serving down
                _log.exception(
                    "snapshot %s cannot be restored; keeping policy %s (not retried until another snapshot "
                    "is made active)",
                    snapshot.version,
                    self._current.policy_version,
                )
                self._refused = snapshot.version
                return False
            _log.info("serving policy %s (was %s)", snapshot.version, self._current.policy_version)
            _continue_draws(fresh, self._current)
            self._current = fresh
            self._loaded_version = snapshot.version
            self._loaded_at = snapshot.created_at
            self._refused = None
            return True

    # ------------------------------------------------------------------------- delegation
    def featurize(
        self, context: RoutingContext, candidates: Sequence[Candidate], budget: Budget | None = None
    ) -> FeatureTable:
        return self._current.featurize(context, candidates, budget)

    def choose(
        self,
        context: RoutingContext,
        candidates: Sequence[Candidate],
        budget: Budget | None = None,
        *,
        features: FeatureTable | None = None,
        seed: int | None = None,
    ) -> Selection:
        self.refresh(force=False)
        router = self._current
        selection = router.choose(context, candidates, budget, features=features, seed=seed)
        if not self.learns_online:
            router._forget_pending(selection.id)
            return selection
        with self._lock:
            self._made_by[selection.id] = weakref.ref(router)
            while len(self._made_by) > self.max_pending:
                self._made_by.popitem(last=False)
        return selection

    def learn(
        self,
        selection: Selection,
        reward: RewardBreakdown | float,
        outcomes: Mapping[str, float] | None = None,
        *,
        local_credit: bool = True,
        missing: Sequence[str] = (),
    ) -> None:
        if not self.learns_online:
            raise RouterError(
                "this router serves a session that learns from its log: give the episode feedback "
                "(agent.feedback) rather than calling learn"
            )
        with self._lock:
            made = self._made_by.get(selection.id) if isinstance(selection, Selection) else None
        if made is None:
            named = getattr(selection, "id", selection)
            raise RouterError(f"selection {named!r} was not made by this watcher (or was already learned from)")
        maker = made()  # None once the router that made it was replaced and collected
        if maker is not None and maker is self._current:
            maker.learn(selection, reward, outcomes, local_credit=local_credit, missing=missing)
        else:
            self._current.learn_logged(selection, reward, outcomes, local_credit=local_credit, missing=missing)
        with self._lock:
            self._made_by.pop(selection.id, None)

    def learn_logged(
        self,
        selection: Selection,
        reward: RewardBreakdown | float,
        outcomes: Mapping[str, float] | None = None,
        *,
        local_credit: bool = True,
        missing: Sequence[str] = (),
    ) -> None:
        self._current.learn_logged(selection, reward, outcomes, local_credit=local_credit, missing=missing)

    def slot_probabilities(self, selection: Selection) -> tuple[tuple[float, ...], ...]:
        return self._current.slot_probabilities(selection)

    def snapshot(self) -> PolicySnapshot:
        return self._current.snapshot()

    def replica(
        self, *, similarity: Similarity | None = None, version: str | None = None, parent: str | None = None
    ) -> SnapshotWatcher:
        """A watcher serving a replica of the serving router, with a source that never offers a
        newer one (as :meth:`restore` gives for :meth:`snapshot`)."""
        twin = self._current.replica(similarity=similarity, version=version, parent=parent)
        return type(self)(twin, lambda: None, similarity=similarity)

    def _slot_distribution(self, view: SlotView) -> NDArray[np.float64]:
        return self._current._distribution(view)
