"""The episode log: a facade over the storage modules. It takes and returns records; ORM rows
never leave this package, and nothing here decides what a reward or a correction is.

=====================  ==========================================================================
module                 what it stores
=====================  ==========================================================================
``_episodes``          episodes with their decisions, candidates, slots and steps; listings
``_rewards``           feedback and rewards, applied together; the learning queue
``_retotal``           stored rewards re-totalled under new weights, a page at a time
``_snapshots``         policy snapshots, promote and roll back
``_registry``          memories, skills and tools; per-user usage counts
``_offline``           decisions for replay, OPE results (``_log_offline``: the log's methods)
``_mempo_log``         decisions with a gold answer, MemPO's labels
``_retention``         deleting episodes: a retention window, one user's erasure
``_deletion_log``      the audit trail of those deletions
``_suspended_turns``   turns an interrupt paused, until their episode is logged
``_admin_queries``     the admin view's read-only aggregates (:class:`AdminQueries`)
``_rows``              the row boundary: text cleaned, ids and integers checked, bulk COPY
``_tx``                read sessions and retried write transactions
=====================  ==========================================================================
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine

from memabra._errors import ConfigError, InvalidRecordError, SchemaError
from memabra._records import (
    CandidateKind,
    Episode,
    EpisodeSummary,
    Feedback,
    FeedbackReceipt,
    LearningItem,
    Page,
    PolicySnapshot,
    RegistryItem,
    RewardBreakdown,
    Selection,
    UsageCounts,
    utcnow,
)
from memabra.storage import _episodes, _registry, _rewards, _snapshots, _suspended_turns
from memabra.storage._clock import database_now
from memabra.storage._engine import make_engine, shown_url, sqlite_file
from memabra.storage._episode_listing import iter_episodes as iter_episode_rows
from memabra.storage._episode_listing import list_episodes as list_episode_page
from memabra.storage._episodes import EpisodeFilter
from memabra.storage._log_offline import OfflineMethods
from memabra.storage._log_retention import RetentionMethods
from memabra.storage._migrate import check_schema
from memabra.storage._retotal import RetotalMethods
from memabra.storage._rewards import Scorer
from memabra.storage._snapshots import PruneResult
from memabra.storage._sqlite import unwritable_folder
from memabra.storage._status import LogStatus, log_status
from memabra.storage._suspended_turns import SuspendedTurn
from memabra.storage._tx import Transactions

__all__ = ["DEFAULT_FEEDBACK_WINDOW", "EpisodeFilter", "EpisodeLog", "Scorer"]

logger = logging.getLogger("memabra")

DEFAULT_FEEDBACK_WINDOW = timedelta(minutes=10)


def _refuse_a_missing_sqlite_file(engine: Engine) -> None:
    """Opening a log never creates its database: connecting to a SQLite path that does not exist
    would leave an empty file there (:func:`~memabra.storage.open_log` creates one with its schema)."""
    path = sqlite_file(engine)
    if path is not None and not path.exists():
        where = shown_url(engine.url)
        unwritable = unwritable_folder(path)
        if unwritable is not None:  # `memabra db upgrade` could not create it either
            raise ConfigError(f"no database at {path}, and {unwritable}")
        raise SchemaError(
            f"no database at {path}; create it with `memabra db upgrade --db {where}` "
            "(or memabra.storage.open_log, which creates a new SQLite file with its schema), or check the path"
        )


class EpisodeLog(RetentionMethods, RetotalMethods, OfflineMethods):
    """The SQL episode log.

    ``EpisodeLog(url)`` opens the database at ``url`` (see :func:`memabra.storage.resolve_url`
    for defaults) and refuses to work unless its schema is at this code's migration head;
    ``memabra db upgrade`` brings it there.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        engine: Engine | None = None,
        feedback_window: timedelta = DEFAULT_FEEDBACK_WINDOW,
        check: bool = True,
    ) -> None:
        self._engine = engine if engine is not None else make_engine(url)
        self._owns_engine = engine is None
        # A log dropped without close() still closes its pooled connections (psycopg warns, and a
        # server counts them, when a pool is garbage-collected with connections open).
        self._release = weakref.finalize(self, self._engine.dispose) if self._owns_engine else None
        self._closed = False
        self._on_close: list[weakref.WeakMethod[Callable[[], object]]] = []
        self._tx = Transactions(self._engine)
        self.feedback_window = feedback_window
        if check:
            try:
                if engine is None:
                    _refuse_a_missing_sqlite_file(self._engine)
                check_schema(self._engine)
            except Exception:
                self.close()
                raise

    @property
    def engine(self) -> Engine:
        return self._engine

    @property
    def transactions(self) -> Transactions:
        """Read sessions and retried writes, for storage modules added next to this one."""
        return self._tx

    @property
    def url(self) -> str:
        return shown_url(self._engine.url)

    @property
    def closed(self) -> bool:
        return self._closed

    def when_closed(self, callback: Callable[[], object]) -> None:
        """Call ``callback`` (a bound method, held weakly) when this log closes, before its pool
        goes: what holds a connection of this log (a learner's lease) lets it go with the log.
        The references of objects since freed are dropped here: a log shared by agents built and
        closed as a process goes (a graph factory per request) kept one per agent ever built."""
        self._on_close = [ref for ref in self._on_close if ref() is not None]
        self._on_close.append(weakref.WeakMethod(callback))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for ref in self._on_close:
            callback = ref()
            if callback is None:
                continue
            try:
                callback()
            except Exception as exc:  # noqa: BLE001 - closing: the pool must still be released
                logger.warning("closing what used the log failed: %s", exc)
        self._on_close.clear()
        if self._release is not None:
            self._release()

    def __enter__(self) -> EpisodeLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ episodes

    def log_episode(self, episode: Episode, *, replacing: SuspendedTurn | None = None) -> None:
        """Write one episode with everything in it, in one transaction. ``replacing``: the turn's
        copy the caller read, deleted with it only where the log still holds it as read; else nothing
        is written and :class:`TurnWentOnError` says a process went on with the turn since."""
        replaced = () if replacing is None else (replacing,)
        _episodes.log_episodes(self._tx, [episode], self.feedback_window, replacing=replaced)

    def log_episodes(self, episodes: Sequence[Episode]) -> None:
        """Write many episodes in one transaction (COPY on PostgreSQL)."""
        _episodes.log_episodes(self._tx, episodes, self.feedback_window)

    def get_episode(self, episode_id: str) -> Episode:
        return _episodes.get_episode(self._tx, episode_id)

    def injected_bodies(self, episode: Episode) -> dict[str, str]:
        """What ``episode``'s chosen skills and tools injected, as the log kept it: each body by
        the digest its candidate logged (``metadata["body_digest"]``); a decision logged before
        revision 0017 names none."""
        return _episodes.injected_bodies(self._tx, episode)

    def suspend_turn(self, turn: SuspendedTurn, *, replacing: SuspendedTurn | None = None) -> bool:
        """Keep a turn paused by an interrupt until its episode is logged (see
        :mod:`memabra.storage._suspended_turns`); pausing again replaces it. Whether it wrote
        (never where the turn's episode is logged). ``replacing``: the copy read before, replaced
        only where the log still holds it (same ``suspended_at`` and ``paused``), never a newer
        copy another process wrote since the read."""
        return _suspended_turns.save(self._tx, turn, replacing)

    def suspended_turns(
        self, *, before: datetime | None = None, limit: int = 100, lost_at: datetime | None = None
    ) -> list[SuspendedTurn]:
        """Kept turns (paused or running), the oldest first; ``before``: only those kept before it;
        ``lost_at``: only those lost by then (running past ``RUNNING_TURN_LIMIT``)."""
        for name, when in (("before", before), ("lost_at", lost_at)):
            if when is not None and when.tzinfo is None:
                raise InvalidRecordError(f"{name} must be timezone-aware, got the naive datetime {when.isoformat()}")
        return _suspended_turns.listing(self._tx, before, limit, lost_at)

    def suspended_turn(self, turn_id: str) -> SuspendedTurn | None:
        """The paused turn ``turn_id``, or ``None`` (never paused, or logged since)."""
        return _suspended_turns.load(self._tx, turn_id)

    def database_now(self) -> datetime:
        """The database's clock now (UTC, timezone-aware; PostgreSQL's, on SQLite this host's):
        the clock feedback windows, lost turns and :meth:`status` are judged by, whichever host
        asks (see "Clocks across hosts" in docs/production.md)."""
        with self._tx.read() as s:
            return database_now(s)

    def status(self, *, exact: bool = False) -> LogStatus:
        """Where the log stands: schema, episodes, feedback windows open and overdue, and per
        policy the active snapshot, the learner's checkpoint and lease, and the final rewards it
        has not read yet; the counts that grow with the log bounded (capped, or PostgreSQL's
        estimate: said so) unless ``exact``. See :mod:`memabra.storage._status`."""
        return log_status(self.engine, exact=exact)

    def resolve_episode_id(self, ref: str) -> str:
        """The whole id of the episode ``ref`` names: its id, or the start of exactly one id (at
        least four characters). :class:`UnknownEpisodeError` names the matches when several fit."""
        return _episodes.resolve_episode_id(self._tx, ref)

    def get_selection(self, decision_id: str) -> Selection:
        return _episodes.get_selection(self._tx, decision_id)

    def list_episodes(
        self, filters: EpisodeFilter | None = None, *, cursor: str | None = None, limit: int = 50, count: bool = False
    ) -> Page:
        """Newest first, keyset-paginated on (created_at, id): constant cost per page at any depth.
        A kind (the filter's, each summary's) is a kind the episode's decisions chose; ``count``
        adds how many episodes match (``Page.total``, capped)."""
        return list_episode_page(self._tx, filters, cursor, limit, count=count)

    def iter_episodes(self, filters: EpisodeFilter | None = None, *, batch: int = 1000) -> Iterator[EpisodeSummary]:
        """Every matching episode, newest first, streamed ``batch`` rows per short read."""
        return iter_episode_rows(self._tx, filters, batch=batch)

    def count_episodes(self) -> int:
        return _episodes.count_episodes(self._tx)

    # ------------------------------------------------------------------ feedback and rewards

    def add_feedback(self, feedback: Feedback, score: Scorer | None = None, *, final: bool = False) -> FeedbackReceipt:
        """Store feedback against its episode; with ``score``, also the reward it gives, in the
        same transaction (``final`` closes the window). ``duplicate`` when the idempotency key was
        seen before (nothing written), ``late`` when the reward is already final or the episode's
        feedback deadline has passed (stored, never applied), else ``stored``."""
        return _rewards.add_feedback(self._tx, feedback, score, final=final)

    def rescore(self, episode_id: str, score: Scorer, *, final: bool) -> bool:
        """Recompute a reward from what is stored, in one transaction; False if already final."""
        return _rewards.rescore(self._tx, episode_id, score, final=final)

    def set_used(self, episode_id: str, used_ids: Iterable[str]) -> None:
        """Record which chosen candidates the agent actually used (their local outcome)."""
        _rewards.set_used(self._tx, episode_id, used_ids)

    def feedback_for(self, episode_id: str, *, include_late: bool = False) -> tuple[Feedback, ...]:
        return _rewards.feedback_for(self._tx, episode_id, include_late=include_late)

    def put_reward(self, episode_id: str, reward: RewardBreakdown, *, final: bool, at: datetime | None = None) -> bool:
        """Store (or replace) an episode's reward; a final one is never replaced (False then)."""
        return _rewards.put_reward(self._tx, episode_id, reward, final=final, at=at)

    def get_reward(self, episode_id: str) -> RewardBreakdown | None:
        return _rewards.get_reward(self._tx, episode_id)

    def due_episode_ids(self, now: datetime | None = None, *, limit: int = 1000, after: str | None = None) -> list[str]:
        """Open episodes whose feedback window has passed (they get their default reward), oldest
        window first; ``after``: those after that episode in the same order (keyset paging).
        ``now``: by default the database's clock, which the windows' ends are on."""
        return _rewards.due_episode_ids(self._tx, now, limit, after)

    def claim_learning(self, *, limit: int = 1000, now: datetime | None = None) -> list[LearningItem]:
        """Final rewards not yet learned from, marked learned in the same transaction."""
        return _rewards.claim_learning(self._tx, limit, now or utcnow())

    # ------------------------------------------------------------------ registry

    def candidate_usage(self, user_id: str, candidate_ids: Sequence[str]) -> dict[str, UsageCounts]:
        """How often each candidate was offered to, chosen for, and used by this user."""
        return _registry.candidate_usage(self._tx, user_id, candidate_ids)

    def candidate_stats(self, user_id: str, candidate_ids: Sequence[str]) -> dict[str, UsageCounts]:
        """The old name of :meth:`candidate_usage`."""
        return _registry.candidate_usage(self._tx, user_id, candidate_ids)

    def put_items(self, items: Sequence[RegistryItem]) -> None:
        """Insert or replace memories, skills and tools (usage counters of a replaced row are kept)."""
        _registry.put_items(self._tx, items)

    def items(self, user_id: str, kind: CandidateKind | str | None = None) -> list[RegistryItem]:
        """The registry as one user sees it: their own rows plus shared skills and tools."""
        return _registry.items(self._tx, user_id, kind)

    def delete_item(self, kind: CandidateKind | str, owner: str, item_id: str) -> bool:
        return _registry.delete_item(self._tx, kind, owner, item_id)

    # ------------------------------------------------------------------ policy snapshots

    def save_snapshot(self, snapshot: PolicySnapshot) -> None:
        _snapshots.save_snapshot(self._tx, snapshot)

    def get_snapshot(self, version: str) -> PolicySnapshot:
        """Raises :class:`~memabra._errors.UnknownSnapshotError` for an unknown version."""
        return _snapshots.get_snapshot(self._tx, version)

    def latest_snapshot(self, policy: str | None = None, *, status: str | None = None) -> PolicySnapshot | None:
        return _snapshots.latest_snapshot(self._tx, policy, status)

    def list_snapshots(self, policy: str | None = None) -> list[PolicySnapshot]:
        return _snapshots.list_snapshots(self._tx, policy)

    def set_snapshot_status(self, version: str, status: str) -> None:
        """Promote (``active``: the previously active snapshot of the policy is retired) or retire."""
        _snapshots.set_snapshot_status(self._tx, version, status)

    def promote(self, version: str) -> None:
        """Make ``version`` its policy's active snapshot (the previously active one is retired)."""
        _snapshots.set_snapshot_status(self._tx, version, "active")

    def rollback(self, policy: str) -> PolicySnapshot:
        """Re-activate the parent of ``policy``'s active snapshot; returns it."""
        return _snapshots.rollback(self._tx, policy)

    def prune_snapshots(self, keep: int, *, policy: str | None = None, dry_run: bool = False) -> PruneResult:
        """Retention: delete old snapshots in one transaction, keeping the newest ``keep`` per
        policy, the active one with ``keep`` generations of ancestors, and every snapshot a
        learner's checkpoint or an OPE result names (``dry_run``: report only)."""
        return _snapshots.prune_snapshots(self._tx, keep, policy, dry_run=dry_run)

    def update_snapshot_metrics(self, version: str, metrics: Mapping[str, Any]) -> None:
        _snapshots.update_snapshot_metrics(self._tx, version, metrics)
