"""What the current policy would choose now, for a decision that was logged earlier, and which
snapshot each logged policy version belongs to.

The admin app takes the former as an injected callable (:data:`CurrentPolicy`) so it does not
depend on router internals; :class:`ActiveSnapshotPolicy` is the one the CLI injects. It restores
the active snapshot (again whenever another one is promoted) and shows its *most probable* slate
for the logged context and offered candidates (with their logged features): at each slot the option
it finds most probable, given the slots before it. Not a draw: a replay with the logged seed would
repeat the logged decision's exploration and show an explored pick as the policy's choice.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, TypeAlias

from memabra._errors import SnapshotError
from memabra._records import PolicySnapshot, Selection
from memabra.storage import AdminQueries, EpisodeLog, SnapshotIndex, snapshot_group

__all__ = [
    "ActiveSnapshotPolicy",
    "CurrentPolicy",
    "SnapshotIndex",
    "group_by_snapshot",
    "snapshot_group",
]

CurrentPolicy: TypeAlias = Callable[[Selection], tuple[str, ...]]
"""Chosen candidate ids, in slot order, that the current policy would pick for a logged decision.
Raises a :class:`~memabra.MemabraError` when it cannot say (no active snapshot, unknown policy)."""


class ActiveSnapshotPolicy:
    """The active snapshot of ``policy`` (of any policy when ``None``) as a :data:`CurrentPolicy`:
    its most probable slate (:func:`memabra.router.most_probable_slate`) for the logged decision."""

    def __init__(self, log: EpisodeLog, policy: str | None = None) -> None:
        self.log = log
        self.policy = policy
        self._lock = threading.Lock()
        self._version: str | None = None
        self._router: Any = None

    def __call__(self, selection: Selection) -> tuple[str, ...]:
        from memabra.router import most_probable_slate  # the router package loads with the policy

        return most_probable_slate(self._current_router(), selection)

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
    raise SnapshotError(
        f"snapshot {snapshot.version} is of policy {snapshot.policy!r}, which no memabra router implements"
    )


def group_by_snapshot(
    points: Sequence[Any], stats: Sequence[Any], shares: Sequence[Any], snapshot_versions: Collection[str]
) -> tuple[list[Any], list[Any], list[Any]]:
    """The policies page's reward points, version stats and kind shares merged per snapshot group,
    so the page lists (and the chart's legend holds) one entry per snapshot, however many updates."""
    index = SnapshotIndex(snapshot_versions)
    cache: dict[str, str] = {}

    def group(version: str) -> str:
        if version not in cache:
            cache[version] = index.group(version)
        return cache[version]

    merged_points: dict[tuple[str, str], list[Any]] = {}
    for p in points:
        merged_points.setdefault((group(p.policy_version), p.bucket), []).append(p)
    out_points = []
    for (version, _bucket), items in merged_points.items():
        rewarded = sum(p.rewarded for p in items)
        total = sum(p.mean_reward * p.rewarded for p in items if p.mean_reward is not None)
        out_points.append(
            replace(
                items[0],
                policy_version=version,
                episodes=sum(p.episodes for p in items),
                rewarded=rewarded,
                mean_reward=total / rewarded if rewarded else None,
            )
        )
    merged_stats: dict[str, list[Any]] = {}
    for st in stats:
        merged_stats.setdefault(group(st.policy_version), []).append(st)
    out_stats = []
    for version, items in merged_stats.items():
        decisions = sum(s.decisions for s in items)
        propensities = [s for s in items if s.mean_propensity is not None]
        weight = sum(s.decisions for s in propensities)
        out_stats.append(
            replace(
                items[0],
                policy_version=version,
                decisions=decisions,
                sampled_decisions=sum(s.sampled_decisions for s in items),
                draws=sum(s.draws for s in items),
                explored_draws=sum(s.explored_draws for s in items),
                stop_draws=sum(s.stop_draws for s in items),
                min_propensity=_least(s.min_propensity for s in items),
                mean_propensity=sum(s.mean_propensity * s.decisions for s in propensities) / weight if weight else None,
                min_chosen_probability=_least(s.min_chosen_probability for s in items),
                first_at=_least(s.first_at for s in items),
                last_at=max((s.last_at for s in items if s.last_at is not None), default=None),
            )
        )
    out_stats.sort(key=lambda s: s.last_at or datetime.min.replace(tzinfo=UTC), reverse=True)
    merged_shares: dict[tuple[str, str], int] = {}
    for share in shares:
        key = (group(share.policy_version), share.kind)
        merged_shares[key] = merged_shares.get(key, 0) + share.chosen
    totals: dict[str, int] = {}
    for (version, _kind), chosen in merged_shares.items():
        totals[version] = totals.get(version, 0) + chosen
    templates = {group(s.policy_version): s for s in shares}
    out_shares = [
        replace(templates[version], policy_version=version, kind=kind, chosen=chosen, share=chosen / totals[version])
        for (version, kind), chosen in merged_shares.items()
        if totals[version]
    ]
    return out_points, out_stats, out_shares


def _least(values: Iterable[Any]) -> Any:
    present = [v for v in values if v is not None]
    return min(present) if present else None
