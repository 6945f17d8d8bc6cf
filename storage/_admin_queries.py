"""Read-only aggregates for the admin view, written against the episode log's ORM.

Everything here is a ``SELECT``: the admin view writes only through :class:`EpisodeLog` and the
reward service. Aggregates take an optional time window (``since``); those that read slot draws
also read only the latest ``sample`` decisions in it, so their cost does not grow with the log.

Exploration is measured per slot draw: a draw *explored* when it picked an option less probable
than the most probable option of its slot (ties with the maximum count as greedy). A draw logged
since schema revision 0013 keeps that maximum in ``max_probability``; for an older row (NULL
there, not backfilled) it is read from the JSON distribution with the backend's JSON table
function (``json_each`` on SQLite, ``jsonb_array_elements_text`` on PostgreSQL).
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ColumnElement, Float, Subquery, case, func, literal_column, select
from sqlalchemy.orm import Session

from memabra._records import STOP_ID, EpisodeSummary, OPEResult, Page
from memabra.storage._admin_records import (
    ConversationTurn,
    KindShare,
    PolicyVersionStats,
    RewardPoint,
    SnapshotInfo,
    TurnPage,
    VersionCount,
    kind_shares_of,
)
from memabra.storage._admin_turns import kept_turns_page
from memabra.storage._convert import ope_from_row
from memabra.storage._engine import is_postgres
from memabra.storage._episode_listing import list_lowest_rewards, summaries
from memabra.storage._episodes import EpisodeFilter
from memabra.storage._log import EpisodeLog
from memabra.storage._models import DecisionRow, DecisionSlotRow, EpisodeRow, OPERunRow, PolicySnapshotRow
from memabra.storage._snapshot_audit import status_history
from memabra.storage._snapshots import rollback_version
from memabra.storage._suspended_turns import KeptTurnCounts, kept_turn_counts

__all__ = ["DEFAULT_SAMPLE", "AdminQueries"]

# A draw whose chosen probability is below the slot's maximum by more than this explored.
_TIE_TOLERANCE = 1e-9
# Draw-level aggregates read the slots of at most this many recent decisions: reading a slot's JSON
# distribution costs microseconds, so a bounded sample keeps the policies page quick on millions.
DEFAULT_SAMPLE = 10_000
# A bucket's key: PostgreSQL's to_char pattern and the length of SQLite's ISO text it keeps; both
# read "YYYY-MM-DD", "YYYY-MM-DD HH", "YYYY-MM-DD HH:MM" or "YYYY-MM-DD HH:MM:SS".
_BUCKET_WIDTHS = {
    "day": ("YYYY-MM-DD", 10),
    "hour": ("YYYY-MM-DD HH24", 13),
    "minute": ("YYYY-MM-DD HH24:MI", 16),
    "second": ("YYYY-MM-DD HH24:MI:SS", 19),
}


class AdminQueries:
    """Aggregates over an :class:`EpisodeLog` for the admin pages. Never writes."""

    def __init__(self, log: EpisodeLog) -> None:
        self.log = log

    def _session(self) -> Session:
        return Session(self.log.engine)

    # ------------------------------------------------------------------ episodes

    def lowest_rewards(self, filters: EpisodeFilter | None, offset: int, limit: int) -> Page:
        """:func:`~memabra.storage._episode_listing.list_lowest_rewards`: the worst turns first."""
        with self._session() as s:
            return list_lowest_rewards(s, filters, offset, limit)

    def episode_summary(self, episode_id: str) -> EpisodeSummary | None:
        """The listing row of one episode (its denormalised flags), or ``None`` if unknown."""
        with self._session() as s:
            r = s.get(EpisodeRow, episode_id)
            if r is None:
                return None
            return summaries(s, [r])[0]

    def conversation(self, user_id: str, thread_id: str, *, limit: int = 50) -> list[ConversationTurn]:
        """The turns of one user's thread in order (at most ``limit``, the latest ones).

        Read through the (user_id, created_at) index: a thread never spans users."""
        e = EpisodeRow
        stmt = (
            select(e.id, e.turn, e.query, e.answer, e.created_at)
            .where(e.user_id == user_id, e.thread_id == thread_id)
            .order_by(e.created_at.desc(), e.id.desc())
            .limit(limit)
        )
        with self._session() as s:
            rows = s.execute(stmt).all()
        turns = [ConversationTurn(r[0], int(r[1]), r[2], r[3], r[4]) for r in rows]
        turns.sort(key=lambda t: (t.turn, t.created_at))
        return turns

    # ------------------------------------------------------------------ kept turns

    def kept_turns(self, cursor: str | None, limit: int, *, lost_at: datetime | None = None) -> TurnPage:
        """:func:`~memabra.storage._admin_turns.kept_turns_page`: the unfinished turns, the oldest
        first, a page after ``cursor``."""
        with self._session() as s:
            return kept_turns_page(s, cursor, limit, lost_at)

    def kept_turn_counts(self, now: datetime) -> KeptTurnCounts:
        """:func:`~memabra.storage._suspended_turns.kept_turn_counts`: paused and lost turns at ``now``."""
        with self._session() as s:
            return kept_turn_counts(s, now)

    # ------------------------------------------------------------------ snapshots

    def snapshots(self, policy: str | None = None) -> list[SnapshotInfo]:
        """Every snapshot, newest first, without loading model bytes."""
        t = PolicySnapshotRow
        stmt = select(
            t.version, t.policy, t.parent, t.status, t.created_at, func.length(t.model), t.metrics, t.previous_active
        ).order_by(t.created_at.desc(), t.version.desc())
        if policy is not None:
            stmt = stmt.where(t.policy == policy)
        with self._session() as s:
            rows = s.execute(stmt).all()
        policy_of = {r[0]: r[1] for r in rows}.get
        return [
            SnapshotInfo(
                version=r[0],
                policy=r[1],
                parent=r[2],
                status=r[3],
                created_at=r[4],
                model_size=int(r[5] or 0),
                metrics=dict(r[6] or {}),
                history=status_history(r[6] or {}),
                # only an active snapshot rolls back; a promote rewrites what another would return to
                rollback_to=rollback_version(r[7], r[2], r[1], policy_of) if r[3] == "active" else None,
            )
            for r in rows
        ]

    def policy_versions(self, *, limit: int = 100, recent: int = 5_000) -> list[VersionCount]:
        """The policy versions the latest ``recent`` episodes were logged with, most recently used
        first (at most ``limit``): values the episode filter's exact match finds. Bounded like the
        draw aggregates, so the episodes page does not scan a long log for its suggestions."""
        e = EpisodeRow
        latest = (
            select(e.policy_version, e.created_at)
            .where(e.policy_version.is_not(None))
            .order_by(e.created_at.desc())
            .limit(recent)
            .subquery("latest")
        )
        last = func.max(latest.c.created_at)
        stmt = (
            select(latest.c.policy_version, func.count(), last)
            .group_by(latest.c.policy_version)
            .order_by(last.desc(), latest.c.policy_version)
            .limit(limit)
        )
        with self._session() as s:
            rows = s.execute(stmt).all()
        return [VersionCount(str(v), int(n), _aware(at)) for v, n, at in rows]

    # ------------------------------------------------------------------ rewards

    def reward_over_time(self, *, since: datetime | None = None, bucket: str = "day") -> list[RewardPoint]:
        """Mean episode reward per policy version and time bucket (``day``, ``hour``, ``minute``
        or ``second``, UTC), oldest bucket first. Episodes without a policy version (no routing
        decision) are left out."""
        if bucket not in _BUCKET_WIDTHS:
            raise ValueError(f"bucket must be one of {', '.join(map(repr, _BUCKET_WIDTHS))}, got {bucket!r}")
        e = EpisodeRow
        key = self._bucket_expression(e.created_at, bucket).label("bucket")
        stmt = (
            select(
                e.policy_version,
                key,
                func.count(),
                func.count(e.reward_total),
                func.avg(e.reward_total),
            )
            .where(e.policy_version.is_not(None))
            .group_by(e.policy_version, key)
            .order_by(key, e.policy_version)
        )
        if since is not None:
            stmt = stmt.where(e.created_at >= since)
        with self._session() as s:
            rows = s.execute(stmt).all()
        return [
            RewardPoint(
                policy_version=str(version),
                bucket=str(bucket_key),
                episodes=int(n),
                rewarded=int(rewarded),
                mean_reward=float(mean) if mean is not None else None,
            )
            for version, bucket_key, n, rewarded, mean in rows
        ]

    def time_span(self, *, since: datetime | None = None) -> tuple[datetime | None, datetime | None]:
        """The first and last episode time (in the window), for choosing a chart's bucket."""
        e = EpisodeRow
        stmt = select(func.min(e.created_at), func.max(e.created_at))
        if since is not None:
            stmt = stmt.where(e.created_at >= since)
        with self._session() as s:
            first, last = s.execute(stmt).one()
        return _aware(first), _aware(last)

    def _bucket_expression(self, column: Any, bucket: str) -> ColumnElement[str]:
        pattern, width = _BUCKET_WIDTHS[bucket]
        if is_postgres(self.log.engine):
            return func.to_char(func.timezone("UTC", column), pattern)
        # SQLite keeps UTC datetimes as ISO text ("YYYY-MM-DD HH:MM:SS.ffffff").
        return func.substr(column, 1, width)

    # ------------------------------------------------------------------ exploration and kinds

    def policy_version_stats(
        self, *, since: datetime | None = None, sample: int | None = DEFAULT_SAMPLE
    ) -> list[PolicyVersionStats]:
        """Per policy version: decisions and their joint propensities (all in the window), and
        from the slot draws of the latest ``sample`` decisions in the window (``None``: all) the
        share that explored, the stop draws and the smallest chosen slot probability."""
        return self.policy_stats_and_kind_shares(since=since, sample=sample)[0]

    def policy_stats_and_kind_shares(
        self, *, since: datetime | None = None, sample: int | None = DEFAULT_SAMPLE
    ) -> tuple[list[PolicyVersionStats], list[KindShare]]:
        """:meth:`policy_version_stats` and :meth:`kind_shares` from one read of the sampled slot
        draws: reading them (and each one's JSON distribution) is most of the policies page's
        time, and the kind shares are the same draws grouped by kind as well."""
        d, ds = DecisionRow, DecisionSlotRow
        decision_stmt = select(
            d.policy_version,
            func.count(),
            func.min(d.propensity),
            func.avg(d.propensity),
            func.min(d.created_at),
            func.max(d.created_at),
        ).group_by(d.policy_version)
        if since is not None:
            decision_stmt = decision_stmt.where(d.created_at >= since)
        recent = self._recent_decisions(since, sample)
        explored = case((ds.chosen_probability < self._slot_max_probability() - _TIE_TOLERANCE, 1), else_=0)
        stopped = case((ds.chosen_id == STOP_ID, 1), else_=0)
        draw_stmt = (
            select(
                recent.c.policy_version,
                ds.kind,
                func.count(),
                func.sum(explored),
                func.sum(stopped),
                func.min(ds.chosen_probability),
            )
            .select_from(recent)
            .join(ds, ds.decision_id == recent.c.id)
            .group_by(recent.c.policy_version, ds.kind)
        )
        sampled_stmt = select(recent.c.policy_version, func.count()).group_by(recent.c.policy_version)
        with self._session() as s:
            decisions = {r[0]: r for r in s.execute(decision_stmt).all()}
            by_kind = s.execute(draw_stmt).all()
            sampled = {r[0]: int(r[1]) for r in s.execute(sampled_stmt).all()}
        draws: dict[str, tuple[int, int, int, Any]] = {}
        chosen: list[tuple[str, str, int]] = []
        for version, kind, n, n_explored, n_stop, min_p in by_kind:
            n_draws, explored_draws, stop_draws, min_chosen = draws.get(version, (0, 0, 0, None))
            lowest = min_p if min_chosen is None or (min_p is not None and min_p < min_chosen) else min_chosen
            draws[version] = (
                n_draws + int(n),
                explored_draws + int(n_explored or 0),
                stop_draws + int(n_stop or 0),
                lowest,
            )
            if int(n) > int(n_stop or 0):
                chosen.append((version, kind, int(n) - int(n_stop or 0)))
        out = []
        for version, (_, n, min_p, mean_p, first, last) in decisions.items():
            n_draws, n_explored, n_stop, min_chosen = draws.get(version, (0, 0, 0, None))
            out.append(
                PolicyVersionStats(
                    policy_version=str(version),
                    decisions=int(n),
                    sampled_decisions=sampled.get(version, 0),
                    draws=n_draws,
                    explored_draws=n_explored,
                    stop_draws=n_stop,
                    min_propensity=_float(min_p),
                    mean_propensity=_float(mean_p),
                    min_chosen_probability=_float(min_chosen),
                    first_at=_aware(first),
                    last_at=_aware(last),
                )
            )
        out.sort(key=lambda st: st.last_at or datetime.min.replace(tzinfo=UTC), reverse=True)
        return out, kind_shares_of(chosen)

    def _recent_decisions(self, since: datetime | None, sample: int | None) -> Subquery:
        """Ids and policy versions of the latest ``sample`` decisions at or after ``since``."""
        if sample is not None and sample < 1:
            raise ValueError(f"sample must be a positive number of decisions or None, got {sample!r}")
        d = DecisionRow
        stmt = select(d.id, d.policy_version)
        if since is not None:
            stmt = stmt.where(d.created_at >= since)
        if sample is not None:
            stmt = stmt.order_by(d.created_at.desc()).limit(sample)
        return stmt.subquery("recent")

    def _slot_max_probability(self) -> ColumnElement[float]:
        # both backends evaluate COALESCE's arguments lazily: the JSON is read for old rows only
        return func.coalesce(DecisionSlotRow.max_probability, self._json_max_probability(), type_=Float())

    def _json_max_probability(self) -> ColumnElement[float]:
        """The largest probability of a slot's JSON distribution, for rows logged before 0013."""
        table = DecisionSlotRow.__tablename__
        if is_postgres(self.log.engine):
            sql = f"(SELECT max(p::float8) FROM jsonb_array_elements_text({table}.probabilities) AS p)"
        else:
            sql = f"(SELECT max(value) FROM json_each({table}.probabilities))"
        return literal_column(sql, Float())

    def kind_shares(self, *, since: datetime | None = None, sample: int | None = DEFAULT_SAMPLE) -> list[KindShare]:
        """Per policy version, the share of each kind among the candidates chosen in the latest
        ``sample`` decisions at or after ``since`` (``None``: all of them)."""
        ds = DecisionSlotRow
        recent = self._recent_decisions(since, sample)
        stmt = (
            select(recent.c.policy_version, ds.kind, func.count())
            .select_from(recent)
            .join(ds, ds.decision_id == recent.c.id)
            .where(ds.chosen_id != STOP_ID)
            .group_by(recent.c.policy_version, ds.kind)
        )
        with self._session() as s:
            rows = s.execute(stmt).all()
        return kind_shares_of([(str(version), str(kind), int(n)) for version, kind, n in rows])

    # ------------------------------------------------------------------ offline evaluation

    def ope_results(self, version: str | None = None, *, limit: int = 200) -> list[OPEResult]:
        """Stored offline-evaluation estimates (of every target policy, or of one snapshot), newest first."""
        return self.log.list_ope_runs(version, limit=limit)

    def latest_ope_results(self, versions: Collection[str], *, per_version: int = 50) -> list[OPEResult]:
        """Each snapshot's newest ``per_version`` stored estimates (a run stores about a dozen), newest
        first, in one query however old the runs: the page's list of recent runs may hold none of
        a snapshot that was evaluated long ago."""
        if not versions:
            return []
        t = OPERunRow
        newest = (
            func.row_number()
            .over(partition_by=t.snapshot_version, order_by=(t.created_at.desc(), t.estimator))
            .label("newest")
        )
        ranked = select(t.id, newest).where(t.snapshot_version.in_(sorted(set(versions)))).subquery()
        stmt = (
            select(t)
            .join(ranked, ranked.c.id == t.id)
            .where(ranked.c.newest <= per_version)
            .order_by(t.created_at.desc(), t.estimator)
        )
        with self._session() as s:
            return [ope_from_row(r) for r in s.scalars(stmt)]

    def active_policies(self) -> list[str]:
        """The policies with an active snapshot, by name."""
        t = PolicySnapshotRow
        with self._session() as s:
            return sorted(s.scalars(select(t.policy).where(t.status == "active").distinct()))

    def active_version(self, policy: str | None = None) -> str | None:
        """The version of the newest active snapshot (of ``policy``, or of any policy)."""
        t = PolicySnapshotRow
        stmt = select(t.version).where(t.status == "active").order_by(t.created_at.desc(), t.version.desc()).limit(1)
        if policy is not None:
            stmt = stmt.where(t.policy == policy)
        with self._session() as s:
            return s.scalar(stmt)


def _float(value: Any) -> float | None:
    return float(value) if value is not None else None


def _aware(value: Any) -> datetime | None:
    """Aggregates may bypass the column type, so SQLite can hand back text or naive datetimes."""
    if value is None:
        return None
    when: datetime = datetime.fromisoformat(value) if isinstance(value, str) else value
    if when.tzinfo is None:
        return when.replace(tzinfo=UTC)
    return when.astimezone(UTC)
