"""What the current policy would choose now, for a decision that was logged earlier.

The admin app takes this as an injected callable (:data:`CurrentPolicy`) so it does not depend on
router internals; :class:`ActiveSnapshotPolicy` is the one the CLI injects. It restores the active
snapshot (again whenever another one is promoted) and replays the logged decision through it: the
same context, the same offered candidates with their logged features, the same seed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeAlias

from memabra._errors import SnapshotError
from memabra._records import PolicySnapshot, Selection
from memabra.storage import EpisodeLog
from memabra.storage import AdminQueries

__all__ = ["ActiveSnapshotPolicy", "CurrentPolicy"]

CurrentPolicy: TypeAlias = Callable[[Selection], tuple[str, ...]]
"""Chosen candidate ids, in slot order, that the current policy would pick for a logged decision.
Raises a :class:`~memabra.MemabraError` when it cannot say (no active snapshot, unknown policy)."""


class ActiveSnapshotPolicy:
    """The active snapshot of ``policy`` (of any policy when ``None``) as a :data:`CurrentPolicy`."""

    def __init__(self, log: EpisodeLog, policy: str | None = None) -> None:
        self.log = log
        self.policy = policy
        self._lock = threading.Lock()
        self._version: str | None = None
        self._router: Any = None

    def __call__(self, selection: Selection) -> tuple[str, ...]:
        from memabra.router import FeatureTable

        router = self._current_router()
        candidates = tuple(sc.candidate for sc in selection.offered)
        table = FeatureTable.from_rows(candidates, [sc.features for sc in selection.offered])
        replayed = router.choose(selection.context, candidates, features=table, seed=selection.seed)
        return tuple(replayed.chosen_ids)

    def _current_router(self) -> Any:
        version = AdminQueries(self.log).active_version(self.policy)
        if version is None:
            raise SnapshotError("no policy snapshot is active; promote one on the policies page")
        with self._lock:
            if version != self._version:
                self._router = _restore(self.log.get_snapshot(version))
                self._version = version
            return self._router


def _restore(snapshot: PolicySnapshot) -> Any:
    """A router in the state of ``snapshot``, found by its policy name among memabra's routers."""
    import memabra.router as routers

    # Replays pass the logged features, so a lexical-only similarity is enough and no encoder loads.
    for candidate in vars(routers).values():
        if (
            isinstance(candidate, type)
            and issubclass(candidate, routers.Router)
            and candidate is not routers.Router
            and getattr(candidate, "name", None) == snapshot.policy
        ):
            return candidate.restore(snapshot, similarity=routers.Similarity())
    load_router = getattr(routers, "load_router", None)
    if callable(load_router):
        return load_router(snapshot)
    raise SnapshotError(f"snapshot {snapshot.version} is of policy {snapshot.policy!r}, which no memabra router implements")
